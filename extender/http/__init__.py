"""The HTTP front door: kube-scheduler's extender verbs, health, metrics, explain endpoints."""
