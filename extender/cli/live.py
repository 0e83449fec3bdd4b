"""The live Muster, assembled: what ``muster serve --kubeconfig`` (or ``--in-cluster``) runs.

One :class:`~extender.kube.source.KubeSource` (the informers, the state) feeds the
:class:`~extender.service.Extender` that answers the verbs, and the leader's background
work: the PostFilter loop (:mod:`extender.kube.postfilter`), the housekeeper, the gang
keeper and the requeuer, each writing through its own
:class:`~extender.kube.writer.ClusterWriter`, all registered with the source's health.
Once the informers have synced, the state they built is kept out of garbage collection
(:mod:`extender.cli.heap`).  With leader election, the PostFilter and the chores act only
on the replica holding the Lease.  :mod:`extender.cli.serve` checks the options, makes
the API client and the record keys, and serves the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.registry import Collector

from extender.cli.heap import freeze_once_synced
from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.core.records import RecordKeys
from extender.kube.binder import KubeBinder
from extender.kube.client import KubeClient
from extender.kube.gangs import GangKeeper
from extender.kube.housekeeping import Housekeeper
from extender.kube.leader import LeaderElector
from extender.kube.persister import ReservationPersister
from extender.kube.postfilter import PostFilterLoop
from extender.kube.requeue import Requeuer
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from extender.service import Extender


@dataclass(frozen=True)
class LiveMuster:
    """A started live Muster: the verbs' :class:`Extender`, the metrics its parts serve,
    and the leader elector (``None`` without leader election)."""

    extender: Extender
    collectors: list[Collector]
    elector: LeaderElector | None


def start_live_muster(
    client: KubeClient,
    args: MusterArgs,
    record_keys: Callable[[], RecordKeys],
    *,
    leader_elect: bool,
    leader_elect_namespace: str | None,
) -> LiveMuster:
    """Build and start every part over ``client``; the informers start syncing at once."""
    source = KubeSource(client, args, record_keys=record_keys)
    collectors: list[Collector] = [source.scheduler_preemptions, source.forged_records]

    def writer() -> ClusterWriter:
        return ClusterWriter(client, record_keys=record_keys)

    decisions = DecisionLog()
    elector = None
    if leader_elect:
        elector = LeaderElector(client, leader_elect_namespace or _own_namespace()).start()
    is_leader = elector.is_leader if elector is not None else (lambda: True)
    postfilter = PostFilterLoop(
        source,
        writer(),
        decisions,
        is_leader=is_leader,
    )
    source.on_unschedulable = postfilter.request
    collectors.append(postfilter.time_to_mark)
    extender = Extender(
        source,
        binder=KubeBinder(client),
        on_unschedulable=postfilter.request,
        log=decisions,
        room_keeper=ReservationPersister(writer()).start(),
    )
    workers = [
        Housekeeper(source, writer(), is_leader=is_leader),
        GangKeeper(source, writer(), is_leader=is_leader),
        Requeuer(source, writer(), is_leader=is_leader),
    ]
    for part in (*workers, postfilter, *([elector] if elector is not None else [])):
        source.health.add(part)
    for worker in workers:
        worker.start()
    source.start()
    freeze_once_synced(source)
    postfilter.start()
    source.health.watch()
    return LiveMuster(extender, collectors, elector)


def _own_namespace() -> str:
    """The namespace Muster runs in (in a pod), else ``muster-system``."""
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    try:
        return path.read_text().strip() or "muster-system"
    except OSError:
        return "muster-system"
