"""Reservations as Muster writes them on a preemptor's pods, and reads them back.

The ``muster.dev/reservation`` annotation holds JSON: the job, the pod's
node, when the reservation was made and ends, and the victims.  A restarted
Muster rebuilds its in-flight state from these, so it never plans a job in
flight again, and the victims carry their own soft-eviction marks.  The
core reads them too (:func:`reserved_by_muster`): a nomination that matches
the pod's own annotation is Muster's, any other is kube-scheduler's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from base import keys
from extender.core.objects import PodInfo
from extender.core.state import Reservation


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


def parse_persisted(text: str) -> PersistedReservation | None:
    """Read the annotation back; ``None`` if it is not one Muster wrote."""
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
        and isinstance(expires, int | float)
        and isinstance(created, int | float)
        and isinstance(victims, list)
        and all(isinstance(v, str) for v in victims)
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
