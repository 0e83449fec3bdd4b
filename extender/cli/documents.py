"""Manifest files read into documents, each knowing where it came from.

The first half of :func:`extender.cli.manifests.load_manifests`: every file of
``paths`` is read as YAML, or as JSON when it is JSON (``kubectl get -o json``: read
fast, its nodes and pods deferred, see ``_Deferred``); ``kind: List`` documents are
unpacked.  Each object becomes a :class:`Document` (its file, its 1-based position,
``#3`` or ``#3.items[0]`` inside a List) whose :meth:`Document.error` names all of that
in an :class:`~extender.cli.errors.InputError`.  What the objects mean is
:mod:`extender.cli.manifests`'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.cli.errors import InputError

#: libyaml's loader when PyYAML has it (many times faster than the pure-Python one).
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_JSON = json.JSONDecoder()
#: The kinds a large file has many of, decoded again one at a time (see ``_Deferred``).
_DEFERRED = ("Node", "Pod")


@dataclass(frozen=True, slots=True)
class Document:
    """One object of a manifest file: where it is, and the object."""

    path: str
    index: str
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        metadata = self.obj.get("metadata")
        if not isinstance(metadata, Mapping):
            return "?"
        name = str(metadata.get("name", "?"))
        namespace = metadata.get("namespace")
        return f"{namespace}/{name}" if namespace else name

    def full(self) -> Document:
        """The document with its object decoded, if it was deferred."""
        if isinstance(self.obj, _Deferred):
            return Document(self.path, self.index, self.obj.load())
        return self

    def error(self, field: str, message: str) -> InputError:
        where = f"{self.path} document {self.index} ({self.kind} {self.name})"
        return InputError(f"{where}: {field}: {message}")


class _Deferred(dict[str, Any]):
    """A node or pod of a JSON file, decoded again only when its turn comes (its kind,
    name and namespace meanwhile): 50,000 decoded pods held at once take ~2 GB, and
    the memory they leave behind stays with the process."""

    __slots__ = ("_end", "_start", "_text")

    def __init__(self, text: str, start: int, end: int, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata")
        if isinstance(metadata, Mapping):
            metadata = {k: metadata[k] for k in ("name", "namespace") if k in metadata}
        super().__init__(kind=obj.get("kind"), metadata=metadata)
        self._text, self._start, self._end = text, start, end

    def load(self) -> Any:
        return json.loads(self._text[self._start : self._end])


def _skip(text: str, at: int) -> int:
    while text[at] in " \t\n\r":
        at += 1
    return at


def _json_list(text: str) -> dict[str, Any]:
    """A JSON object read key by key; the pods of its ``items`` deferred (:class:`_Deferred`).
    Raises ``ValueError`` (or ``IndexError``) on anything that is not well-formed JSON."""
    decode = _JSON.raw_decode
    top: dict[str, Any] = {}
    at = _skip(text, _skip(text, 0) + 1)  # past the "{"
    while text[at] != "}":
        key, at = decode(text, at)
        at = _skip(text, at)
        if text[at] != ":":
            raise ValueError(f"expected ':' at {at}")
        at = _skip(text, at + 1)
        if key == "items" and text[at] == "[":
            items: list[Any] = []
            at = _skip(text, at + 1)
            while text[at] != "]":
                start = at
                item, at = decode(text, at)
                if isinstance(item, Mapping) and item.get("kind") in _DEFERRED:
                    item = _Deferred(text, start, at, item)
                items.append(item)
                at = _skip(text, at)
                if text[at] == ",":
                    at = _skip(text, at + 1)
                elif text[at] != "]":
                    raise ValueError(f"expected ',' or ']' at {at}")
            value: Any = items
            at += 1
        else:
            value, at = decode(text, at)
        top[key] = value
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
        elif text[at] != "}":
            raise ValueError(f"expected ',' or '}}' at {at}")
    if text[at + 1 :].strip():
        raise ValueError("extra data")
    return top


def _load(text: str) -> list[Any]:
    """The documents of a file: JSON (``kubectl get -o json``) is read as JSON, fast, its
    pods deferred; anything else (or JSON that does not parse as such) as YAML."""
    if text.lstrip()[:1] == "{":
        try:
            return [_json_list(text)]
        except (ValueError, IndexError):
            pass  # perhaps YAML's flow style: YAML says what is wrong
    return list(yaml.load_all(text, Loader=_YAML_LOADER))


def read_documents(paths: Sequence[str | Path]) -> Iterator[Document]:
    """Every object of every file of ``paths``, in order (a List's items one by one);
    raises :class:`InputError` for a file that cannot be read or parsed, or a document
    that is not a Kubernetes object."""
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as error:
            raise InputError(f"{path}: cannot read: {error.strerror}") from None
        try:
            loaded = _load(text)
        except yaml.YAMLError as error:
            where = getattr(error, "problem_mark", None)
            line = f" at line {where.line + 1}" if where is not None else ""
            problem = getattr(error, "problem", None) or str(error)
            raise InputError(f"{path}: invalid YAML{line}: {problem}") from None
        for number, obj in enumerate(loaded, start=1):
            if obj is None:
                continue
            if not isinstance(obj, Mapping):
                raise InputError(f"{path} document {number}: expected a Kubernetes object")
            if obj.get("kind") == "List":
                items = obj.get("items") or []
                if not isinstance(items, list):
                    raise InputError(f"{path} document {number} (List): items: expected a list")
                for position, item in enumerate(items):
                    if not isinstance(item, Mapping):
                        where = f"{path} document {number}.items[{position}]"
                        raise InputError(f"{where}: expected a Kubernetes object")
                    yield Document(str(path), f"{number}.items[{position}]", item)
            else:
                yield Document(str(path), str(number), obj)
