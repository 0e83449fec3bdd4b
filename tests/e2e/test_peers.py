"""scheduler-plugins' own scheduler, built and run here like kube-scheduler is (issue 25,
item 1): the peer Muster is compared with, shown to work on the local control plane
before any comparison is trusted.  Not part of ``make test`` (the peer takes minutes to
build): ``make test-peers``.

Expectations from scheduler-plugins' documented behaviour (v0.34.7): Coscheduling holds a
PodGroup's pods at Permit until ``minMember`` of them can be placed, and binds none of
them otherwise; CapacityScheduling refuses a pod that would take its ElasticQuota past
``max``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, Json, make_job, make_pod

import localcluster as lc

pytestmark = pytest.mark.peers

GPU = "nvidia.com/gpu"
NODE: dict[str, str | int] = {"cpu": "32", "memory": "128Gi", GPU: 8}


@pytest.fixture(scope="module")
def peer_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lc.ControlPlane]:
    """The v1.35 control plane with scheduler-plugins' kube-scheduler in kube-scheduler's
    place, on its documented configuration."""
    plane = lc.ControlPlane(
        bin_dir=lc.ensure_binaries(version=lc.peers.SCHEDULER_PLUGINS_KUBERNETES),
        workdir=tmp_path_factory.mktemp("peer"),
        scheduler_binary=lc.ensure_peer("scheduler-plugins") / "kube-scheduler",
        scheduler_config=lc.peers.scheduler_plugins_config(),
        scheduler_rbac=lc.peers.scheduler_plugins_rbac(),
    )
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


def bound(cluster: Cluster, names: list[str]) -> dict[str, str | None]:
    return {n: (cluster.get_pod(n) or {}).get("spec", {}).get("nodeName") for n in names}


def gang_waits_whole_then_binds(
    cluster: Cluster, declared: dict[str, Any], verdict_timeout: float
) -> None:
    """Three 8-GPU nodes, one taken by a lone 8-GPU pod; a gang of three 8-GPU pods, each
    created with ``declared`` (its labels or annotations): the scheduler binds none of
    them (two could run).  The lone pod deleted: all three bind, one per node."""
    for i in range(3):
        cluster.create_node(f"n{i}", NODE)
    cluster.create_pod("lone", requests={"cpu": "1", GPU: 8})
    cluster.wait_running("lone", timeout=60)
    names = [f"g-{i}" for i in range(3)]
    for name in names:
        cluster.create_pod(name, requests={"cpu": "1", GPU: 8}, **declared)
    lc.wait_until(
        lambda: all("PodScheduled" in str((cluster.get_pod(n) or {}).get("status")) for n in names),
        timeout=verdict_timeout,
        what="the scheduler's verdict on every pod",
    )
    assert not any(bound(cluster, names).values()), bound(cluster, names)
    cluster.delete_pod("lone", grace_seconds=0)
    lc.wait_until(lambda: all(bound(cluster, names).values()), timeout=120, what="all three bound")
    assert len(set(bound(cluster, names).values())) == 3


def test_coscheduling_binds_a_pod_group_whole_or_not_at_all(
    peer_plane: lc.ControlPlane, tmp_path: Path
) -> None:
    """Three 8-GPU nodes, one taken by a lone 8-GPU pod; a PodGroup of three 8-GPU pods:
    Coscheduling binds none of them (two could run).  The lone pod deleted: all three
    bind, one per node."""
    cluster = Cluster(peer_plane, "cosched")
    peer_plane.create_namespace("cosched")
    try:
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "cosched"},
            "spec": {"minMember": 3},
        }
        peer_plane.rest.request(
            "POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/cosched/podgroups", group
        )
        gang_waits_whole_then_binds(
            cluster, {"labels": {"scheduling.x-k8s.io/pod-group": "g"}}, verdict_timeout=60
        )
    finally:
        cluster.cleanup()


def test_capacity_scheduling_stops_a_quota_at_its_max(
    peer_plane: lc.ControlPlane, tmp_path: Path
) -> None:
    """An ElasticQuota of max 16 GPUs and three free 8-GPU nodes: of three 8-GPU pods
    created one by one, two bind and the third stays pending."""
    cluster = Cluster(peer_plane, "capacity")
    peer_plane.create_namespace("capacity")
    try:
        quota = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "q", "namespace": "capacity"},
            # scheduler-plugins counts a resource absent from max as a max of 0: name cpu
            # and memory with room to spare, so GPUs alone decide.
            "spec": {
                "min": {GPU: "16", "cpu": "64", "memory": "1Ti"},
                "max": {GPU: "16", "cpu": "64", "memory": "1Ti"},
            },
        }
        peer_plane.rest.request(
            "POST", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/capacity/elasticquotas", quota
        )
        for i in range(3):
            cluster.create_node(f"n{i}", NODE)
        names = [f"p-{i}" for i in range(3)]
        for name in names[:2]:
            cluster.create_pod(name, requests={"cpu": "1", GPU: 8})
            cluster.wait_running(name, timeout=60)
        cluster.create_pod(names[2], requests={"cpu": "1", GPU: 8})
        cluster.wait_unschedulable(names[2], timeout=60)
        assert bound(cluster, names)[names[2]] is None
    finally:
        cluster.cleanup()


# -- Kueue v0.17.0 beside the stock kube-scheduler
#
# Expectations from Kueue's documented semantics (kueue.sigs.k8s.io, concepts:
# ClusterQueue, Workload, Preemption, partial admission; v0.17.0): a Job labelled with a
# LocalQueue and created suspended gets a Workload; Kueue admits it (reserves its quota
# and unsuspends the Job) only if all of its pods' requests fit the ClusterQueue's nominal
# quota plus what it may borrow from its cohort, or, for a Job annotated
# ``kueue.x-k8s.io/job-min-parallelism``, as many of its pods as fit down to that minimum
# (its parallelism lowered to the count admitted); an admitted Workload's quota is
# released when it finishes; with ``reclaimWithinCohort: Any`` a Workload that fits its
# queue's nominal quota evicts Workloads of other queues of the cohort that borrow, and an
# evicted Job is suspended again (its pods deleted) and its Workload requeued.  The queues
# and Workloads are Kueue's v1beta2 API (lc.kueue_install.KUEUE_API); Kueue's Job webhook
# is registered (lc.kueue's docstring), and jobs are submitted suspended, labelled, all
# the same.

KUEUE_POD: dict[str, str | int] = {"cpu": "1", GPU: 8}
#: Kueue's partial admission: the fewest pods a Job may be admitted with.
MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"


@pytest.fixture(scope="module")
def kueue_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lc.ControlPlane]:
    """The v1.35 control plane with its stock kube-scheduler, and Kueue's controller
    manager beside it (lc.kueue; its CRDs, conversion webhook and configuration:
    lc.kueue_install)."""
    plane = lc.ControlPlane(
        bin_dir=lc.ensure_binaries(version=lc.kueue_install.KUEUE_KUBERNETES),
        workdir=tmp_path_factory.mktemp("kueue"),
        crds_dir=None,
    )
    manager: lc.kueue.KueueManager | None = None
    try:
        plane.start()
        manager = lc.kueue.start_kueue(plane)
        yield plane
    finally:
        if manager is not None:
            manager.stop()
        plane.stop()


def kueue_setup(
    plane: lc.ControlPlane, teams: list[tuple[str, int, int]], cohort: str
) -> list[Json]:
    """The teams' queues (lc.kueue_objects.kueue_queues) created and Active; returned for
    cleanup."""
    objects = [
        o
        for o in lc.kueue_objects.kueue_queues(teams, cohort=cohort)
        if o["kind"] != "ResourceFlavor"
    ]
    flavor = lc.kueue_objects.kueue_queues([])  # the shared ResourceFlavor "default"
    lc.kueue_objects.create_kueue_objects(plane, flavor + objects)
    lc.kueue_objects.wait_queues_active(plane, objects)
    return objects


def submit_gpu_job(
    plane: lc.ControlPlane,
    namespace: str,
    name: str,
    pods: int,
    run_seconds: float | None,
    *,
    suspend: bool = True,
) -> Json:
    """A Job of ``pods`` pods of 8 GPUs each, submitted to the namespace's LocalQueue
    (labelled, and created suspended unless ``suspend`` is false); the Job as stored."""
    job = make_job(
        name, make_pod(name, requests=KUEUE_POD), parallelism=pods, run_seconds=run_seconds
    )
    body = lc.kueue_objects.kueue_job(job, queue=namespace)
    if not suspend:
        del body["spec"]["suspend"]
    stored: Json = plane.rest.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
    return stored


def workload(plane: lc.ControlPlane, namespace: str, job: str) -> Json | None:
    found = lc.kueue_objects.job_workloads(plane, namespace, job)
    return found[0] if found else None


def admitted(plane: lc.ControlPlane, namespace: str, job: str) -> bool:
    w = workload(plane, namespace, job)
    return w is not None and lc.kueue_objects.workload_condition(w, "Admitted")


def suspended(plane: lc.ControlPlane, namespace: str, job: str) -> bool:
    got = plane.rest.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{job}")
    return bool(got["spec"].get("suspend"))


def running_pods(cluster: Cluster, namespace: str, job: str) -> list[Json]:
    return [
        p
        for p in cluster.job_pods(namespace, job)
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]


def kueue_cleanup(plane: lc.ControlPlane, clusters: list[Cluster], objects: list[Json]) -> None:
    for cluster in clusters:
        cluster.cleanup()
    lc.kueue_objects.delete_kueue_objects(plane, objects)


def test_kueue_admits_a_job_within_its_quota(kueue_plane: lc.ControlPlane) -> None:
    """(a) A Job of 2 x 8 GPUs with the queue-name label, under a ClusterQueue of nominal
    quota 16, created without ``suspend``: Kueue's Job webhook stores it suspended; Kueue
    admits its Workload and unsuspends it; kube-scheduler binds both pods (two 8-GPU
    nodes), they run, and Kueue records the Workload PodsReady."""
    ns = "kq-admit"
    cluster = Cluster(kueue_plane, ns)
    objects = kueue_setup(kueue_plane, [(ns, 16, 16)], cohort=ns)
    try:
        for i in range(2):
            cluster.create_node(f"n{i}", NODE)
        submit_gpu_job(kueue_plane, ns, "train", pods=2, run_seconds=None)
        lc.wait_until(lambda: admitted(kueue_plane, ns, "train"), timeout=60, what="train admitted")
        lc.wait_until(
            lambda: not suspended(kueue_plane, ns, "train"), timeout=30, what="train unsuspended"
        )
        lc.wait_until(
            lambda: len(running_pods(cluster, ns, "train")) == 2,
            timeout=60,
            what="both pods of train Running",
        )
        pods = running_pods(cluster, ns, "train")
        assert len({p["spec"]["nodeName"] for p in pods}) == 2
        lc.wait_until(
            lambda: lc.kueue_objects.workload_condition(
                workload(kueue_plane, ns, "train") or {}, "PodsReady"
            ),
            timeout=60,
            what="train's Workload PodsReady",
        )
    finally:
        kueue_cleanup(kueue_plane, [cluster], objects)


def test_kueue_holds_a_job_past_max_until_room_is_released(kueue_plane: lc.ControlPlane) -> None:
    """(b) A ClusterQueue of 16 GPUs (max = min: no borrowing) on four free 8-GPU nodes.
    A first Job of 2 x 8 GPUs running for 15 s is admitted; a second of 2 x 8 GPUs would
    take the queue to 32: Kueue leaves its Workload without quota (QuotaReserved false) and
    the Job suspended, although the nodes have room, until the first Job finishes and its
    Workload's quota is released; then it is admitted and runs."""
    ns = "kq-max"
    cluster = Cluster(kueue_plane, ns)
    objects = kueue_setup(kueue_plane, [(ns, 16, 16)], cohort=ns)
    try:
        for i in range(4):
            cluster.create_node(f"n{i}", NODE)
        submit_gpu_job(kueue_plane, ns, "first", pods=2, run_seconds=15)
        lc.wait_until(
            lambda: len(running_pods(cluster, ns, "first")) == 2,
            timeout=60,
            what="both pods of first Running",
        )
        submit_gpu_job(kueue_plane, ns, "second", pods=2, run_seconds=5)

        def refused() -> bool:
            w = workload(kueue_plane, ns, "second")
            conditions = (w or {}).get("status", {}).get("conditions") or []
            return any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in conditions)

        lc.wait_until(refused, timeout=60, what="Kueue's verdict on second: no quota")
        assert suspended(kueue_plane, ns, "second")
        assert not cluster.job_pods(ns, "second")

        def second_admitted() -> bool:
            if not admitted(kueue_plane, ns, "second"):
                return False
            first = workload(kueue_plane, ns, "first") or {}
            # Admitted only once the first Workload finished and released its quota.
            assert lc.kueue_objects.workload_condition(first, "Finished"), first.get("status")
            return True

        lc.wait_until(second_admitted, timeout=90, what="second admitted after first finished")
        lc.wait_until(
            lambda: (
                len(running_pods(cluster, ns, "second")) == 2
                or lc.kueue_objects.workload_condition(
                    workload(kueue_plane, ns, "second") or {}, "Finished"
                )
            ),
            timeout=60,
            what="second's pods running (or done)",
        )
    finally:
        kueue_cleanup(kueue_plane, [cluster], objects)


