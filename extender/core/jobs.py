"""Which job a pod belongs to, and the pod's role in preemption.

A job (gang) is the set of pods sharing a pod-group name in a namespace; a
pod with none is a job of one, keyed by its own name (``PodInfo.job``, read
from the first of the keys DESIGN.md lists).  Whether a pod may be a victim and
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
    """The Koordinator min-available annotation, if the pod has one."""
    text = pod.annotations.get(keys.GANG_MIN_AVAILABLE_ANNOTATION)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise ManifestError(
            f"metadata.annotations.{keys.GANG_MIN_AVAILABLE_ANNOTATION}",
            f"{text!r} is not a positive integer",
        )
    return value


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    """A PodGroup (scheduler-plugins, either API group): its job, ``spec.minMember``
    (``None``: not set, so every pod of the job) and ``spec.scheduleTimeoutSeconds``
    (``None``: Muster's ``gangTimeoutSeconds``)."""

    namespace: str
    name: str
    min_member: int | None
    schedule_timeout_seconds: int | None = None

    @property
    def job(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_pod_group(obj: Mapping[str, Any]) -> PodGroupInfo:
    """A PodGroup object → :class:`PodGroupInfo`; a ``minMember`` that is not a positive
    integer is a :class:`ManifestError`."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ManifestError("metadata.name", "expected a non-empty string")
    if not isinstance(spec, Mapping):
        raise ManifestError("spec", f"expected an object, got {type(spec).__name__}")
    min_member = spec.get("minMember")
    if min_member is not None and (
        isinstance(min_member, bool) or not isinstance(min_member, int) or min_member < 1
    ):
        raise ManifestError("spec.minMember", f"{min_member!r} is not a positive integer")
    timeout = spec.get("scheduleTimeoutSeconds")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1
    ):
        raise ManifestError("spec.scheduleTimeoutSeconds", f"{timeout!r} is not a positive integer")
    namespace = metadata.get("namespace") or "default"
    return PodGroupInfo(str(namespace), metadata["name"], min_member, timeout)


@dataclass(frozen=True, slots=True)
class OwnerSize:
    """How many pods a controller runs at once, as a gang size for the pod group its pods
    form: for a batch/v1 Job, ``parallelism`` capped by the completions still to go
    (``None``: nothing left to run, or a size Muster cannot tell)."""

    namespace: str
    controller: str  # "Kind/name", as ``PodInfo.controller``
    size: int | None


def parse_job_size(obj: Mapping[str, Any]) -> OwnerSize:
    """A batch/v1 Job → its :class:`OwnerSize`: ``spec.parallelism`` (default 1), capped by
    ``spec.completions`` minus ``status.succeeded`` when ``completions`` is set; a field
    that is not a non-negative integer is a :class:`ManifestError` naming it."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        raise ManifestError("metadata.name", "expected a non-empty string")
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise ManifestError("spec", "expected an object")

    def count(value: object, field: str, default: int | None) -> int | None:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ManifestError(field, f"{value!r} is not a non-negative integer")
        return value

    parallelism = count(spec.get("parallelism"), "spec.parallelism", 1)
    completions = count(spec.get("completions"), "spec.completions", None)
    succeeded = count(status.get("succeeded"), "status.succeeded", 0)
    assert parallelism is not None and succeeded is not None
    size = parallelism if completions is None else min(parallelism, completions - succeeded)
    namespace = str(metadata.get("namespace") or "default")
    return OwnerSize(namespace, f"Job/{metadata['name']}", size if size > 0 else None)


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
