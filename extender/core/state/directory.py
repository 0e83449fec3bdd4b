"""Which pods there are, and who they belong to: the pod part of the cluster state.

:class:`PodDirectory` holds the pods by key and the membership indexes decisions read
without walking every pod: per job its pods, per job the pods whose soft-eviction mark
names it, per job its pods still pending, per node the pending pods nominated to it, the
bound pods on their way out, when each pod-group job last grew, and the UIDs of pods
recently removed.  It knows
nothing of quotas or room: :class:`~extender.core.state.cluster.ClusterState` feeds it
through its one path and keeps the other indexes beside it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping

from extender.core.objects import PodInfo

#: How many removed pods' UIDs are remembered (see :meth:`PodDirectory.was_removed`).
REMOVED_PODS_REMEMBERED = 10_000


class PodDirectory:
    """The pods by key, and their membership indexes."""

    def __init__(self) -> None:
        self.pods: dict[str, PodInfo] = {}
        self._by_job: dict[str, set[str]] = {}
        self._by_controller: dict[str, set[str]] = {}  # "namespace/Kind/name" → its pods
        self._marked_for: dict[str, set[str]] = {}  # job → pods whose marks name it
        self._nominated: dict[str, set[str]] = {}  # node → pending pods nominated to it
        self._pending: dict[str, set[str]] = {}  # job → its pods not bound, not leaving
        self.departing: set[str] = set()  # bound pods on their way out
        #: Terminating pods past their deletion deadline and margin: they count as
        #: staying, in no job's marked victims and not among the pods on their way out.
        self.stuck: set[str] = set()
        self._joined: dict[str, float] = {}  # pod-group job → when its newest pod was seen
        self._removed: OrderedDict[str, None] = OrderedDict()  # UIDs of removed pods

    def index(self, pod: PodInfo, sign: int) -> None:
        """Add the pod to the membership indexes (``sign=-1``: take it out)."""
        key = pod.key
        live = not pod.finished
        _member(self._by_job, pod.job, key, sign)
        if pod.controller is not None:
            _member(self._by_controller, f"{pod.namespace}/{pod.controller}", key, sign)
        if key in self.stuck:
            return  # staying: not leaving, and no longer a victim on its way out
        if pod.marked_for is not None and live:
            _member(self._marked_for, pod.marked_for, key, sign)
        if pod.waiting_to_bind:
            _member(self._pending, pod.job, key, sign)
        if pod.nominated_node_name is not None and pod.node_name is None and live:
            _member(self._nominated, pod.nominated_node_name, key, sign)
        if pod.departing and pod.node_name is not None and live:
            if sign > 0:
                self.departing.add(key)
            else:
                self.departing.discard(key)

    def joins(self, job: str, seen: float) -> None:
        """A new pod of pod-group job ``job`` was seen at ``seen``."""
        self._joined[job] = max(seen, self._joined.get(job, seen))

    def removed(self, pod: PodInfo) -> None:
        """``pod`` left the state (after :meth:`index` took it out): remember its UID, and
        forget when its job last grew once no pod of it is left."""
        self.stuck.discard(pod.key)
        self._removed[pod.uid] = None
        if len(self._removed) > REMOVED_PODS_REMEMBERED:
            self._removed.popitem(last=False)
        if pod.job not in self._by_job:
            self._joined.pop(pod.job, None)

    def overdue(self, now: float, margin: float) -> list[str]:
        """Keys of the bound, terminating pods not yet known stuck whose deletion deadline
        passed more than ``margin`` seconds before ``now``."""
        return sorted(
            key
            for key in self.departing
            if (pod := self.pods[key]).terminating
            and pod.deletion_deadline is not None
            and pod.deletion_deadline + margin < now
        )

    def was_removed(self, uid: str) -> bool:
        """Was a pod with this UID removed (one of the last few thousand)?  A pod bound
        just as it was deleted must not come back from a copy of it held elsewhere."""
        return uid in self._removed

    def has_job(self, job: str) -> bool:
        """Does any pod of ``job`` remain?"""
        return job in self._by_job

    def job_pods(self, job: str) -> list[PodInfo]:
        """The job's pods, in a stable order (by name)."""
        return [self.pods[key] for key in sorted(self._by_job.get(job, ()))]

    def job_members(self, job: str) -> Collection[str]:
        """The keys of the job's pods, unordered (cheaper than :meth:`job_pods`)."""
        return self._by_job.get(job, ())

    def controller_pods(self, namespace: str, controller: str) -> Collection[str]:
        """The keys of the pods the controller ``Kind/name`` in ``namespace`` owns."""
        return self._by_controller.get(f"{namespace}/{controller}", ())

    def marked_victims(self, job: str) -> Collection[str]:
        """Keys of the pods still present whose soft-eviction mark names ``job``: its
        victims on their way out (the job is in flight while there are any)."""
        return self._marked_for.get(job, ())

    def marked_pods(self, job: str) -> list[PodInfo]:
        """The pods of :meth:`marked_victims`, by key."""
        return [self.pods[key] for key in sorted(self._marked_for.get(job, ()))]

    def jobs_with_marked_victims(self) -> Collection[str]:
        """The jobs some present pod's soft-eviction mark names."""
        return self._marked_for.keys()

    def pending_jobs(self) -> Mapping[str, Collection[str]]:
        """Job → keys of its pods not bound yet (neither finished nor terminating): the
        jobs with work waiting, for fair sharing's admission check."""
        return self._pending

    def nominated_to(self, node: str) -> Collection[str]:
        """Keys of the pending pods whose ``status.nominatedNodeName`` is ``node``."""
        return self._nominated.get(node, ())

    def last_joined(self, job: str) -> float | None:
        """When the newest pod of a pod-group job was first seen (live), or created."""
        return self._joined.get(job)

    def joined(self) -> Mapping[str, float]:
        """:meth:`last_joined` of every pod-group job."""
        return self._joined


def _member(index: dict[str, set[str]], at: str, key: str, sign: int) -> None:
    """Add ``key`` to (``sign=1``) or take it from (``-1``) the set at ``index[at]``."""
    if sign > 0:
        index.setdefault(at, set()).add(key)
        return
    members = index.get(at)
    if members is not None:
        members.discard(key)
        if not members:
            del index[at]
