"""Job-level quota admission for one pod's filter call.

A pod is admitted when its whole job fits its quota (and every ancestor's max): the
pods of the job the quota has not charged yet are checked together
(:func:`~extender.core.placement.demand.job_demand`).  A pod whose job's preemption
freed room waits until that room is free in fact (:func:`room_not_free_yet`).  An
admitted pod's job is held against its quota until kube-scheduler binds it
(:func:`admission_hold`), as kube-scheduler's cache assumes a pod.  A job that would
borrow past its quota's fair share waits for other quotas' work
(:mod:`~extender.core.placement.fairshare`), and one another quota took back waits out its
reborrow backoff before it borrows (:mod:`~extender.core.placement.reborrow`).
"""

from __future__ import annotations

from collections.abc import Collection

from extender.core.effects import HoldQuota
from extender.core.objects import PodInfo
from extender.core.placement.demand import JobDemand, job_demand, uncharged_with_min_resources
from extender.core.placement.fairshare import borrowing_wait
from extender.core.state import ClusterState
from quota.admission import job_admission_failures, over_max_on_path
from quota.tree import QuotaMembershipError


def admission_failures(
    state: ClusterState,
    pod: PodInfo,
    now: float | None = None,
    nodes: Collection[str] | None = None,
) -> list[str]:
    """Why the job of ``pod`` is not admitted by its quota; empty when it is.  With the
    time ``now``, a job that would borrow past its quota's fair share while another
    quota's work waits that could use one of ``nodes`` (the pod's candidates; ``None``:
    any) is not admitted either (:mod:`~extender.core.placement.fairshare`)."""
    return admission_verdict(state, pod, now, nodes)[0]


def admission_verdict(
    state: ClusterState,
    pod: PodInfo,
    now: float | None = None,
    nodes: Collection[str] | None = None,
) -> tuple[list[str], bool]:
    """:func:`admission_failures`, and whether the pod waits for room on its way out
    (:func:`room_not_free_yet`, worked out once): then a failure is a wait."""
    waiting = room_not_free_yet(state, pod, now)
    return _admission_failures(state, pod, now, nodes, waiting), waiting is not None


def _admission_failures(
    state: ClusterState,
    pod: PodInfo,
    now: float | None,
    nodes: Collection[str] | None,
    waiting: str | None,
) -> list[str]:
    try:
        quota = state.quota_of(pod)
    except QuotaMembershipError as error:
        return [error.reason]
    if quota in state.tree.parents:
        return [f"quota {quota} is a parent quota; pods must use a leaf quota"]
    if waiting is not None:
        return [waiting]
    if state.counts_as_used(pod):
        return []  # its room is already charged (bound, reserved, or its job's hold)
    try:
        demand = job_demand(state, pod.job, including=pod)
    except QuotaMembershipError as error:  # another pod of the job names a quota it may not
        return [error.reason]
    if not demand.unplaced:
        return []
    failures = job_admission_failures(state.ledger, quota, demand.np_request, demand.p_request)
    if failures or now is None:
        return failures
    wait = borrowing_wait(state, demand, now, nodes=nodes)
    return [wait.reason] if wait is not None else []


def room_not_free_yet(state: ClusterState, pod: PodInfo, now: float | None = None) -> str | None:
    """Why pending ``pod`` waits for room its job's preemption freed to be free in fact;
    ``None`` when it need not.  A wait, not a refusal: the room comes once pods on their
    way out have left (kube-scheduler waits the same way for its own nominated node's
    terminating victims)."""
    if pod.node_name is not None:
        return None
    if victims_still_there(state, pod.job) and not may_go_without_victims(state, pod, now):
        # Every pending pod of a job whose preemption victims are still there waits for
        # them to go: the room its plan freed is still theirs, and binding now would put
        # the quota (or an ancestor) above its max until they leave.  (One message while
        # they leave: a changing one would requeue the pod at every victim.)  A lone pod
        # whose victim still runs may take room freed elsewhere meanwhile
        # (:func:`may_go_without_victims`): then its victims are spared.
        return (
            f"quota room reserved for job {pod.job} is not free yet: its preemption's "
            "victims are still there"
        )
    quota = state.quota_name(pod) if pod.job in state.reservations else None
    if quota is not None:
        asks = {
            name
            for pending in state.members.job_pods(pod.job)
            if pending.node_name is None
            for name, amount in pending.requests.items()
            if amount > 0
        } | {name for name, amount in pod.requests.items() if amount > 0}
        over = over_max_on_path(state.ledger, quota, asks)
        if over is not None:
            # Its plan counted every pod on its way out as gone, its own victims and
            # others (terminating, marked for other jobs), and saw only what its replica
            # had seen: until those pods have left (or what another replica admitted
            # meanwhile), the ledger, which counts them and the job's reserved room, is
            # over a max on the job's path, and binding would keep it there.
            return (
                f"quota room reserved for job {pod.job} is not free yet: quota {over} is "
                "over its max until pods on their way out have left"
            )
    return None