def test_kueue_admits_part_of_a_job_down_to_its_min_parallelism(
    kueue_plane: lc.ControlPlane,
) -> None:
    """(b') Partial admission: a ClusterQueue of 16 GPUs (no borrowing) on four free 8-GPU
    nodes, a Job of 4 x 8 GPUs annotated ``kueue.x-k8s.io/job-min-parallelism: 2``: the
    whole Job would take the queue to 32, so Kueue admits its Workload with 2 pods (the
    Workload's assignment count and the Job's parallelism lowered to 2), and two pods
    run; the nodes have room for the other two, which are never created."""
    ns = "kq-partial"
    cluster = Cluster(kueue_plane, ns)
    objects = kueue_setup(kueue_plane, [(ns, 16, 16)], cohort=ns)
    try:
        for i in range(4):
            cluster.create_node(f"n{i}", NODE)
        job = make_job(
            "elastic", make_pod("elastic", requests=KUEUE_POD), parallelism=4, run_seconds=None
        )
        job["metadata"]["annotations"] = {MIN_PARALLELISM: "2"}
        body = lc.kueue_objects.kueue_job(job, queue=ns)
        kueue_plane.rest.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)
        lc.wait_until(
            lambda: admitted(kueue_plane, ns, "elastic"), timeout=60, what="elastic admitted"
        )
        admission = (workload(kueue_plane, ns, "elastic") or {})["status"]["admission"]
        assert [a.get("count") for a in admission["podSetAssignments"]] == [2], admission
        lc.wait_until(
            lambda: not suspended(kueue_plane, ns, "elastic"),
            timeout=30,
            what="elastic unsuspended",
        )
        stored = kueue_plane.rest.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/elastic")
        assert stored["spec"]["parallelism"] == 2, stored["spec"]
        lc.wait_until(
            lambda: len(running_pods(cluster, ns, "elastic")) == 2,
            timeout=60,
            what="two pods of elastic Running",
        )
        assert len(cluster.job_pods(ns, "elastic")) == 2
    finally:
        kueue_cleanup(kueue_plane, [cluster], objects)


