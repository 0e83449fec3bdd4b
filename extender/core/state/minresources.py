"""What a PodGroup's ``minResources`` holds in its quota: a part of the cluster state.

A job whose PodGroup declares ``minResources`` is charged ``max(used, minResources)``
once it has started (:func:`~extender.core.podgroups.min_resources_hold`): the part
beyond its pods' use is held in its quota as used room no pod requests.
:class:`MinResourcesHolds` keeps, per started job, that hold and the ``minResources`` it
was admitted with (the most it may hold while it runs: admission checked that amount,
not one the PodGroup's owner, a tenant, writes later).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple, Protocol

from base.resources import Resources
from extender.core.objects import PodInfo
from extender.core.podgroups import min_resources_hold
from extender.core.state.declarations import JobDeclarations
from extender.core.state.membership import QuotaMembership
from quota.accounting import QuotaLedger


class MinResourcesHold(NamedTuple):
    """A started job's PodGroup ``minResources`` beyond its pods' use, charged to
    ``quota`` as used (see :func:`~extender.core.podgroups.min_resources_hold`)."""

    quota: str
    amount: Resources
    preemptible: bool


def change_hold(
    ledger: QuotaLedger, old: MinResourcesHold | None, new: MinResourcesHold | None
) -> None:
    """Charge ``new`` in place of ``old`` to ``ledger``, as used room no pod requests."""
    for hold, sign in ((old, -1), (new, 1)):
        if hold is not None:
            ledger.charge(
                hold.quota,
                hold.amount,
                preemptible=hold.preemptible,
                used=True,
                sign=sign,
                requested=False,
            )


class JobCharges(Protocol):
    """What a hold is computed from: the cluster state's reads it needs."""

    declarations: JobDeclarations
    membership: QuotaMembership
    ledger: QuotaLedger
    pods: dict[str, PodInfo]

    def counted_pods(self, job: str, gone: Collection[str] = ()) -> list[str]: ...
    def job_used(self, job: str, gone: Collection[str] = ()) -> Resources: ...
    def preemptible(self, pod: PodInfo) -> bool: ...


class MinResourcesHolds:
    """Per started job that declares ``minResources``: its hold, and what it was admitted
    with.  Its methods read the state they are handed; the state calls :meth:`rehold`
    after any change to a job's pods or its PodGroup."""

    def __init__(self) -> None:
        self._admitted: dict[str, dict[str, int]] = {}  # job → minResources at admission
        self._holds: dict[str, MinResourcesHold] = {}  # job → what it holds now

    def held(self, job: str) -> MinResourcesHold | None:
        """What the job's PodGroup ``minResources`` holds in its quota beyond its pods'
        use, charged as used; ``None`` for a job that declares none, or has not started,
        or whose pods use all of it."""
        return self._holds.get(job)

    def rehold(self, state: JobCharges, job: str) -> None:
        """Charge the job's hold anew to ``state``'s ledger."""
        old = self._holds.pop(job, None)
        if old is None and not state.declarations.declares_min_resources(job):
            self._admitted.pop(job, None)
            return  # the common case: no hold, none to make
        group = state.declarations.own_pod_group(job)
        if not state.counted_pods(job):
            self._admitted.pop(job, None)
        elif group is not None and job not in self._admitted:
            self._admitted[job] = dict(group.min_resources)
        new = self.hold_without(state, job, ())
        change_hold(state.ledger, old, new)
        if new is not None:
            self._holds[job] = new

    def hold_without(
        self, state: JobCharges, job: str, gone: Collection[str]
    ) -> MinResourcesHold | None:
        """The job's hold once the pods keyed in ``gone`` have left: held from its first
        pod that counts as used, in that pod's quota (the first by key), preemptible as
        that pod is; ``None`` when no pod of it counts, or they use it all."""
        group = state.declarations.own_pod_group(job)
        if group is None or not group.min_resources:
            return None
        counted = state.counted_pods(job, gone)
        if not counted:
            return None
        declared: Mapping[str, int] = group.min_resources
        admitted = self._admitted.get(job)
        if admitted is not None:  # raised since admission: no more than was admitted
            declared = {name: min(v, admitted.get(name, 0)) for name, v in declared.items()}
        amount = min_resources_hold(declared, state.job_used(job, gone))
        if not amount:
            return None
        first = state.pods[counted[0]]
        return MinResourcesHold(
            state.membership.charged(first.key), amount, state.preemptible(first)
        )