def victims_still_there(state: ClusterState, job: str) -> bool:
    """Is a victim of ``job``'s preemption still there: a pod whose soft-eviction mark
    names the job (until it is gone), or one its reservation counts on that is not yet
    terminating (Muster's plan committed in memory before the informer reads its marks
    back)?  A victim that exited by itself (on notice) is gone.  Victims kube-scheduler
    preempted itself are deleted at once, unmarked: once terminating, kube-scheduler's
    own nomination waits for them."""
    if state.members.marked_victims(job):
        return True
    reservation = state.reservations.get(job)
    if reservation is None:
        return False
    # A victim is a bound pod: a pending one under its name is a new pod (its controller's
    # replacement, a StatefulSet's pod of the same name), not the victim still there.
    victims = (state.pods.get(key) for key in reservation.victims)
    return any(
        victim is not None
        and victim.node_name is not None
        and not victim.terminating
        and not victim.finished
        for victim in victims
    )


def may_go_without_victims(state: ClusterState, pod: PodInfo, now: float | None) -> bool:
    """May reserved ``pod``, the one pod of its job, bind without its victims going (at
    ``now``; ``None``: it may not)?
    While one of them still runs (its notice, or its mark not yet read back) and none is
    leaving yet, and the job would be admitted now, as a job arriving with the victims
    kept and its reserved room let go: its quota and every ancestor within their ``max``,
    room up to ``min`` for non-preemptible pods, fair sharing.  Then it may take room
    that frees elsewhere; once it is bound its victims are spared
    (:func:`~extender.core.settling.spared_victims`).  A gang waits for its victims
    whole (a pod of it binding alone would strand the rest)."""
    reservation = state.reservations.get(pod.job)
    if now is None or reservation is None or state.reserved_node(pod.key) is None:
        return False
    if len(state.members.job_members(pod.job)) != 1:
        return False
    if state.declarations.declares_min_resources(pod.job):
        return False
    victims = [state.pods.get(key) for key in reservation.victims]
    marked = state.members.marked_pods(pod.job)
    if any(v is not None and (v.terminating or v.finished) for v in (*victims, *marked)):
        return False  # its room is on its way: binding elsewhere wastes that eviction
    if not any(v is not None and v.node_name is not None for v in (*victims, *marked)):
        return False
    try:
        quota = state.quota_of(pod)
    except QuotaMembershipError:
        return False
    preemptible = state.preemptible(pod)
    ledger = state.ledger.overlay()
    ledger.charge(quota, pod.requests, preemptible=preemptible, used=True, sign=-1)
    np_request = {} if preemptible else dict(pod.requests)
    p_request = dict(pod.requests) if preemptible else {}
    if job_admission_failures(ledger, quota, np_request, p_request):
        return False
    demand = JobDemand(pod.job, quota, (pod,), np_request, p_request)
    return borrowing_wait(state, demand, now, ledger) is None


def added_pods_admission_failures(
    state: ClusterState, pod: PodInfo, placed: Collection[str]
) -> list[str]:
    """Why the ``placed`` pods of ``pod``'s job that its quota has not charged yet (pods
    created after the job's room was reserved or held) do not fit the quota; empty when
    they do."""
    pods = [state.pods[key] for key in placed if key in state.pods]
    np_request, p_request = uncharged_with_min_resources(state, pod.job, pods)
    if not np_request and not p_request:
        return []
    quota = state.quota_of(pod)
    return job_admission_failures(state.ledger, quota, np_request, p_request)


def admission_hold(state: ClusterState, pod: PodInfo, until: float) -> HoldQuota | None:
    """After ``pod`` passed admission, the hold that charges it, and its job's other
    pending pods, to the quota until ``until`` (or until each is seen bound, deleted, or
    turned away): kube-scheduler assumes the pod and binds it a moment later, and
    Muster's cache sees the binding only then, so a pod filtered meanwhile must not be
    admitted against the same room (kube-scheduler's own cache assumes a pod the same
    way).  The job was admitted whole: its other pods are held with it.  ``pod`` itself
    may not have reached the state yet: the hold carries it."""
    unseen = () if pod.key in state.pods else (pod,)
    if pod.group is None:
        return HoldQuota(pod.job, (pod.key,), until, unseen)
    # A pod admitted before (held) extends its job's hold over the pods it held then: pods
    # created since were never checked against the quota.
    readmitted = state.quota_held(pod.key)
    pending = tuple(
        other.key
        for other in state.members.job_pods(pod.job)
        if other.node_name is None
        and not other.finished
        and not other.terminating
        and (not readmitted or state.quota_held(other.key))
    ) + tuple(p.key for p in unseen)
    return HoldQuota(pod.job, pending, until, unseen) if pending else None
