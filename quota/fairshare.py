"""Fair sharing of borrowed capacity: each quota's weighted dominant share.

What a quota *borrows* of a resource is what it uses beyond its ``min`` (all of it for a
resource absent from ``min``: a quota that does not name a resource some quota names is
guaranteed none of it).  Its *share* is the largest, over the resources quotas name (not
the pod count), of what it borrows as a fraction of the cluster's capacity of that resource
(the dominant share, as in DRF), divided by its weight (``muster.dev/fair-sharing-weight``,
default 1).  A weight of 0 counts as :data:`ZERO_WEIGHT`: such a quota's share is
enormous as soon as it borrows anything, so it borrows only what no other quota wants.

Two rules use the share (docs/quotas-and-preemption.md, "Fair sharing"):

- admission: a job is not admitted past its quota's fair share while a quota whose
  share would stay lower has work waiting (:func:`share_after`);
- preemption between borrowers: a borrower may take back from a quota whose share is
  above its own only while the gap between the two shares strictly narrows and does not
  reverse (:func:`narrows_gap`); the victim's job then cannot take the room back the same
  way, since its quota's share is not below the preemptor's.

Pure: the ledger and the capacity are given.
"""

from __future__ import annotations

from collections.abc import Mapping

from base.resources import PODS
from quota.accounting import QuotaLedger

#: The weight a quota of weight 0 (or less than this) counts with.
ZERO_WEIGHT = 1e-6
#: Shares are rounded to this many decimal places.
SHARE_DIGITS = 9


def share_after(
    ledger: QuotaLedger,
    quota: str,
    capacity: Mapping[str, int],
    change: Mapping[str, int] | None = None,
) -> float:
    """``quota``'s weighted dominant share of borrowed capacity, with its use changed by
    ``change`` (a job admitted: positive amounts; victims evicted: negative)."""
    spec = ledger.tree[quota]
    used = ledger[quota].used
    change = change or {}
    dominant = 0.0
    for name in ledger.tree.governed:
        if name == PODS:
            continue
        total = capacity.get(name, 0)
        if total <= 0:
            continue
        borrowed = used.get(name, 0) + change.get(name, 0) - spec.min.get(name, 0)
        if borrowed > 0:
            dominant = max(dominant, borrowed / total)
    weight = max(spec.policy.fair_sharing_weight, ZERO_WEIGHT)
    # Rounded, so that shares equal in exact arithmetic compare equal (0.3 / 3 and 0.1).
    return round(dominant / weight, SHARE_DIGITS)


def lends_only(ledger: QuotaLedger, quota: str) -> bool:
    """Does ``quota`` weigh 0 (:data:`ZERO_WEIGHT` or less): it borrows only what nobody
    else wants?"""
    return ledger.tree[quota].policy.fair_sharing_weight <= ZERO_WEIGHT


def narrows_gap(
    before: tuple[float, float], after: tuple[float, float], *, victims_lend_only: bool = False
) -> bool:
    """Does a preemption that takes the shares of (the preemptor's quota, the victims'
    quota) from ``before`` to ``after`` strictly narrow the gap between them, without
    reversing it?  Only from a quota whose share was above the preemptor's, and only so
    far that the preemptor's quota ends at or below the victims' (Kueue's
    ``LessThanOrEqualToFinalShare``): a preemption that overshoots would leave the victims'
    quota the poorer, free to take the room back the same way, and two such steps evict
    twice the work to settle a difference smaller than either.  ``victims_lend_only``: the
    victims' quota weighs 0, so it borrows only what nobody else wants, and it may be
    taken back to nothing."""
    preemptor_before, victim_before = before
    preemptor_after, victim_after = after
    gap = victim_before - preemptor_before
    if gap <= 0 or abs(victim_after - preemptor_after) >= gap:
        return False
    return victims_lend_only or preemptor_after <= victim_after
