"""Fair-sharing preemption: a borrower below its fair share takes back from one above it.

With ``fairSharing`` on, a job whose quota would borrow to run it may evict pods of
another quota that borrows in a resource the job asks for, when that
quota's share of borrowed capacity (:func:`quota.fairshare.share_after`) is above the
job's quota's share before the job.  Each such victim group is kept only while the
preemption strictly narrows the gap between the two shares without reversing it
(:func:`quota.fairshare.narrows_gap`): with the job admitted and the group gone, the two
shares are closer than before, and the job's quota's is not above the other's.  So the
quota that lost pods cannot take the room back the same way (its share is not below the
job's quota's): no admit, reclaim, re-admit loop
(``tests/unit/test_fair_sharing.py`` shows it over sequences of arrivals and plans).

The walk (:mod:`.candidates`) offers these groups in their own phase, of the job's
priority or lower (fair sharing divides what is borrowed among the jobs of a priority),
lower priority first, from the quotas
:func:`~.policy.above_share` names; the search (:mod:`.search`) checks the gap for each
group it takes, and for the plan it keeps (:func:`gap_widens`).
"""

from __future__ import annotations

from collections.abc import Iterable

from extender.core.placement.demand import JobDemand
from extender.core.preemption.groups import VictimGroup
from extender.core.preemption.policy import Preemptor, Rule
from extender.core.state import ClusterState
from quota.accounting import QuotaLedger
from quota.fairshare import lends_only, narrows_gap, share_after


def preemptor_share(state: ClusterState, demand: JobDemand, ledger: QuotaLedger) -> float | None:
    """The job's quota's share of borrowed capacity before the job, on the plan's settled
    ``ledger``, when fair sharing applies to it (``None`` when off)."""
    if not state.args.fair_sharing:
        return None
    return share_after(ledger, demand.quota, state.capacity())


def gap_widens(
    state: ClusterState,
    demand: JobDemand,
    preemptor: Preemptor,
    settled: QuotaLedger,
    simulated: QuotaLedger,
    groups: Iterable[VictimGroup],
    *,
    taken: bool,
) -> str | None:
    """Why evicting the fair-sharing ``groups`` does not narrow the gap between the job's
    quota and each quota they are of, or ``None`` when it does for every one.
    ``settled``: the ledger before the plan; ``simulated``: the plan's, with the groups
    already out of it (``taken``) or still in it (they are taken out to judge)."""
    assert preemptor.fair_share is not None
    changes: dict[str, dict[str, int]] = {}
    for group in groups:
        if group.rule is Rule.FAIR_SHARE:
            change = changes.setdefault(group.quota, {})
            if not taken:
                for name, amount in group.requests.items():
                    change[name] = change.get(name, 0) - amount
    if not changes:
        return None
    capacity = state.capacity()
    mine_after = share_after(simulated, demand.quota, capacity, demand.request)
    for quota, change in sorted(changes.items()):
        before = share_after(settled, quota, capacity)
        after = share_after(simulated, quota, capacity, change)
        if not narrows_gap(
            (preemptor.fair_share, before),
            (mine_after, after),
            victims_lend_only=lends_only(settled, quota),
        ):
            return (
                f"quota {quota}: taking its pods would not narrow the gap between its share "
                f"of borrowed capacity ({before:.3f} before, {after:.3f} after) and quota "
                f"{demand.quota}'s ({preemptor.fair_share:.3f} before, {mine_after:.3f} "
                f"after), or would leave quota {demand.quota}'s above it (fairSharing)"
            )
    return None
