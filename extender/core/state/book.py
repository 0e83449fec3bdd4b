"""The reservation book: room held for in-flight jobs, and quota held for admitted gangs.

One of the indexes behind :class:`~extender.core.state.ClusterState`.

- A :class:`Reservation` holds room on named nodes for a job whose victims were marked
  (or that kube-scheduler is preempting for), pod by pod, until the pods bind, go, or
  the reservation ends.  A reserved pod counts as used by its quota and takes its room
  on its node.
- An *admission hold* charges a gang's pending pods to its quota for a while after the
  filter admitted the gang whole, since kube-scheduler binds the pods one at a time.
- A :class:`Vacancy` keeps the room of a reserved pod that was deleted for its job a
  while, for the pod its controller creates in its place.
- A :class:`GangBackoff` records a gang given up after its timeout: the filter turns
  its pods away until the backoff ends (or for good, past ``backoffLimitCount``).
- A :class:`TakenBack` records a job other quotas' plans took back: it waits before it
  borrows again (``reborrowBackoffSeconds``).

The book only records who holds what; :class:`~extender.core.state.ClusterState`
re-indexes a pod whenever its entry here changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room held for a job, pod → node, until its pods bind: freed by a preemption
    (``victims``), or found free by the filter placing a gang whole (no victims)."""

    job: str
    quota: str
    placements: Mapping[str, str]  # pod key → node name
    victims: tuple[str, ...]  # pod keys
    created: float
    expires: float
    #: Nodes kube-scheduler refused to pods of the job; a re-plan avoids them.
    refused: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class Vacancy:
    """The room a pending reserved pod held when it was deleted: still its job's, charged
    to its quota and held on its node, until a new pod of the job with the same requests
    and the same controller takes it (a Job or StatefulSet re-creating the pod), or
    ``until``."""

    job: str
    node: str
    quota: str
    requests: Mapping[str, int]
    preemptible: bool
    until: float
    controller: str
    #: The deleted pod's key (a StatefulSet re-creates the pod under it).
    pod_key: str

    @property
    def holder(self) -> str:
        """The key the room is held under in the book and on the node: never a pod's key,
        so a new pod of the same name is never mistaken for the vacancy."""
        return f"{self.pod_key}#vacated"


@dataclass(frozen=True, slots=True)
class GangBackoff:
    """A gang given up for the ``attempts``-th time at ``given_up``; retried at ``until``
    (``None``: never, the backoff limit is reached)."""

    attempts: int
    given_up: float
    until: float | None


@dataclass(frozen=True, slots=True)
class TakenBack:
    """A job whose pods other quotas' plans took ``times`` times, the last by a plan made
    at ``last``; ``plans`` names the recent ones, oldest first (preemptor job, plan
    made), so a plan seen again (extended, restored) is counted once."""

    times: int
    last: float
    plans: tuple[tuple[str, float], ...]


class ReservationBook:
    def __init__(self) -> None:
        #: job → its reservation.
        self.reservations: dict[str, Reservation] = {}
        self._reserved: dict[str, tuple[str, str]] = {}  # pod key → (job, node)
        #: holder key (``Vacancy.holder``) → the vacancy, also reserved under that key.
        self.vacancies: dict[str, Vacancy] = {}
        self._held: dict[str, str] = {}  # pod key → the job whose admission holds it
        self._held_until: dict[str, float] = {}  # job → when its hold ends
        #: job → its backoff, for gangs given up after their timeout.
        self.backoffs: dict[str, GangBackoff] = {}
        #: Jobs other quotas' plans took back (:mod:`extender.core.placement.reborrow`).
        self.taken_back: dict[str, TakenBack] = {}
        #: job → the ``created`` time of its newest reservation let go: a persisted copy
        #: of that one (or an older one) read back later is stale, not a reservation.
        self.released: dict[str, float] = {}
        #: job → victims of its abandoned plans (their eviction was refused past the
        #: deadline): its next plans do not count on them again.
        self.refused_victims: dict[str, set[str]] = {}

    # ---- reservations ---------------------------------------------------------------

    def reserved(self, key: str) -> tuple[str, str] | None:
        """``(job, node)`` of a reserved pod."""
        return self._reserved.get(key)

    def reserve(self, key: str, job: str, node: str) -> None:
        self._reserved[key] = (job, node)

    def unreserve(self, key: str) -> str:
        """Forget a pod's reservation; returns its job."""
        job, _node = self._reserved.pop(key)
        return job

    def vacancies_of(self, job: str) -> list[str]:
        """The holder keys of the vacancies kept for ``job``, sorted."""
        return sorted(key for key, vacancy in self.vacancies.items() if vacancy.job == job)

    def holds_room(self, job: str) -> bool:
        """Does any pod (or vacancy) still hold room for ``job``?"""
        return any(holder == job for holder, _ in self._reserved.values())

    def promised_victims(self) -> set[str]:
        """Keys of the victims of every reservation (no one else's victims)."""
        return {key for reservation in self.reservations.values() for key in reservation.victims}

    # ---- admission holds --------------------------------------------------------------

    def is_held(self, key: str) -> bool:
        return key in self._held

    def hold(self, key: str, job: str) -> None:
        self._held[key] = job

    def unhold(self, key: str) -> bool:
        """Forget a pod's admission hold; returns whether it had one."""
        return self._held.pop(key, None) is not None

    def extend_hold(self, job: str, until: float) -> None:
        self._held_until[job] = max(until, self._held_until.get(job, until))

    def end_holds(self, now: float) -> list[tuple[str, list[str]]]:
        """End the holds whose time is up: their jobs, each with the pods it held (still
        marked held: the caller unholds them while it re-indexes them)."""
        ended = [job for job, until in self._held_until.items() if until <= now]
        result = []
        for job in ended:
            del self._held_until[job]
            result.append((job, [key for key, holder in self._held.items() if holder == job]))
        return result

    def holds(self) -> dict[str, tuple[float, frozenset[str]]]:
        """Every admission hold: job → (when it ends, the pending pods it charges)."""
        held: dict[str, set[str]] = {}
        for key, job in self._held.items():
            held.setdefault(job, set()).add(key)
        return {
            job: (until, frozenset(held.get(job, ()))) for job, until in self._held_until.items()
        }
