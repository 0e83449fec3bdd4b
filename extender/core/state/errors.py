"""The state's one error: a pod that names a quota the tree does not have."""

from __future__ import annotations


class UnknownQuotaError(LookupError):
    """A pod names a quota that does not exist."""
