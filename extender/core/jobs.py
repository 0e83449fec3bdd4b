"""Which job a pod belongs to, and the pod's role in preemption.

A job (gang) is the set of pods sharing a pod-group name in a namespace (the
pods of an all-or-nothing controller share its name); a pod with none is a job
of one, keyed by its own name (``PodInfo.job``, read from the first of the keys
docs/design.md lists).  A controller's size (:func:`parse_owner_size`) is the gang
size of its pods' group when nothing else declares one.  Whether a pod may be a victim and
whether it may trigger preemption follow its labels and Muster's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from base import keys
from base.errors import ManifestError
from extender.core.config import MusterArgs
from extender.core.objects import PodInfo


def min_available_annotation(pod: PodInfo) -> int | None:
    """The gang size a pod's annotation declares, if any: Koordinator's min-available,
    else Kueue's pod-group total count."""
    for key in (keys.GANG_MIN_AVAILABLE_ANNOTATION, keys.KUEUE_TOTAL_COUNT_ANNOTATION):
        text = pod.annotations.get(key)
        if text is None:
            continue
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 1:
            raise ManifestError(
                f"metadata.annotations.{key}", f"{text!r} is not a positive integer"
            )
        return value
    return None


@dataclass(frozen=True, slots=True)
class OwnerSize:
    """How many pods a controller runs at once, as a gang size for the pod group its pods
    form (``None``: nothing left to run, or a size Muster cannot tell)."""

    namespace: str
    controller: str  # "Kind/name", as ``PodInfo.controller``
    size: int | None


#: The controllers whose size Muster reads: kind → (apiVersion, plural).  A batch/v1 Job
#: runs ``parallelism`` pods, capped by the completions still to go; a ReplicaSet (a
#: Deployment's pods are a ReplicaSet's) and a StatefulSet run ``replicas``.
OWNER_KINDS: Mapping[str, tuple[str, str]] = {
    "Job": ("batch/v1", "jobs"),
    "ReplicaSet": ("apps/v1", "replicasets"),
    "StatefulSet": ("apps/v1", "statefulsets"),
}


def parse_owner_size(kind: str, obj: Mapping[str, Any]) -> OwnerSize:
    """A controller of one of :data:`OWNER_KINDS` → its :class:`OwnerSize`; a field that
    is not a non-negative integer is a :class:`ManifestError` naming it."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ManifestError("metadata.name", "expected a non-empty string")
    if not isinstance(spec, Mapping):
        raise ManifestError("spec", "expected an object")
    if not isinstance(status, Mapping):
        raise ManifestError("status", "expected an object")
    if kind == "Job":
        parallelism = _count(spec.get("parallelism"), "spec.parallelism", 1)
        completions = _count(spec.get("completions"), "spec.completions", None)
        succeeded = _count(status.get("succeeded"), "status.succeeded", 0)
        assert parallelism is not None and succeeded is not None
        size = parallelism if completions is None else min(parallelism, completions - succeeded)
    elif kind in OWNER_KINDS:
        size = _count(spec.get("replicas"), "spec.replicas", 1) or 0
    else:
        raise ManifestError("kind", f"{kind!r} is not one of {', '.join(OWNER_KINDS)}")
    namespace = str(metadata.get("namespace") or "default")
    return OwnerSize(namespace, f"{kind}/{metadata['name']}", size if size > 0 else None)


def capped_by_owner(declared: int, owner: int | None) -> int:
    """A gang's declared minimum, never more than the pods its controller still runs
    (``owner``, its :class:`OwnerSize`; ``None``: unknown, or no controller).

    A controller creates no more pods than that (a Job ``min(parallelism, completions -
    succeeded)``), so a larger minimum could never be met: an elastic Job declaring
    ``minMember: 2`` with one completion to go would wait for a second pod for ever."""
    return declared if owner is None else min(declared, owner)


def _count(value: object, field: str, default: int | None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(field, f"{value!r} is not a non-negative integer")
    return value


def is_preemptible(pod: PodInfo, args: MusterArgs) -> bool:
    """May this pod be a victim?  Its label, else the ``disableDefaultPreemptible`` default."""
    label = pod.labels.get(keys.PREEMPTIBLE_LABEL)
    if label is None:
        return not args.disable_default_preemptible
    return label == "true"


def may_trigger_preemption(pod: PodInfo, args: MusterArgs) -> bool:
    """May this pod's job evict others?  ``preemptionPolicy: Never`` always forbids it."""
    if pod.preemption_policy == "Never":
        return False
    label = pod.labels.get(keys.CAN_PREEMPT_LABEL)
    if label is not None:
        return label == "true"
    return not args.disable_default_trigger_preemption
