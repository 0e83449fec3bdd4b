"""Decoding the API server's JSON for the informers, with msgspec.

Two ways, each for a list's page and for a watch's event line:

- :data:`WHOLE`: every field, the same dicts, lists and scalars ``json.loads`` gives, in
  msgspec's decoder (about twice as fast as the standard library's, and it reads bytes
  without decoding them to text first);
- :data:`LEAN`: for pods and nodes (the many, large objects): each object's
  ``apiVersion``, ``kind``, ``metadata``, ``spec`` and ``status`` (all a Pod or a Node has),
  and the fields of a ``Status`` (a watch's ``ERROR`` event), as ``WHOLE`` decodes them,
  but ``metadata.managedFields`` is skipped by the parser, never built into Python objects
  (at ~40% of a real pod's bytes, the server-side-apply bookkeeping that no parser reads).
  Any other top-level field would be skipped too: a Pod and a Node have none.

Both hand on plain dicts, so the core's parsers see what they saw with ``json.loads``, less
the managed fields.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

Json = dict[str, Any]


class _Metadata(msgspec.Struct):
    """``ObjectMeta``, every field but ``managedFields`` (left ``UNSET`` when absent).

    The fields of these structs are in the order the API server writes them, so the dicts
    made of them have their keys in the order ``json.loads`` would give."""

    name: Any = UNSET
    generateName: Any = UNSET
    namespace: Any = UNSET
    selfLink: Any = UNSET
    uid: Any = UNSET
    resourceVersion: Any = UNSET
    generation: Any = UNSET
    creationTimestamp: Any = UNSET
    deletionTimestamp: Any = UNSET
    deletionGracePeriodSeconds: Any = UNSET
    labels: Any = UNSET
    annotations: Any = UNSET
    ownerReferences: Any = UNSET
    finalizers: Any = UNSET


class _Object(msgspec.Struct):
    """A Pod or a Node (or a watch's ``Status``), its metadata without managed fields."""

    kind: Any = UNSET
    apiVersion: Any = UNSET
    metadata: _Metadata | UnsetType | None = UNSET
    spec: Any = UNSET
    status: Any = UNSET
    # A Status's own fields (an ERROR event's object).
    message: Any = UNSET
    reason: Any = UNSET
    details: Any = UNSET
    code: Any = UNSET


class _Page(msgspec.Struct):
    kind: Any = UNSET
    apiVersion: Any = UNSET
    metadata: Any = UNSET
    items: list[_Object] | UnsetType | None = UNSET


class _Event(msgspec.Struct):
    type: Any = UNSET
    object: _Object | UnsetType | None = UNSET


_METADATA_FIELDS = _Metadata.__struct_fields__
_OBJECT_FIELDS = _Object.__struct_fields__


def _metadata(meta: _Metadata) -> Json:
    out = {name: value for name in _METADATA_FIELDS if (value := getattr(meta, name)) is not UNSET}
    for name in ("labels", "annotations"):
        mapping = out.get(name)
        if type(mapping) is dict:
            out[name] = {_key(key): value for key, value in mapping.items()}
    return out


def _key(key: Any) -> Any:
    """A label's or annotation's key, one string object for every pod that has it
    (``json.loads`` shares the keys of one document, msgspec only short ones; the state
    keeps every pod's labels and annotations)."""
    return sys.intern(key) if type(key) is str else key


def _object(obj: _Object) -> Json:
    out: Json = {}
    for name in _OBJECT_FIELDS:
        value = getattr(obj, name)
        if value is UNSET:
            continue
        out[name] = _metadata(value) if isinstance(value, _Metadata) else value
    return out


def _fields(struct: msgspec.Struct) -> Json:
    return {
        name: value
        for name in struct.__struct_fields__
        if (value := getattr(struct, name)) is not UNSET
    }


_whole = msgspec.json.Decoder()
_lean_page = msgspec.json.Decoder(_Page)
_lean_event = msgspec.json.Decoder(_Event)


def decode_whole(data: bytes) -> Any:
    """JSON bytes → what ``json.loads`` gives."""
    return _whole.decode(data)


def decode_lean_page(data: bytes) -> Json:
    """A list's page of pods or nodes, its items without managed fields."""
    page = _fields(_lean_page.decode(data))
    items = page.get("items")
    if isinstance(items, list):
        page["items"] = [_object(item) if isinstance(item, _Object) else item for item in items]
    return page


def decode_lean_event(data: bytes) -> Json:
    """A watch event (``{"type", "object"}``) on a pod or a node, without managed fields."""
    event = _fields(_lean_event.decode(data))
    obj = event.get("object")
    if isinstance(obj, _Object):
        event["object"] = _object(obj)
    return event


@dataclass(frozen=True)
class Decoding:
    """How an informer decodes its list's pages and its watch's events."""

    page: Callable[[bytes], Any]
    event: Callable[[bytes], Any]


WHOLE = Decoding(decode_whole, decode_whole)
LEAN = Decoding(decode_lean_page, decode_lean_event)
