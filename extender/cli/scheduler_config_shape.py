"""A KubeSchedulerConfiguration file, read and shape-checked, for ``check-scheduler-config``.

:func:`load_scheduler_config` reads the file and checks the shape of every field
:mod:`extender.cli.scheduler_config` looks at (the ``extenders`` entries, the profiles'
plugin sets), so that its checks can index the document without guarding each step; a
field of the wrong shape is an :class:`~extender.cli.errors.InputError` naming the file
and the field.  No meaning is judged here: what the settings let kube-scheduler do past
Muster is :mod:`extender.cli.scheduler_config`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from base.errors import ManifestError
from extender.cli.errors import InputError

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"

_STRING_FIELDS = ("urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb")
_BOOL_FIELDS = ("ignorable", "nodeCacheCapable", "enableHTTPS")
# The extension points whose plugin sets decide whether the plugins checked run.
_CHECKED_POINTS = ("multiPoint", "postFilter", "permit", "podGroupPostFilter")


def _describe(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def _list(value: object, field: str) -> list[Any]:
    """A list field; absent or null is the empty list (as Go decodes it)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(field, f"expected a list, got {_describe(value)}")
    return value


def _mapping(value: object, field: str) -> Mapping[str, Any]:
    """A mapping field; absent or null is the empty mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(field, f"expected a mapping, got {_describe(value)}")
    return value


def _validate_extender(entry: object, field: str) -> None:
    if not isinstance(entry, Mapping):
        raise ManifestError(field, f"expected a mapping, got {_describe(entry)}")
    for key in _STRING_FIELDS:
        if key in entry and not isinstance(entry[key], str):
            raise ManifestError(f"{field}.{key}", f"expected a string, got {_describe(entry[key])}")
    for key in _BOOL_FIELDS:
        if key in entry and not isinstance(entry[key], bool):
            raise ManifestError(
                f"{field}.{key}", f"expected true or false, got {_describe(entry[key])}"
            )
    resources = _named_entries(entry.get("managedResources"), f"{field}.managedResources")
    for index, resource in enumerate(resources):
        where = f"{field}.managedResources[{index}]"
        ignored = resource.get("ignoredByScheduler")
        if ignored is not None and not isinstance(ignored, bool):
            raise ManifestError(
                f"{where}.ignoredByScheduler", f"expected true or false, got {_describe(ignored)}"
            )


def _named_entries(value: object, field: str) -> list[Mapping[str, Any]]:
    """A list of mappings, each with a string ``name`` (plugins, managed resources)."""
    entries = _list(value, field)
    for index, entry in enumerate(entries):
        where = f"{field}[{index}]"
        if not isinstance(entry, Mapping):
            raise ManifestError(where, f"expected a mapping with a name, got {_describe(entry)}")
        if not isinstance(entry.get("name"), str):
            raise ManifestError(
                f"{where}.name", f"expected a string, got {_describe(entry.get('name'))}"
            )
    return entries


def _validate_profile(profile: object, field: str) -> None:
    if not isinstance(profile, Mapping):
        raise ManifestError(field, f"expected a mapping, got {_describe(profile)}")
    name = profile.get("schedulerName")
    if name is not None and not isinstance(name, str):
        raise ManifestError(f"{field}.schedulerName", f"expected a string, got {_describe(name)}")
    plugins = _mapping(profile.get("plugins"), f"{field}.plugins")
    for point in _CHECKED_POINTS:
        where = f"{field}.plugins.{point}"
        plugin_set = _mapping(plugins.get(point), where)
        for key in ("enabled", "disabled"):
            _named_entries(plugin_set.get(key), f"{where}.{key}")


def _validate(document: object) -> Mapping[str, Any]:
    if not isinstance(document, Mapping):
        raise ManifestError("", f"expected a {KIND} mapping, got {_describe(document)}")
    if document.get("apiVersion") != API_VERSION:
        raise ManifestError(
            "apiVersion", f"expected {API_VERSION!r}, got {_describe(document.get('apiVersion'))}"
        )
    if document.get("kind") != KIND:
        raise ManifestError("kind", f"expected {KIND!r}, got {_describe(document.get('kind'))}")
    for index, entry in enumerate(_list(document.get("extenders"), "extenders")):
        _validate_extender(entry, f"extenders[{index}]")
    for index, profile in enumerate(_list(document.get("profiles"), "profiles")):
        _validate_profile(profile, f"profiles[{index}]")
    return document


def load_scheduler_config(path: str) -> dict[str, Any]:
    """Read and shape-check a KubeSchedulerConfiguration file; raises :class:`InputError`.

    The message is one line naming the file and the field.
    """
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: cannot read: not UTF-8 text ({error.reason})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).replace("\n", " ")
        raise InputError(f"{path}: invalid YAML{line}: {problem}") from None
    try:
        _validate(document)
    except ManifestError as error:
        raise InputError(f"{path}: {error}") from None
    return dict(document)


def extender_entries(document: object) -> list[Mapping[str, Any]]:
    """The ``extenders`` entries of a document shape-checked whole (absent: none);
    raises ``ManifestError`` naming the field."""
    return _list(_validate(document).get("extenders"), "extenders")
