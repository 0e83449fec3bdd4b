"""Writing the room the filter holds for gangs onto their pods, off the filter's path.

The filter places a gang whole and holds its room in memory at once (the next
filter call already keeps other pods off it).  This worker then writes the
reservation annotation on each of the gang's pending pods, or drops it when the
gang lets its room go, one write after another in the order decided, so that
every replica's informer, and a restarted Muster, hold the same room
(:func:`extender.core.reservations.restored_reservation`).  The annotation
update also makes kube-scheduler retry the pods at once.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence

import httpx

from extender.core.objects import PodInfo
from extender.core.reservations import persisted_reservation, reserved_by_muster
from extender.core.state import Reservation
from extender.kube.client import ApiError
from extender.kube.writer import ClusterWriter

log = logging.getLogger(__name__)

_Write = tuple[Reservation | None, Sequence[PodInfo]]


class ReservationPersister:
    """A :class:`extender.service.RoomKeeper` that writes through a queue and a thread."""

    def __init__(self, writer: ClusterWriter) -> None:
        self.writer = writer
        self._queue: queue.Queue[_Write | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="persister", daemon=True)
        self.failures = 0

    def start(self) -> ReservationPersister:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(5)

    def hold(self, reservation: Reservation, pods: Sequence[PodInfo]) -> None:
        self._queue.put((reservation, tuple(pods)))

    def release(self, pods: Sequence[PodInfo]) -> None:
        self._queue.put((None, tuple(pods)))

    def pending(self) -> int:
        """Writes queued or under way."""
        return self._queue.unfinished_tasks

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                reservation, pods = item
                self._write(reservation, pods)
            except Exception:  # one failed write must not stop the rest
                self.failures += 1
                log.exception("persisting a gang reservation failed")
            finally:
                self._queue.task_done()

    def _write(self, reservation: Reservation | None, pods: Sequence[PodInfo]) -> None:
        for pod in pods:
            try:
                if reservation is None:
                    node = reserved_by_muster(pod)
                    self.writer.release_room(pod, nominated=pod.nominated_node_name == node)
                else:
                    persisted = persisted_reservation(reservation)
                    persisted["node"] = reservation.placements[pod.key]
                    self.writer.persist_reservation(pod, persisted)
            except (ApiError, httpx.HTTPError) as error:
                self.failures += 1
                log.warning("reservation of %s: %s", pod.key, error)
