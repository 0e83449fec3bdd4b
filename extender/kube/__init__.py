"""The Kubernetes front door: API access, informers feeding the state, writers."""
