"""The service's seams: where it reads the cluster from, and what it writes through.

A front door hands :class:`~extender.service.verbs.Extender` a :class:`ClusterSource`
(the Kubernetes adapter's informers, :class:`~extender.kube.source.KubeSource`, or a
:class:`StaticSource` over manifests), and optionally a :class:`Binder` and a
:class:`RoomKeeper` (the adapter's API writes).  These are the protocols they implement,
the one way to hold the state (:func:`holding`), and the errors that cross the seam.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from extender.core.objects import PodInfo
from extender.core.state import ClusterState, Reservation


class StateBusy(Exception):
    """The state is held (an informer update, or a long decision) and the caller asked
    not to wait: the HTTP front door then moves the request off its event loop."""


class ClusterSource(Protocol):
    """Where the service reads the cluster from."""

    #: Do pods keep arriving (an informer on a live cluster)?  Then a pod a call names
    #: that the state lacks may be on its way; in a fixed snapshot it never comes.
    pods_arrive: bool

    def ready(self) -> bool:
        """Has the first full sync happened?"""
        ...

    def problems(self) -> list[str]:
        """What is wrong with the source's background work now (empty: nothing)."""
        ...

    def lasting_problems(self) -> list[str]:
        """The problems that have lasted long enough that a restart should cure them."""
        ...

    def exclusive(self, wait: bool = True) -> AbstractContextManager[ClusterState]:
        """The cluster state, held exclusively: the informers' updates, each decision with
        the effects it returns (applied before letting go, so nothing comes between),
        and the debug views all take this one hold; with ``wait`` false,
        :class:`StateBusy` if someone else has it."""
        ...


class _Lock(Protocol):
    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


@contextmanager
def holding(lock: _Lock, state: ClusterState, wait: bool) -> Iterator[ClusterState]:
    """``state`` under ``lock``; :class:`StateBusy` if ``wait`` is false and the
    lock is taken.  (The one implementation of :meth:`ClusterSource.reading`.)"""
    if not lock.acquire(blocking=wait):
        raise StateBusy
    try:
        yield state
    finally:
        lock.release()


class StaticSource:
    """A fixed snapshot (``muster serve --snapshot``, tests)."""

    pods_arrive = False

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._lock = threading.Lock()

    def ready(self) -> bool:
        return True

    def problems(self) -> list[str]:
        return []

    def lasting_problems(self) -> list[str]:
        return []

    def parked(self) -> dict[str, str]:
        """No pod is parked by kube-scheduler over a fixed snapshot (no conditions)."""
        return {}

    def exclusive(self, wait: bool = True) -> AbstractContextManager[ClusterState]:
        return holding(self._lock, self._state, wait)


class RoomKeeper(Protocol):
    """Persists the room the filter holds for gangs it places whole (on the pods, so
    every replica and a restarted Muster hold it too), in the order decided."""

    def hold(self, reservation: Reservation, pods: Sequence[PodInfo]) -> None:
        """Write ``reservation`` on ``pods`` (its pending pods), each with its node."""
        ...

    def release(self, pods: Sequence[PodInfo]) -> None:
        """Drop the reservation written on ``pods``: the gang waits whole again."""
        ...


class BindError(RuntimeError):
    """Binding failed; the message says why."""


class Binder(Protocol):
    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding (raises :class:`BindError`)."""
        ...