def test_kueue_reclaims_borrowed_quota_by_preempting(kueue_plane: lc.ControlPlane) -> None:
    """(c) Two teams of nominal 16 and max 32 GPUs in one cohort, four 8-GPU nodes.  Team
    B's Job of 4 x 8 GPUs borrows A's unused 16 and runs.  Team A then submits 2 x 8 GPUs,
    within its nominal quota: with ``reclaimWithinCohort: Any`` Kueue preempts B's
    Workload (Evicted, reason Preempted; the Job suspended, its pods deleted) and admits
    A's, whose pods then run.  B's Workload stays pending: 32 GPUs no longer fit."""
    a, b, cohort = "kq-a", "kq-b", "kq-reclaim"
    cluster_a, cluster_b = Cluster(kueue_plane, a), Cluster(kueue_plane, b)
    objects = kueue_setup(kueue_plane, [(a, 16, 32), (b, 16, 32)], cohort=cohort)
    try:
        for i in range(4):
            cluster_b.create_node(f"n{i}", NODE)
        submit_gpu_job(kueue_plane, b, "filler", pods=4, run_seconds=None)
        lc.wait_until(
            lambda: len(running_pods(cluster_b, b, "filler")) == 4,
            timeout=90,
            what="B's filler running on every GPU",
        )
        submit_gpu_job(kueue_plane, a, "train", pods=2, run_seconds=None)

        def b_preempted() -> bool:
            w = workload(kueue_plane, b, "filler") or {}
            conditions = w.get("status", {}).get("conditions") or []
            return any(
                c["type"] == "Evicted" and c["status"] == "True" and c["reason"] == "Preempted"
                for c in conditions
            )

        lc.wait_until(b_preempted, timeout=60, what="B's Workload evicted by preemption")
        lc.wait_until(
            lambda: admitted(kueue_plane, a, "train"), timeout=60, what="A's train admitted"
        )
        lc.wait_until(
            lambda: len(running_pods(cluster_a, a, "train")) == 2,
            timeout=90,
            what="A's train running",
        )
        assert suspended(kueue_plane, b, "filler")
        assert not admitted(kueue_plane, b, "filler")
        lc.wait_until(
            lambda: not running_pods(cluster_b, b, "filler"),
            timeout=30,
            what="B's pods gone",
        )
    finally:
        kueue_cleanup(kueue_plane, [cluster_a, cluster_b], objects)


