"""What Muster writes on pods to remember its decisions, and how it reads them back.

Reservations, written on the pods they hold room for, and gang backoffs, written on
the pending pods of a gang given up after its timeout.

The ``muster.dev/reservation`` annotation holds JSON: the job, the pod's
node, when the reservation was made and ends, and the victims.  A restarted
Muster rebuilds its in-flight state from these, so it never plans a job in
flight again, and the victims carry their own soft-eviction marks.  The
core reads them too (:func:`reserved_by_muster`): a nomination that matches
the pod's own annotation is Muster's, any other is kube-scheduler's.

When a plan ends, or is extended while its victims terminate (at most
:data:`TERMINATING_LIMIT_SECONDS` past its time, which bounds a record read back), is
:mod:`extender.core.settling`'s.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from base import keys
from base.times import is_record_time
from extender.core.effects import BackOff, Effect, HoldRoom
from extender.core.marks import read_mark
from extender.core.notice import longest_notice
from extender.core.objects import PodInfo
from extender.core.state import ClusterState, GangBackoff, Reservation

#: How long past its timeout a reservation is extended at a time while its victims are
#: still terminating, and at most in all (a victim stuck terminating must not hold the
#: job in flight for good).
TERMINATING_MARGIN_SECONDS = 30.0
TERMINATING_LIMIT_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class PersistedReservation:
    job: str
    node: str
    created: float
    expires: float
    victims: tuple[str, ...]


def persisted_reservation(reservation: Reservation) -> dict[str, object]:
    """The annotation's JSON for ``reservation``, without the pod's own ``node``."""
    return {
        "job": reservation.job,
        "created": reservation.created,
        "expires": reservation.expires,
        "victims": list(reservation.victims),
    }


#: The most attempts a gang backoff may count (``2 ** 63`` backoffs is beyond any limit).
MAX_BACKOFF_ATTEMPTS = 64


def parse_persisted(text: str) -> PersistedReservation | None:
    """Read the annotation back; ``None`` if it is not one Muster wrote (a time not
    :func:`~base.times.is_record_time`, an expiry before its creation,
    victims not ``namespace/name``)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    job, node = value.get("job"), value.get("node")
    created, expires = value.get("created", 0.0), value.get("expires")
    victims = value.get("victims", [])
    if not (
        isinstance(job, str)
        and isinstance(node, str)
        and is_record_time(expires)
        and is_record_time(created)
        and created <= expires
        and isinstance(victims, list)
        and all(isinstance(v, str) and v.count("/") == 1 for v in victims)
    ):
        return None
    return PersistedReservation(job, node, float(created), float(expires), tuple(victims))


def persisted_on(pod: PodInfo) -> PersistedReservation | None:
    """The reservation Muster wrote on ``pod`` for the pod's own job, if it carries one."""
    text = pod.annotations.get(keys.RESERVATION_ANNOTATION)
    persisted = parse_persisted(text) if text else None
    if persisted is None or persisted.job != pod.job:
        return None
    return persisted


def reserved_by_muster(pod: PodInfo) -> str | None:
    """The node Muster's reservation annotation on ``pod`` names, if it carries one."""
    persisted = persisted_on(pod)
    return persisted.node if persisted is not None else None


def stale_persisted_pods(state: ClusterState, job: str) -> list[PodInfo]:
    """The job's pending pods carrying a reservation this state already let go (a copy
    read back after its release: see :attr:`ReservationBook.released`), and no newer
    one: what is left to clear, not a job in flight."""
    released = state.book.released.get(job)
    if released is None or job in state.reservations:
        return []
    return [
        pod
        for pod in persisted_pods(state, job)
        if (persisted := persisted_on(pod)) is not None and persisted.created <= released
    ]


def persisted_pods(state: ClusterState, job: str) -> list[PodInfo]:
    """The job's pending pods that carry a reservation Muster wrote: the ones to clear
    when the job lets its room go."""
    return [
        pod
        for pod in state.members.job_pods(job)
        if pod.node_name is None and not pod.finished and reserved_by_muster(pod) is not None
    ]


