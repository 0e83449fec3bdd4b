"""Per-quota usage: what each quota's pods use and ask for.

For every quota the ledger keeps four resource lists, updated one pod at a
time as pods come, bind and go:

- ``used``: requests of its pods counted as used (bound to a node, or holding
  a reservation), preemptible or not;
- ``np_used``: the non-preemptible part of ``used``;
- ``np_request``: requests of all its non-preemptible pods, pending too (the
  proposal's *non-preemptibleTotalRequest*);
- ``subtree_used``: ``used`` summed over the quota and its descendants, which
  every ancestor's ``max`` bounds.

Preemptible used is ``used - np_used``.  The ledger is pure data; planners
copy the few entries a simulation touches (:meth:`QuotaLedger.overlay`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from base.resources import Resources, add_into, format_resources, subtract
from quota.tree import QuotaTree


@dataclass(slots=True)
class QuotaUsage:
    used: Resources = field(default_factory=dict)
    np_used: Resources = field(default_factory=dict)
    np_request: Resources = field(default_factory=dict)
    subtree_used: Resources = field(default_factory=dict)

    @property
    def p_used(self) -> Resources:
        return subtract(self.used, self.np_used)

    def copy(self) -> QuotaUsage:
        return QuotaUsage(
            dict(self.used), dict(self.np_used), dict(self.np_request), dict(self.subtree_used)
        )


class QuotaLedger:
    """Usage of every quota of a tree; ``charge`` and ``refund`` pods as they change."""

    def __init__(self, tree: QuotaTree, usage: Mapping[str, QuotaUsage] | None = None) -> None:
        self.tree = tree
        self.usage: dict[str, QuotaUsage] = (
            dict(usage) if usage is not None else {name: QuotaUsage() for name in tree.specs}
        )

    def __getitem__(self, quota: str) -> QuotaUsage:
        return self.usage[quota]

    def charge(
        self,
        quota: str,
        requests: Mapping[str, int],
        *,
        preemptible: bool,
        used: bool,
        sign: int = 1,
        requested: bool = True,
    ) -> None:
        """Count one pod of ``quota`` (``sign=-1`` takes it back out).

        ``used`` says whether the pod holds room (bound or reserved) or only asks;
        ``requested=False``: room held that no pod asks for (a job's ``minResources``
        beyond its pods), used but not in ``np_request``.
        """
        self._own(quota)
        entry = self.usage[quota]
        if not preemptible and requested:
            add_into(entry.np_request, requests, sign)
        if not used:
            return
        add_into(entry.used, requests, sign)
        if not preemptible:
            add_into(entry.np_used, requests, sign)
        add_into(entry.subtree_used, requests, sign)
        for name in self.tree.ancestors(quota):
            add_into(self.usage[name].subtree_used, requests, sign)

    def _own(self, quota: str) -> None:
        """Make the entries of ``quota`` and its ancestors this ledger's own to change (they
        are, here; an overlay copies them)."""

    def overlay(self) -> QuotaLedger:
        """A ledger sharing this one's entries until a charge copies the ones it touches."""
        return _Overlay(self.tree, self.usage)


class _Overlay(QuotaLedger):
    """Copy-on-write: entries are copied the first time a charge touches them.

    A charge touches a quota and its ancestors, so a quota's entry is owned only
    with its ancestors' (``_owned`` is closed upwards).
    """

    def __init__(self, tree: QuotaTree, usage: Mapping[str, QuotaUsage]) -> None:
        super().__init__(tree, usage)
        self._owned: set[str] = set()

    def _own(self, quota: str) -> None:
        if quota not in self._owned:
            for name in (quota, *self.tree.ancestors(quota)):
                if name not in self._owned:
                    self.usage[name] = self.usage[name].copy()
                    self._owned.add(name)


def usage_report(ledger: QuotaLedger, quota: str) -> dict[str, dict[str, str]]:
    """A quota's bounds and usage as Kubernetes quantities, zero amounts left out: ``min``,
    ``max``, ``used`` (its whole subtree, what its ``max`` bounds), ``borrowed`` (used
    above ``min``, in the resources it governs), ``nonPreemptibleUsed`` and
    ``nonPreemptibleRequest``.  The one rendering behind ``/debug/quotas``,
    ``simulate``'s output and the ElasticQuota status Muster writes."""
    spec = ledger.tree[quota]
    usage = ledger[quota]
    borrowed = {
        name: used - spec.min.get(name, 0)
        for name, used in usage.subtree_used.items()
        if name in spec.governed and used > spec.min.get(name, 0)
    }
    return {
        "min": format_resources(spec.min),
        "max": format_resources(spec.max),
        "used": format_resources({k: v for k, v in usage.subtree_used.items() if v}),
        "borrowed": format_resources(borrowed),
        "nonPreemptibleUsed": format_resources({k: v for k, v in usage.np_used.items() if v}),
        "nonPreemptibleRequest": format_resources({k: v for k, v in usage.np_request.items() if v}),
    }