# -- Koordinator v1.6.0's koord-scheduler in kube-scheduler's place
#
# Expectations from Koordinator's documented behaviour (v1.6.0: docs/proposals/scheduling/
# 20220901-gang-scheduling.md and 20220722-multi-hierarchy-elastic-quota-management.md of
# the module, and the plugins' code): a gang declared by the pod annotations
# gang.scheduling.koordinator.sh/name and /min-available is held at Permit until
# min-available members are placed, and in its default StrictMode a member that cannot be
# placed rejects the members waiting, so none binds; the ElasticQuota plugin refuses at
# PreFilter a pod whose quota's used plus its request would pass the quota's runtime
# quota, which never exceeds max.  The plane runs the module's documented profile less
# the plugins that need koordlet's reports (lc.koordinator.koordinator_scheduler_config).


@pytest.fixture(scope="module")
def koord_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lc.ControlPlane]:
    """The v1.35 control plane with koord-scheduler in kube-scheduler's place, Koordinator's
    CRDs installed (lc.koordinator.koordinator_control_plane).  Unschedulable pods are
    swept back to the queue after 10 s rather than 5 min: on this quiet cluster a gang
    whose last member lost the race between Coscheduling's PreEnqueue and its gang cache
    would otherwise wait minutes (lc.koordinator.KoordinatorControlPlane)."""
    plane = lc.koordinator.koordinator_control_plane(
        bin_dir=lc.ensure_binaries(version=lc.koordinator.KOORDINATOR_KUBERNETES),
        workdir=tmp_path_factory.mktemp("koordinator"),
        max_unschedulable_seconds=10,
    )
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


