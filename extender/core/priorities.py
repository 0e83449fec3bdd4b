"""PriorityClasses as the pod parser reads them: values by name and the global default.

:func:`~extender.core.objects.parse_pod` resolves a pod's priority through
:class:`PriorityClasses`; the front doors build one from the PriorityClass objects they
read (the CLI from its manifests, the informer from the cluster) with
:func:`parse_priority_class`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from base.errors import ManifestError
from base.fields import mapping, object_name


@dataclass(frozen=True, slots=True)
class PriorityClasses:
    """PriorityClass values by name, and the global default (0 when none is marked)."""

    values: Mapping[str, int]
    global_default: int = 0

    def resolve(self, spec: Mapping[str, Any]) -> int:
        """``spec.priority``, else its class's value, else the global default."""
        priority = spec.get("priority")
        if priority is not None:
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise ManifestError("spec.priority", f"expected an integer, got {priority!r}")
            return priority
        class_name = spec.get("priorityClassName")
        if class_name is not None and not isinstance(class_name, str):
            raise ManifestError("spec.priorityClassName", f"expected a string, got {class_name!r}")
        if class_name:
            if class_name not in self.values:
                raise ManifestError(
                    "spec.priorityClassName", f"unknown PriorityClass {class_name!r}"
                )
            return self.values[class_name]
        return self.global_default


NO_PRIORITY_CLASSES = PriorityClasses(values={})


def parse_priority_class(obj: Mapping[str, Any]) -> tuple[str, int, bool]:
    """A PriorityClass → (name, value, globalDefault)."""
    metadata = mapping(obj.get("metadata"), "metadata")
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError("value", f"expected an integer, got {value!r}")
    return object_name(metadata), value, bool(obj.get("globalDefault", False))
