"""Notice before eviction: how long a victim may take to save its work and exit.

A job declares the notice it wants on its pods (``muster.dev/preemption-notice-seconds``);
an admin caps it per quota (``muster.dev/max-preemption-notice-seconds`` on the victim's
quota) and for the cluster (``maxPreemptionNoticeSeconds``, 0 by default: no notice).  A
victim is marked as without notice (label, annotation, ``DisruptionTarget``, event); the
mark carries its notice, and the evictor evicts it once the notice has run out, or at
once when the job answers (``muster.dev/checkpointed`` at or after the mark) or exits by
itself.  The preemptor's reservation lasts through the longest notice of its victims.
A victim that declares a checkpoint interval gets, within the same cap, notice until just
after its next save (:func:`extender.core.preemption.cost.save_notice`): waiting that long
loses almost no work.

A tenant writes the declaration and the answer: the declaration only delays its own
pods' eviction, within the admins' cap; the answer only hastens it.
"""

from __future__ import annotations

from base import keys
from base.times import claimed_time, seconds
from extender.core.marks import MAX_NOTICE_SECONDS
from extender.core.objects import PodInfo
from extender.core.state import ClusterState


def declared_notice(pod: PodInfo) -> float:
    """The notice ``pod`` declares, in seconds (0 when it declares none or nonsense: a
    declaration that cannot be read asks for nothing)."""
    return seconds(pod.annotations.get(keys.PREEMPTION_NOTICE_ANNOTATION)) or 0.0


def notice_seconds(state: ClusterState, pod: PodInfo) -> float:
    """The notice victim ``pod`` gets: what it declares, capped by its quota's
    ``muster.dev/max-preemption-notice-seconds`` (else ``maxPreemptionNoticeSeconds``)."""
    declared = declared_notice(pod)
    if declared <= 0:
        return 0.0
    return min(declared, notice_cap(state, pod))


def notice_cap(state: ClusterState, pod: PodInfo) -> float:
    """The longest notice victim ``pod`` may get: its quota's
    ``muster.dev/max-preemption-notice-seconds``, else ``maxPreemptionNoticeSeconds``; 0
    when Muster evicts victims itself (it evicts at once: no notice)."""
    if state.args.pod_should_be_deleted_when_preempted:
        return 0.0
    quota = state.charged_to(pod)
    cap = state.tree[quota].policy.max_preemption_notice_seconds if quota is not None else None
    if cap is None:
        cap = state.args.max_preemption_notice_seconds
    return min(cap, float(MAX_NOTICE_SECONDS))


def longest_notice(state: ClusterState) -> float:
    """The longest notice any victim may get: the argument's, or a quota's cap above it.
    A reservation may be held this much longer than its timeout."""
    caps = [spec.policy.max_preemption_notice_seconds for spec in state.tree.specs.values()]
    return max([state.args.max_preemption_notice_seconds, *(c for c in caps if c is not None)])


def answered(pod_annotations: dict[str, str] | None, marked_at: float) -> bool:
    """Has the job answered the notice of a mark written at ``marked_at``: does the pod's
    ``muster.dev/checkpointed`` name a time at or after it?"""
    when = claimed_time((pod_annotations or {}).get(keys.CHECKPOINTED_ANNOTATION))
    return when is not None and when >= marked_at