def test_koord_gang_binds_whole_or_not_at_all(koord_plane: lc.ControlPlane) -> None:
    """Three 8-GPU nodes, one taken by a lone 8-GPU pod; a Koordinator gang (annotations)
    of three 8-GPU pods: none binds (two could run).  The lone pod deleted: all three
    bind, one per node."""
    cluster = Cluster(koord_plane, "koord-gang")
    koord_plane.create_namespace("koord-gang")
    try:
        # Up to one 30 s sweep plus 10 s when the last member was gated (the fixture).
        gang_waits_whole_then_binds(
            cluster,
            {"annotations": lc.koordinator.gang_annotations("g", 3)},
            verdict_timeout=120,
        )
    finally:
        cluster.cleanup()


def test_koord_elastic_quota_stops_at_its_max(koord_plane: lc.ControlPlane) -> None:
    """A scheduling.sigs.k8s.io ElasticQuota of max 16 GPUs and three free 8-GPU nodes: of
    three 8-GPU pods created one by one, two bind and the third stays pending."""
    cluster = Cluster(koord_plane, "koord-quota")
    koord_plane.create_namespace("koord-quota")
    try:
        # Named as its namespace, in it: koord-scheduler's quota for that namespace's pods.
        # Only the resources named in max are counted (its PreFilter masks the pod's
        # request by them).
        quota = lc.koordinator.elastic_quota(
            "koord-quota", "koord-quota", min={GPU: "16"}, max={GPU: "16"}
        )
        koord_plane.rest.request(
            "POST",
            "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/koord-quota/elasticquotas",
            quota,
        )
        for i in range(3):
            cluster.create_node(f"n{i}", NODE)
        names = [f"p-{i}" for i in range(3)]
        for name in names[:2]:
            cluster.create_pod(name, requests={"cpu": "1", GPU: 8})
            cluster.wait_running(name, timeout=60)
        cluster.create_pod(names[2], requests={"cpu": "1", GPU: 8})
        cluster.wait_unschedulable(names[2], timeout=60)
        assert bound(cluster, names)[names[2]] is None
    finally:
        cluster.cleanup()
