"""The Kubernetes front door: API access, informers feeding the snapshot, writers."""
