"""The error every parser raises for input it cannot read: the field, and what is wrong.

Callers report ``field`` and ``message`` as they are (an HTTP 400 naming the field, a
``simulate`` exit naming the document and the field); nothing splits the text back apart.
"""

from __future__ import annotations


class ManifestError(ValueError):
    """An object that cannot be read: ``field`` is its dotted path (empty when the value
    alone is wrong and its place is not known yet), ``message`` the problem."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class QuantityError(ManifestError):
    """A value that is not a valid, non-negative Kubernetes quantity."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(field, message)
