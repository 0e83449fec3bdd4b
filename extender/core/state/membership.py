"""Which quota each pod counts in, and which pods stay preemptible: a part of the state.

A pod's quota comes from its label, if the quota tree lets its namespace use that quota
(:meth:`quota.tree.QuotaTree.quota_for`); else its job is refused, and the pod is still
counted, in its namespace's quota: a label put on a running pod must not take it out of
its quota's accounting, nor out of the victims.  A pod admitted preemptible stays so
whatever its label says later.  :class:`QuotaMembership` keeps both answers per pod, set
as :class:`~extender.core.state.cluster.ClusterState` indexes the pod.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from base import keys
from extender.core.config import MusterArgs
from extender.core.jobs import is_preemptible
from extender.core.objects import PodInfo
from quota.tree import QuotaMembershipError, QuotaTree


class QuotaMembership:
    """Per pod: the quota it is charged to, why its label is refused, and whether it was
    admitted preemptible."""

    def __init__(self, args: MusterArgs) -> None:
        self._args = args
        self._charged: dict[str, str] = {}  # pod key → the quota it counts in
        self._refused: dict[str, str] = {}  # pod key → why its label's quota is refused
        #: UIDs of pods admitted preemptible whose label now says otherwise: they stay
        #: preemptible (a tenant cannot protect borrowed room by relabelling a running pod).
        self._kept_preemptible: set[str] = set()
        #: Quota → the newest creation time of a pod counted in it (its last arrival:
        #: ``creationTimestamp``, which the API server writes, not the tenant).
        self._newest: dict[str, float] = {}
        #: Quota → how many of its pods are pending (not bound, not finished, not leaving).
        self._pending: dict[str, int] = {}

    def assign(self, pod: PodInfo, tree: QuotaTree) -> str:
        """Record and return the quota ``pod`` counts in (its namespace's when its label's
        is refused)."""
        try:
            quota = resolve_quota(pod, tree)
        except QuotaMembershipError as error:
            self._refused[pod.key] = error.reason
            quota = tree.quota_for(pod.namespace, None)
        self._charged[pod.key] = quota
        if pod.created > self._newest.get(quota, -math.inf):
            self._newest[quota] = pod.created
        return quota

    def count_pending(self, quota: str, sign: int) -> None:
        """Count a pending pod of ``quota`` in (``sign=1``) or out (``-1``)."""
        left = self._pending.get(quota, 0) + sign
        if left > 0:
            self._pending[quota] = left
        else:
            self._pending.pop(quota, None)

    def has_pending(self, quota: str) -> bool:
        """Has ``quota`` a pod waiting to be bound?"""
        return quota in self._pending

    def newest_pod(self, quota: str) -> float | None:
        """When the newest pod counted in ``quota`` was created (``None``: none yet)."""
        return self._newest.get(quota)

    def unassign(self, key: str) -> str:
        """Forget the pod keyed ``key``; return the quota it counted in."""
        self._refused.pop(key, None)
        return self._charged.pop(key)

    def quota_of(self, pod: PodInfo, tree: QuotaTree) -> str:
        """The pod's quota; raises :class:`QuotaMembershipError` if its label names one it
        may not use (missing, or not admitting its namespace): its job is refused."""
        refused = self._refused.get(pod.key)
        if refused is not None:
            raise QuotaMembershipError(refused)
        quota = self._charged.get(pod.key)
        return quota if quota is not None else resolve_quota(pod, tree)

    def charged_to(self, key: str) -> str | None:
        """The quota the pod keyed ``key`` is counted in; ``None`` for one not indexed."""
        return self._charged.get(key)

    def charged(self, key: str) -> str:
        """The quota the indexed pod keyed ``key`` counts in."""
        return self._charged[key]

    def preemptible(self, pod: PodInfo) -> bool:
        """May the pod be a victim?  Its label (or the default), except that a pod
        admitted preemptible stays so (:meth:`keep_preemptible`): the label changed to
        ``"false"`` on a pod already counted (bound, reserved or held) asks for a
        protection its quota never checked it against.  Held in memory, and recorded on
        the pod by the leader (its ``muster.dev/AdmittedPreemptible`` condition, pod
        status, which tenants cannot write), which every replica, and a restarted Muster,
        reads."""
        return (
            pod.admitted_preemptible
            or pod.uid in self._kept_preemptible
            or is_preemptible(pod, self._args)
        )

    def keep_preemptible(self, uids: Iterable[str]) -> None:
        """These pods stay preemptible against their label."""
        self._kept_preemptible.update(uids)

    def forget_preemptible(self, uid: str) -> None:
        self._kept_preemptible.discard(uid)

    def kept_preemptible(self) -> frozenset[str]:
        """The UIDs :meth:`preemptible` keeps preemptible against their label."""
        return frozenset(self._kept_preemptible)


def resolve_quota(pod: PodInfo, tree: QuotaTree) -> str:
    """The quota ``pod``'s label (or its namespace) gives it in ``tree``; raises
    :class:`QuotaMembershipError` when the label names one it may not use."""
    return tree.quota_for(pod.namespace, pod.labels.get(keys.QUOTA_NAME_LABEL))
