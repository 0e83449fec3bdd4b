"""Muster's own records on pods, and how Muster knows they are its own.

Muster writes three records on pods, in places a tenant who may edit its own pods can
write too: the reservation on a preemptor's pods (``muster.dev/reservation``), the gang
backoff on a gang's pending pods (``muster.dev/gang-backoff``) and the soft-eviction mark
on victims (``scheduling.koordinator.sh/soft-eviction``, label and annotation).  Believed
as written, a forged reservation names other namespaces' pods as victims, a forged
backoff stalls a gang, and a self-applied mark makes a pod count as leaving in every plan
(docs/security.md).  So each record carries an HMAC-SHA256 ``signature`` over what it
says, which record it is and the pod's UID (a record copied to another pod fails), keyed
by secrets only Muster reads (:class:`RecordKeys`).  :func:`believed_pod` strips every
record that fails the check from a pod object before the core reads it: the live
informer, the evictor and ``simulate`` (given the keys) call it, so a forged record is
to all of them as if it were not there.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from base import keys

#: The annotations holding Muster's records (each a JSON object).
RECORD_ANNOTATIONS = (
    keys.RESERVATION_ANNOTATION,
    keys.GANG_BACKOFF_ANNOTATION,
    keys.SOFT_EVICTION_KEY,
)
#: The field of a record that holds its signature: ``<key id>:<base64 HMAC>``.
SIGNATURE_FIELD = "signature"


@dataclass(frozen=True, slots=True)
class RecordKeys:
    """Named secret keys: records are believed when any of them verifies, and signed with
    ``signer`` (by default the last by name), so a new key is added, then the old one
    removed, losing no record."""

    keys: tuple[tuple[str, bytes], ...]
    signer: str | None = None

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("at least one record key is needed")
        object.__setattr__(self, "keys", tuple(sorted(self.keys)))
        if self.signer is not None and self.signer not in dict(self.keys):
            raise ValueError(f"no record key {self.signer!r} to sign with")

    def sign(self, record: str, uid: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """``payload`` with its signature, as the annotation ``record`` of the pod ``uid``."""
        key_id = self.signer if self.signer is not None else self.keys[-1][0]
        secret = dict(self.keys)[key_id]
        signed = {name: value for name, value in payload.items() if name != SIGNATURE_FIELD}
        signed[SIGNATURE_FIELD] = f"{key_id}:{_mac(secret, record, uid, signed)}"
        return signed

    def verify(self, record: str, uid: str, payload: Mapping[str, Any]) -> bool:
        """Did a holder of one of these keys write ``payload`` as ``record`` on pod ``uid``?"""
        signature = payload.get(SIGNATURE_FIELD)
        if not isinstance(signature, str) or ":" not in signature:
            return False
        key_id, mac = signature.rsplit(":", 1)
        secret = dict(self.keys).get(key_id)
        if secret is None:
            return False
        return hmac.compare_digest(mac, _mac(secret, record, uid, payload))


def _mac(secret: bytes, record: str, uid: str, payload: Mapping[str, Any]) -> str:
    body = {name: value for name, value in payload.items() if name != SIGNATURE_FIELD}
    message = "\n".join((record, uid, json.dumps(body, sort_keys=True, separators=(",", ":"))))
    digest = hmac.new(secret, message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def forged_records(obj: Mapping[str, Any], record_keys: RecordKeys) -> tuple[str, ...]:
    """The records on the pod object ``obj`` that Muster did not write (by the keys), in
    :data:`RECORD_ANNOTATIONS` order.  A soft-eviction label without a believed mark is
    one too: only Muster's mark makes a pod leave in Muster's eyes."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return ()
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    labels = metadata.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:  # as parse_pod names a pod without one
        uid = f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
    forged = []
    for record in RECORD_ANNOTATIONS:
        text = annotations.get(record)
        if text is None:
            if record == keys.SOFT_EVICTION_KEY and record in labels:
                forged.append(record)
            continue
        try:
            payload = json.loads(text) if isinstance(text, str) else None
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict) or not record_keys.verify(record, uid, payload):
            forged.append(record)
    return tuple(forged)


def believed_pod(
    obj: Mapping[str, Any], record_keys: RecordKeys | None
) -> tuple[Mapping[str, Any], tuple[str, ...]]:
    """The pod object as Muster believes it, and the records it dropped: every record
    :func:`forged_records` finds is removed (the soft-eviction label with its mark).
    ``obj`` itself is returned, unchanged, when nothing is dropped or ``record_keys`` is
    ``None`` (``simulate`` without keys believes its input: it is the admin's)."""
    if record_keys is None:
        return obj, ()
    forged = forged_records(obj, record_keys)
    if not forged:
        return obj, ()
    return without_records(obj, forged), forged


def without_records(obj: Mapping[str, Any], records: Sequence[str]) -> dict[str, Any]:
    """A copy of the pod object without the record annotations ``records`` (and, with
    the soft-eviction mark, its label)."""
    metadata = dict(obj.get("metadata") or {})
    annotations = dict(metadata.get("annotations") or {})
    labels = dict(metadata.get("labels") or {})
    for record in records:
        annotations.pop(record, None)
        if record == keys.SOFT_EVICTION_KEY:
            labels.pop(record, None)
    return {**obj, "metadata": {**metadata, "annotations": annotations, "labels": labels}}
