"""Muster's arguments, with the proposal's names and defaults.

Read from a YAML file by the CLI (``--config``); every front door hands the
same frozen :class:`MusterArgs` to the core.  Unknown keys are an error, so a
misspelt argument never silently falls back to its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from base import keys
from base.errors import ManifestError
from base.resources import parse_resource_list
from extender.core.marks import MAX_NOTICE_SECONDS
from quota.tree import QuotaPolicy, QuotaSpec, WithinQuota


class MusterArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)

    #: ``True``: a pod without the preemptible label is non-preemptible.
    disable_default_preemptible: bool = Field(True, alias="disableDefaultPreemptible")
    #: ``True``: only pods labelled ``can-preempt: "true"`` trigger preemption.
    disable_default_trigger_preemption: bool = Field(True, alias="disableDefaultTriggerPreemption")
    #: ``True``: Muster evicts victims itself instead of leaving them to an operator.
    pod_should_be_deleted_when_preempted: bool = Field(
        False, alias="podShouldBeDeletedWhenPreempted"
    )
    #: How long a committed preemption holds its room for the job's pods.
    reservation_timeout_seconds: float = Field(300.0, alias="reservationTimeoutSeconds", gt=0)
    #: How long the reserved room of a pending pod a controller owns stays its job's after
    #: the pod is deleted, for the pod the controller creates in its place.
    vacated_room_seconds: float = Field(60.0, alias="vacatedRoomSeconds", gt=0)
    #: How long a gang admitted whole keeps its pending pods' quota while they bind.
    quota_hold_seconds: float = Field(60.0, alias="quotaHoldSeconds", gt=0)
    #: A gang whose size nobody declared (no PodGroup ``minMember``, no min-available
    #: annotation) is a job of the pods that exist once none has joined it for this long:
    #: until then its pods are turned away, so no part of it binds alone.
    gang_settle_seconds: float = Field(1.0, alias="gangSettleSeconds", ge=0)
    #: How long a gang may have fewer than its min-available pods bound before Muster
    #: gives it up (a PodGroup's ``spec.scheduleTimeoutSeconds`` wins when set).
    gang_timeout_seconds: float = Field(300.0, alias="gangTimeoutSeconds", gt=0)
    #: A gang given up waits ``backoffBaseSeconds * 2**(attempts-1)``, at most
    #: ``backoffMaxSeconds``, before it is tried again (KEP-1282's requeue strategy).
    backoff_base_seconds: float = Field(60.0, alias="backoffBaseSeconds", gt=0)
    backoff_max_seconds: float = Field(3600.0, alias="backoffMaxSeconds", gt=0)
    #: How many times a gang is given up before it is not retried; ``None``: no limit.
    backoff_limit_count: int | None = Field(None, alias="backoffLimitCount", ge=0)
    #: PodDisruptionBudgets: ``BestEffort`` prefers victims no budget protects and evicts
    #: protected ones only when no other plan exists; ``Strict`` never evicts them.
    pdb_policy: Literal["BestEffort", "Strict"] = Field("BestEffort", alias="pdbPolicy")
    #: How plans that keep every guarantee and budget compare: ``PriorityFirst`` (the
    #: default, as kube-scheduler and Kueue) takes the plan whose highest-priority victim
    #: is lowest, then the one losing the least work; ``LostWorkFirst`` counts the victims
    #: the job outranks (priority below its own) as one priority, so among them the plan
    #: losing the least work wins, and takes a victim of the job's own priority or above
    #: (only a quota's reclaim may) lowest first, as before.
    victim_ranking: Literal["PriorityFirst", "LostWorkFirst"] = Field(
        "PriorityFirst", alias="victimRanking"
    )
    #: A victim a PodDisruptionBudget still refuses this long after it was marked ends
    #: its plan: the marks are removed, the room released, and the job planned again
    #: without it.
    victim_eviction_deadline_seconds: float = Field(
        120.0, alias="victimEvictionDeadlineSeconds", gt=0
    )
    #: Jobs admitted (their earliest running pod started) less than this long ago are
    #: spared by reclaim and borrowing across quotas; a quota's
    #: ``muster.dev/min-runtime-seconds`` sets its own jobs' (0: no protection).
    min_runtime_seconds: float = Field(0.0, alias="minRuntimeSeconds", ge=0)
    #: A job another quota's plan took back (reclaim, fair sharing, borrowWithinCohort) does
    #: not borrow again for this long, doubled for each time it was taken back, at most
    #: ``backoffMaxSeconds``: within its quota's ``min`` it is admitted as ever.  A
    #: quota's ``muster.dev/reborrow-backoff-seconds`` sets its own jobs' (0: none).
    reborrow_backoff_seconds: float = Field(0.0, alias="reborrowBackoffSeconds", ge=0)
    #: For this long after a quota's newest pod was created, the part of its ``min`` it
    #: does not use is lent only to jobs that save checkpoints: a job that saves nothing
    #: does not borrow room the quota is likely to take back; a quota's
    #: ``muster.dev/guarantee-reserve-seconds`` sets its own (0: lent to any borrower).
    guarantee_reserve_seconds: float = Field(0.0, alias="guaranteeReserveSeconds", ge=0)
    #: The longest notice a victim's pods may declare (``muster.dev/preemption-notice-seconds``)
    #: between their mark and their eviction, to save their work; a quota's
    #: ``muster.dev/max-preemption-notice-seconds`` sets its own (0: no notice).
    max_preemption_notice_seconds: float = Field(
        0.0, alias="maxPreemptionNoticeSeconds", ge=0, le=MAX_NOTICE_SECONDS
    )
    #: A terminating pod counts as leaving (its room free for a plan) until this long past
    #: its deletion deadline (``deletionTimestamp``, which includes its grace period);
    #: after that it counts as staying: a finalizer can keep a pod terminating for ever,
    #: and a job must not wait on its room.
    stuck_terminating_seconds: float = Field(60.0, alias="stuckTerminatingSeconds", ge=0)
    #: A Job whose pods are all victims of one plan is restarted (suspended, then resumed
    #: once they are gone) rather than its pods evicted, so the Job controller re-creates
    #: them at once instead of after its failure backoff (:mod:`extender.core.restart`).
    restart_evicted_jobs: bool = Field(True, alias="restartEvictedJobs")
    #: The prioritize verb's score keeps borrowed pods apart from guaranteed ones: a pod
    #: whose quota borrows scores 0 on nodes running pods of quotas within their ``min``,
    #: and the other way round, so a reclaim frees whole nodes with few victims.
    borrowed_apart: bool = Field(True, alias="borrowedApart")
    #: Borrowed capacity is shared by the quotas' weighted dominant shares
    #: (``muster.dev/fair-sharing-weight``): a job is not admitted past its quota's fair
    #: share while a quota below it has work waiting, and a borrower below its share may
    #: take back from one above it; a borrower takes from other quotas only so, never
    #: under ``borrowWithinCohort`` (docs/quotas-and-preemption.md).  ``False`` (the
    #: default, as Kueue's): borrowing is first come, first served, and a borrower takes
    #: from another only under ``borrowWithinCohort``.  The chart turns it on.
    fair_sharing: bool = Field(False, alias="fairSharing")
    #: A waiting job holds back other quotas' borrowing for at most this long after its
    #: last pod was created, so work that cannot be placed cannot keep room idle for ever.
    fair_sharing_wait_seconds: float = Field(300.0, alias="fairSharingWaitSeconds", gt=0)
    #: A job waiting longer than this (a quota's ``muster.dev/starvation-seconds`` sets its
    #: own) is not passed by later, smaller jobs of the same or lower priority for the room
    #: it needs (0: no protection).
    starvation_seconds: float = Field(0.0, alias="starvationSeconds", ge=0)
    #: The longest a starving job holds room as it frees before the room is let go again.
    starvation_hold_seconds: float = Field(300.0, alias="starvationHoldSeconds", gt=0)
    #: Node labels of the topology levels, coarsest first: a gang preferring one level
    #: that no domain of it holds tries the next coarser (see extender/core/topology.py).
    #: Empty: the levels of Kueue's Topology object holding the level a gang asks for,
    #: else block, rack, hostname (``topology.DEFAULT_LEVELS``).
    topology_levels: tuple[str, ...] = Field((), alias="topologyLevels", strict=False)
    #: Which time orders requeued gangs: when they were given up, or when created.
    requeuing_timestamp: Literal["Eviction", "Creation"] = Field(
        "Eviction", alias="requeuingTimestamp"
    )
    #: The implicit ``default`` quota, of namespaces with no quota of their own (an
    #: ElasticQuota named ``default`` replaces it): its ceiling (a resource list; empty: none,
    #: its pods borrow only idle room and are always reclaimable, as it guarantees nothing)
    #: and whether its pods may evict each other by priority (``Never``: they never evict;
    #: ``LowerPriority``: Kueue's withinClusterQueue policy across those namespaces).
    default_quota_max: dict[str, str | int] = Field(
        default_factory=dict, alias="defaultQuotaMax", strict=False
    )
    default_quota_preemption: Literal["Never", "LowerPriority"] = Field(
        "Never", alias="defaultQuotaPreemption"
    )

    #: DRA: the resource name each DeviceClass's devices are charged to quotas (and counted
    #: on nodes) under, as Kueue's ``deviceClassMappings`` (e.g. ``gpu.nvidia.com:
    #: nvidia.com/gpu``).  A class not named here counts under its
    #: ``extendedResourceName``, else ``deviceclass.resource.kubernetes.io/<class>``.
    device_class_resources: dict[str, str] = Field(
        default_factory=dict, alias="deviceClassResources", strict=False
    )

    @field_validator("device_class_resources")
    @classmethod
    def _class_resources(cls, value: dict[str, str]) -> dict[str, str]:
        for device_class, resource in value.items():
            if not device_class or not resource:
                raise ValueError(f"{device_class!r}: DeviceClass and resource name are required")
        return value

    @field_validator("default_quota_max")
    @classmethod
    def _resource_list(cls, value: dict[str, str | int]) -> dict[str, str | int]:
        try:
            parse_resource_list(value, "defaultQuotaMax")
        except ManifestError as error:
            raise ValueError(f"{error.field}: {error.message}") from None
        return value

    def default_quota(self) -> QuotaSpec:
        """The implicit ``default`` quota these arguments describe."""
        return QuotaSpec(
            name=keys.DEFAULT_QUOTA,
            namespace="",
            min={},
            max=parse_resource_list(self.default_quota_max, "defaultQuotaMax"),
            policy=QuotaPolicy(within_quota=WithinQuota(self.default_quota_preemption)),
        )


class ArgsError(ValueError):
    """An arguments document that is not valid; the message names the field."""


def parse_args(document: Mapping[str, Any] | None) -> MusterArgs:
    """Validate an arguments document (``None`` or ``{}``: all defaults)."""
    if document is None:
        return MusterArgs()
    if not isinstance(document, Mapping):
        raise ArgsError("expected a mapping of argument names to values")
    try:
        return MusterArgs.model_validate(dict(document))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(document)"
        raise ArgsError(f"{where}: {first['msg']} (got {first.get('input')!r})") from None