def restored_reservation(state: ClusterState, pod: PodInfo) -> Reservation | None:
    """The reservation to hold after reading the annotation on a pending ``pod``, or
    ``None`` when it changes nothing: every replica, and a restarted Muster, rebuilds
    in-flight reservations this way.

    Decisions are ordered by their ``created`` time: a copy of a reservation this
    state let go (or of an older one than it holds) is stale and ignored; pods of the
    same reservation add up; a newer one replaces the one held.
    """
    persisted = persisted_on(pod)
    if persisted is None:
        return None
    released = state.book.released.get(pod.job)
    if released is not None and persisted.created <= released:
        return None
    known = state.reservations.get(pod.job)
    if known is not None and (
        known.placements.get(pod.key) == persisted.node or persisted.created < known.created
    ):
        return None
    quota = state.quota_name(pod)
    if quota is None:
        return None
    same = known is not None and known.created == persisted.created
    placements = dict(known.placements) if same and known is not None else {}
    placements[pod.key] = persisted.node
    # No record holds room longer than the configured timeouts allow: its own timeout,
    # and the extensions while its victims terminate.
    longest = (
        state.args.reservation_timeout_seconds + longest_notice(state) + TERMINATING_LIMIT_SECONDS
    )
    return Reservation(
        job=pod.job,
        quota=quota,
        placements=placements,
        victims=persisted.victims,
        created=persisted.created,
        expires=min(persisted.expires, persisted.created + longest),
    )


def persisted_backoff(backoff: GangBackoff) -> dict[str, object]:
    """The gang-backoff annotation's JSON object (written on the gang's pending pods, so
    every replica, and a restarted Muster, keep turning the gang away)."""
    return {"attempts": backoff.attempts, "givenUp": backoff.given_up, "until": backoff.until}


def backoff_on(pod: PodInfo) -> GangBackoff | None:
    """The backoff written on ``pod``, if it carries one Muster could have written."""
    text = pod.annotations.get(keys.GANG_BACKOFF_ANNOTATION)
    try:
        value = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    attempts, given_up, until = value.get("attempts"), value.get("givenUp"), value.get("until")
    if (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not 1 <= attempts <= MAX_BACKOFF_ATTEMPTS
        or not is_record_time(given_up)
        or not (until is None or (is_record_time(until) and until >= given_up))
    ):
        return None
    return GangBackoff(attempts, float(given_up), None if until is None else float(until))


def record_problems(pod: PodInfo) -> list[tuple[str, str]]:
    """Muster's records on ``pod`` that Muster could not have written: ``(field, why)``
    for each (``simulate`` refuses such input, naming the field; the live informer
    ignores them, as it ignores any record it cannot read)."""
    problems = []
    text = pod.annotations.get(keys.RESERVATION_ANNOTATION)
    if text is not None and parse_persisted(text) is None:
        problems.append(
            (
                f"metadata.annotations.{keys.RESERVATION_ANNOTATION}",
                "not a reservation Muster writes: JSON with job, node, created <= expires "
                "(epoch seconds, at most the end of year 9999) and victims (namespace/name)",
            )
        )
    if keys.GANG_BACKOFF_ANNOTATION in pod.annotations and backoff_on(pod) is None:
        problems.append(
            (
                f"metadata.annotations.{keys.GANG_BACKOFF_ANNOTATION}",
                f"not a gang backoff Muster writes: JSON with attempts (1 to "
                f"{MAX_BACKOFF_ATTEMPTS}), givenUp and until (epoch seconds, until >= givenUp, "
                "or null)",
            )
        )
    mark = pod.annotations.get(keys.SOFT_EVICTION_KEY)
    if mark is not None and not read_mark(mark).well_formed:
        problems.append(
            (
                f"metadata.annotations.{keys.SOFT_EVICTION_KEY}",
                "not a soft-eviction mark Muster writes: a JSON object whose preemptor is a "
                "job or null and whose timestamp, if any, is RFC 3339",
            )
        )
    return problems


def restored_effects(state: ClusterState, pod: PodInfo) -> list[Effect]:
    """What reading a pending ``pod``'s annotations back changes: its job's reservation
    (:func:`restored_reservation`) and backoff.  The live informer and ``simulate``'s
    manifest loader both call this, so a dump of a cluster mid-decision reads the same."""
    effects: list[Effect] = []
    reservation = restored_reservation(state, pod)
    if reservation is not None:
        effects.append(HoldRoom(reservation))
    backoff = backoff_on(pod)
    if backoff is not None:
        if backoff.until is not None:  # no longer than the configured backoff allows
            until = min(backoff.until, backoff.given_up + state.args.backoff_max_seconds)
            backoff = dataclasses.replace(backoff, until=until)
        effects.append(BackOff(pod.job, backoff))
    return effects
