"""Leader election on a ``coordination.k8s.io`` Lease, client-go style.

Every replica answers kube-scheduler's filter and prioritize; only the
leader commits preemptions.  A replica takes the Lease when it is free or its
holder stopped renewing for ``lease_seconds``, renews it every
``renew_seconds``, and steps down at once if a renewal fails in a way that
means someone else holds it (a conflict).  Updates carry the Lease's
``resourceVersion``, so two replicas can never both win the same round.
On a graceful stop the leader lets the Lease go (an empty holder), so the
next replica takes over at its next round instead of after ``lease_seconds``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable

import httpx

from extender.kube.client import ApiError, Json, KubeClient
from extender.kube.worker import PeriodicWorker

log = logging.getLogger(__name__)


def _micro_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector(PeriodicWorker):
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str = "muster",
        *,
        identity: str | None = None,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__("leader election", renew_seconds)
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.lease_name = name
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.clock = clock
        self._leading_until = 0.0
        # The other holder's last renewal as this replica saw it change, on its own clock:
        # clocks of two machines are never compared (as client-go does).
        self._observed: tuple[str, str] = ("", "")
        self._observed_at = 0.0

    def is_leader(self) -> bool:
        return self.clock() < self._leading_until

    def tick(self) -> None:
        try:
            self.try_acquire_or_renew()
        except (ApiError, httpx.HTTPError) as error:
            log.warning("leader election: %s", error)

    def try_acquire_or_renew(self) -> bool:
        """One round; returns whether this replica leads afterwards."""
        now = self.clock()
        try:
            lease = self.client.request("GET", self.path)
        except ApiError as error:
            if error.status != 404:
                raise
            return self._write("POST", self.collection, self._lease({}, now, acquired=True), now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        record = (str(holder or ""), str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder not in (None, "", self.identity) and self._observed_at + duration > now:
            self._leading_until = 0.0
            return False
        return self._write(
            "PUT", self.path, self._lease(lease, now, acquired=holder != self.identity), now
        )

    def release(self) -> bool:
        """Stop renewing and, if this replica holds the Lease, let it go (an empty
        holder, as client-go's ``ReleaseOnCancel``); return whether it was let go."""
        self.stop()
        if not self.is_leader():
            return False
        self._leading_until = 0.0
        try:
            lease = self.client.request("GET", self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return False
            lease["spec"] = {**spec, "holderIdentity": None, "leaseDurationSeconds": 1}
            self.client.request("PUT", self.path, lease)
        except (ApiError, httpx.HTTPError) as error:
            log.warning("leader election: could not let the lease go: %s", error)
            return False
        log.info("leader election: %s let the lease go", self.identity)
        return True

    def _lease(self, lease: Json, now: float, *, acquired: bool) -> Json:
        spec = dict(lease.get("spec") or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.lease_seconds,
            renewTime=_micro_time(now),
        )
        if acquired:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        metadata = dict(lease.get("metadata") or {"name": self.lease_name})
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def _write(self, method: str, path: str, lease: Json, now: float) -> bool:
        try:
            self.client.request(method, path, lease)
        except ApiError as error:
            if error.status in (409, 422):  # someone else won this round
                self._leading_until = 0.0
                return False
            raise
        if self._leading_until == 0.0:
            log.info("leader election: %s leads", self.identity)
        # Lead a little less than the lease, so two replicas never both think they lead.
        self._leading_until = now + self.lease_seconds - self.renew_seconds
        return True
