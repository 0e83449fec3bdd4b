"""Reading the fields of a Kubernetes object (camelCase JSON or YAML), or saying which
field is wrong.

Each reader takes the value and its dotted path, returns it in the expected shape
(absent means empty), and raises :class:`~base.errors.ManifestError` naming the path
otherwise.  Every parser of Kubernetes objects in Muster reads through these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from base.errors import ManifestError


def object_name(metadata: Mapping[str, Any]) -> str:
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError("metadata.name", f"expected a non-empty string, got {name!r}")
    return name


def mapping(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(field, f"expected an object, got {type(value).__name__}")
    return value


def mappings(value: object, field: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise ManifestError(field, "expected a list of objects")
    return value


def string(value: object, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ManifestError(field, f"expected a string, got {value!r}")
    return value


def string_map(value: object, field: str) -> dict[str, str]:
    result = {}
    for key, item in mapping(value, field).items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ManifestError(f"{field}.{key}", f"expected a string, got {item!r}")
        result[key] = item
    return result
