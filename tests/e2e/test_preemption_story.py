"""The shared scenarios' preemption stories, played on the real control plane.

Muster watches the cluster (``serve --kubeconfig``) as kube-scheduler's
extender; the reference evictor (``muster evictor``) consumes the
soft-eviction marks; the harness plays the kubelet.  A gang that needs
preemption gets exactly the victims the planner picks, every pod of it binds,
and nothing else is evicted; a gang that cannot fit whole evicts nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e_support import Cluster, condition, delete_namespaced, make_pod, sample_scheduler_config
from muster_process import MusterProcess, start_evictor
from test_muster_extender import GPU, create_quota

import localcluster as lc

pytestmark = pytest.mark.e2e

SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
PREEMPTIBLE = {"quota.scheduling.koordinator.sh/preemptible": "true"}
TRAINER = {
    "quota.scheduling.koordinator.sh/preemptible": "false",
    "quota.scheduling.koordinator.sh/can-preempt": "true",
}


@pytest.fixture(scope="module")
def tokens(control_plane: lc.ControlPlane) -> dict[str, Path]:
    """Apply manifests/rbac.yaml; kubeconfigs with the muster and evictor ServiceAccounts'
    tokens: Muster runs with exactly the access the manifests grant, not as admin."""
    return control_plane.muster_kubeconfigs()


@contextlib.contextmanager
def muster_with_evictor(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],
    scheduler: Callable[[str], tuple[lc.ExtenderConfig, dict[str, Any]]],
    extra_args: tuple[str, ...] = (),
) -> Iterator[MusterProcess]:
    """Muster (with ``extra_args``) and the evictor on the manifests' ServiceAccount
    tokens, with kube-scheduler configured by ``scheduler(muster's URL)`` (its extender
    entry and other settings)."""
    muster = MusterProcess(tmp_path, kubeconfig=tokens["muster"], extra_args=extra_args)
    evictor = start_evictor(tokens["muster-evictor"], tmp_path / "evictor.log", metrics=True)
    muster.evictor_metrics_url = f"{evictor.url}/metrics"
    extender, config = scheduler(muster.url)
    try:
        with control_plane.using_extender(extender, scheduler_config=config):
            yield muster
    finally:
        evictor.stop()
        muster.stop()


@contextlib.contextmanager
def muster_with_arguments(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],
    arguments: Mapping[str, Any],
) -> Iterator[MusterProcess]:
    """:func:`muster_with_evictor` with the harness's scheduler settings and every verb,
    and Muster's ``--config`` file holding ``arguments``."""
    config = tmp_path / "muster-args.yaml"
    config.write_text(yaml.safe_dump(dict(arguments)))
    with muster_with_evictor(
        control_plane,
        tmp_path,
        tokens,
        lambda url: (lc.ExtenderConfig(url, bind=True), control_plane.scheduler_overrides),
        extra_args=("--config", str(config)),
    ) as muster:
        yield muster


@pytest.fixture
def muster_and_evictor(
    control_plane: lc.ControlPlane, tmp_path: Path, tokens: dict[str, Path]
) -> Iterator[MusterProcess]:
    """Every verb, binding included, with the harness's scheduler settings."""
    with muster_with_evictor(
        control_plane,
        tmp_path,
        tokens,
        lambda url: (lc.ExtenderConfig(url, bind=True), control_plane.scheduler_overrides),
    ) as muster:
        yield muster


class Teams:
    """Two team namespaces with their quotas, inside one test."""

    def __init__(
        self, cluster: Cluster, a: dict[str, Any], b: dict[str, Any], suffix: str = ""
    ) -> None:
        self.cluster = cluster
        self.a = f"{cluster.namespace}-a{suffix}"
        self.b = f"{cluster.namespace}-b{suffix}"
        for namespace, spec in ((self.a, a), (self.b, b)):
            cluster.plane.create_namespace(namespace)
            create_quota(cluster, namespace, namespace, spec)

    def create(self, namespace: str, name: str, **kwargs: Any) -> None:
        self.cluster.rest.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", make_pod(name, **kwargs)
        )

    def annotate_quota(self, namespace: str, annotations: dict[str, str]) -> None:
        """Set ``annotations`` on the team's quota (its namespace's), as an admin would."""
        self.cluster.rest.request(
            "PATCH",
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas/{namespace}",
            {"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json",
        )

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.cluster.rest.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except lc.ApiError as error:
            if error.status == 404:
                return None
            raise

    def wait(self, namespace: str, name: str, phase: str, timeout: float = 60) -> None:
        lc.wait_until(
            lambda: (
                (self.get(namespace, name) or {}).get("status", {}).get("phase") == phase or None
            ),
            timeout=timeout,
            what=f"{namespace}/{name} {phase}",
        )

    def force_delete(self, namespace: str, name: str) -> None:
        """Delete the pod with no grace period (one already gone is no error)."""
        try:
            self.cluster.rest.request(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
        except lc.ApiError as error:
            if error.status != 404:
                raise

    def delete_now(self, namespace: str, name: str) -> None:
        """Delete the pod with no grace period (as if it completed) and wait until it is
        gone."""
        self.force_delete(namespace, name)
        lc.wait_until(
            lambda: self.get(namespace, name) is None or None,
            timeout=60,
            what=f"{namespace}/{name} gone",
        )

    def events(self, namespace: str, reason: str) -> list[dict[str, Any]]:
        items = self.cluster.rest.request("GET", f"/api/v1/namespaces/{namespace}/events")
        return [e for e in items.get("items", []) if e.get("reason") == reason]

    def cleanup(self) -> None:
        for namespace in (self.a, self.b):
            delete_namespaced(self.cluster.rest, namespace)


def fill_with_borrowers(teams: Teams, count: int) -> None:
    """Team B borrows every node with one 8-GPU preemptible pod each, started in order."""
    for i in range(count):
        teams.create(teams.b, f"b-{i}", requests={"cpu": "4", GPU: 8}, labels=PREEMPTIBLE)
        teams.wait(teams.b, f"b-{i}", "Running")


@pytest.fixture
def muster_with_the_sample_config(
    control_plane: lc.ControlPlane, tmp_path: Path, tokens: dict[str, Path]
) -> Iterator[MusterProcess]:
    """kube-scheduler run on manifests/scheduler-config.yaml (filter and preempt only,
    kube-scheduler's own MostAllocated packing)."""
    with muster_with_evictor(control_plane, tmp_path, tokens, sample_scheduler_config) as muster:
        yield muster


def test_gang_fits_after_eviction(cluster: Cluster, muster_and_evictor: MusterProcess) -> None:
    gang_fits_after_eviction(cluster, muster_and_evictor)


def test_gang_fits_after_eviction_with_the_sample_scheduler_config(
    cluster: Cluster, muster_with_the_sample_config: MusterProcess
) -> None:
    gang_fits_after_eviction(cluster, muster_with_the_sample_config)


def gang_fits_after_eviction(cluster: Cluster, muster: MusterProcess) -> None:
    for i in range(4):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    try:
        fill_with_borrowers(teams, 4)
        # The victims are the two most recently started borrowers (startTime has a
        # resolution of one second; ties go by name, as docs/design.md's order says).
        borrowers = [f"b-{i}" for i in range(4)]
        started = {n: (teams.get(teams.b, n) or {})["status"]["startTime"] for n in borrowers}
        order = sorted(borrowers, key=lambda n: (-_epoch(started[n]), f"{teams.b}/{n}"))
        victims, spared = sorted(order[:2]), sorted(order[2:])
        freed = sorted((teams.get(teams.b, n) or {})["spec"]["nodeName"] for n in victims)
        for i in range(2):
            labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
            teams.create(teams.a, f"train-{i}", requests={"cpu": "4", GPU: 8}, labels=labels)
        for name in victims:
            lc.wait_until(
                lambda name=name: teams.get(teams.b, name) is None or None,
                timeout=60,
                what=f"{name} evicted",
            )
        for i in range(2):
            teams.wait(teams.a, f"train-{i}", "Running", timeout=60)
        # The gang took the room freed for it.
        placed = sorted(
            (teams.get(teams.a, f"train-{i}") or {})["spec"]["nodeName"] for i in range(2)
        )
        assert placed == freed
        for name in spared:
            pod = teams.get(teams.b, name)
            assert pod is not None and pod["status"]["phase"] == "Running"
            assert SOFT_EVICTION not in pod["metadata"].get("labels", {})

        # Events are written after the marks they report: wait for as many as victims.
        def an_event_per_victim() -> list[dict[str, Any]] | None:
            found = teams.events(teams.b, "Preempted")
            return found if len(found) >= len(victims) else None

        preempted = lc.wait_until(an_event_per_victim, timeout=30, what="Preempted events")
        assert sorted(e["involvedObject"]["name"] for e in preempted) == victims
        assert f"job {teams.a}/train" in preempted[0]["message"]
        preempting = lc.wait_until(
            lambda: teams.events(teams.a, "Preempting") or None, timeout=30, what="Preempting"
        )
        assert len(preempting) == 1 and victims[0] in preempting[0]["message"]
        explained = muster.debug(f"pods/{teams.a}/train-0")
        assert any(d["verb"] == "postfilter" for d in explained["decisions"])
        # One plan committed: one time-to-mark observation, well under a minute.
        assert muster.metric("muster_time_to_mark_seconds_count") == 1
        assert 0 <= muster.metric("muster_time_to_mark_seconds_sum") < 60
    finally:
        teams.cleanup()


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_no_partial_eviction(cluster: Cluster, muster_and_evictor: MusterProcess) -> None:
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "24"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )
    try:
        fill_with_borrowers(teams, 2)
        for i in range(3):
            labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "big"}
            teams.create(teams.a, f"big-{i}", requests={GPU: 8}, labels=labels)

        # Muster looks, refuses, and says why; nothing is marked.  The gang declares no
        # size, so Muster first waits gangSettleSeconds for its pods to stop arriving
        # (a refusal of its own); then it plans the three pods and refuses for want of
        # room: 2 nodes of 8 GPUs hold 2 of the 3 pods even with both borrowers gone.
        def refused_for_room() -> bool | None:
            decisions = muster_and_evictor.debug(f"pods/{teams.a}/big-0").get("decisions", [])
            return (
                any(
                    d["verb"] == "postfilter"
                    and d["outcome"] == "no preemption"
                    and "room for 2 of its 3 unplaced pods" in json.dumps(d["reasons"])
                    for d in decisions
                )
                or None
            )

        lc.wait_until(refused_for_room, timeout=60, what="Muster to refuse the preemption")
        for name in ("b-0", "b-1"):
            pod = teams.get(teams.b, name)
            assert pod is not None and pod["status"]["phase"] == "Running"
            assert SOFT_EVICTION not in pod["metadata"].get("labels", {})
            assert condition(pod, "DisruptionTarget") is None
        assert teams.events(teams.b, "Preempted") == []
    finally:
        teams.cleanup()


def test_kill_9_in_the_middle_of_a_preemption(
    cluster: Cluster, control_plane: lc.ControlPlane, tmp_path: Path, tokens: dict[str, Path]
) -> None:
    """Muster dies after marking the victims, before they are gone; a new Muster rebuilds
    the reservation from the pods, evicts nothing more, and the gang still binds."""
    for i in range(4):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    muster = MusterProcess(tmp_path, kubeconfig=tokens["muster"])
    evictor: lc.ServiceProcess | None = None
    try:
        with control_plane.using_extender(lc.ExtenderConfig(muster.url, bind=True)):
            fill_with_borrowers(teams, 4)
            for i in range(2):
                labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
                teams.create(teams.a, f"train-{i}", requests={"cpu": "4", GPU: 8}, labels=labels)

            def marked() -> list[str] | None:
                names = [
                    f"b-{i}"
                    for i in range(4)
                    if SOFT_EVICTION
                    in ((teams.get(teams.b, f"b-{i}") or {}).get("metadata", {}).get("labels", {}))
                ]
                return names if len(names) == 2 else None

            victims = lc.wait_until(marked, timeout=60, what="two victims marked")
            for name in victims:
                pod = teams.get(teams.b, name) or {}
                mark = json.loads(pod["metadata"]["annotations"][SOFT_EVICTION])
                assert mark["preemptor"] == f"{teams.a}/train"
                assert mark["initiator"] == "muster"
            for i in range(2):
                # Muster marks the victims first, then writes each preemptor pod's
                # reservation and nomination: wait for those to land.
                pod = lc.wait_until(
                    lambda i=i: _reserved_and_nominated(teams.get(teams.a, f"train-{i}")),
                    timeout=30,
                    what=f"train-{i}'s reservation and nomination",
                )
                held = json.loads(pod["metadata"]["annotations"]["muster.dev/reservation"])
                assert held["job"] == f"{teams.a}/train"
                assert sorted(held["victims"]) == sorted(f"{teams.b}/{n}" for n in victims)
                assert pod["status"]["nominatedNodeName"] == held["node"]
            muster.kill()
            muster = MusterProcess(tmp_path, kubeconfig=tokens["muster"], port=muster.port)
            lc.wait_until(
                lambda: (
                    muster.debug("jobs").get(f"{teams.a}/train", {}).get("state") == "in flight"
                    or None
                ),
                timeout=30,
                what="the restarted Muster to rebuild the reservation",
            )
            for name in victims:  # set before the kill, or completed by the new Muster
                lc.wait_until(
                    lambda name=name: condition(teams.get(teams.b, name) or {}, "DisruptionTarget"),
                    timeout=30,
                    what=f"DisruptionTarget on {name}",
                )
            evictor = start_evictor(tokens["muster-evictor"], tmp_path / "evictor.log")
            for i in range(2):
                teams.wait(teams.a, f"train-{i}", "Running", timeout=90)
            preempted = teams.events(teams.b, "Preempted")
            assert sorted(e["involvedObject"]["name"] for e in preempted) == sorted(victims)
            for name in {f"b-{i}" for i in range(4)} - set(victims):
                pod = teams.get(teams.b, name)
                assert pod is not None and pod["status"]["phase"] == "Running"
    finally:
        if evictor is not None:
            evictor.stop()
        muster.stop()
        teams.cleanup()


def _reserved_and_nominated(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod, once it carries Muster's reservation annotation and a nomination."""
    if pod is None:
        return None
    annotations = pod["metadata"].get("annotations") or {}
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    return pod if "muster.dev/reservation" in annotations and nominated else None


def test_two_replicas_answer_and_only_the_leader_commits(
    cluster: Cluster, control_plane: lc.ControlPlane, tmp_path: Path, tokens: dict[str, Path]
) -> None:
    for i in range(4):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "32"}}, {"min": {GPU: "0"}, "max": {GPU: "32"}}
    )
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = MusterProcess(tmp_path / "one", kubeconfig=tokens["muster"])
    two = MusterProcess(tmp_path / "two", kubeconfig=tokens["muster"])
    evictor = start_evictor(tokens["muster-evictor"], tmp_path / "evictor.log")
    try:
        with control_plane.using_extender(lc.ExtenderConfig(one.url, bind=True)):
            fill_with_borrowers(teams, 4)
            for i in range(2):
                labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
                teams.create(teams.a, f"train-{i}", requests={"cpu": "4", GPU: 8}, labels=labels)
            for i in range(2):
                teams.wait(teams.a, f"train-{i}", "Running", timeout=90)
            # both replicas planned from the same informer-fed view; one committed
            preempted = teams.events(teams.b, "Preempted")
            assert len(preempted) == 2
            assert len({e["involvedObject"]["name"] for e in preempted}) == 2
            assert len(teams.events(teams.a, "Preempting")) == 1
            lease = cluster.rest.request(
                "GET", "/apis/coordination.k8s.io/v1/namespaces/muster-system/leases/muster"
            )
            assert lease["spec"]["holderIdentity"]
            # the follower answers kube-scheduler's verbs too
            probe_pod = make_pod("probe", requests={GPU: 1}, labels=PREEMPTIBLE)
            probe = {"Pod": probe_pod, "NodeNames": cluster.nodes}
            probe["Pod"]["metadata"]["namespace"] = teams.a
            for replica in (one, two):
                answer = httpx.post(f"{replica.url}/filter", json=probe, timeout=10).json()
                assert answer["Error"] == ""
                assert sorted(answer["NodeNames"] or []) == sorted(cluster.nodes)
    finally:
        evictor.stop()
        one.stop()
        two.stop()
        teams.cleanup()
    # Stopped gracefully (SIGTERM), the leader let the Lease go: the next replica takes
    # it at its next round, not after leaseDurationSeconds.
    lease = cluster.rest.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/muster-system/leases/muster"
    )
    assert not lease["spec"].get("holderIdentity"), lease["spec"]


def test_quota_status_and_hold_and_drain(
    cluster: Cluster, muster_and_evictor: MusterProcess
) -> None:
    cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "8"}}, {"min": {GPU: "2"}, "max": {GPU: "8"}}
    )
    quota_path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{teams.b}/elasticquotas/{teams.b}"
    try:
        teams.create(teams.b, "b-0", requests={GPU: 4}, labels=PREEMPTIBLE)
        teams.wait(teams.b, "b-0", "Running")
        teams.create(teams.b, "b-1", requests={GPU: 2}, labels={})
        teams.wait(teams.b, "b-1", "Running")
        # Muster keeps the ElasticQuota's status current (it is the leader of one replica)
        lc.wait_until(
            lambda: (
                (cluster.rest.request("GET", quota_path).get("status") or {})
                .get("used", {})
                .get(GPU)
                == "6"
                or None
            ),
            timeout=30,
            what="status.used to show 6 GPUs",
        )
        stored = cluster.rest.request("GET", quota_path)
        # ... its non-preemptible part beside it, in the status (Muster may not patch the
        # quota itself: its ClusterRole has elasticquotas/status only)
        assert stored["status"]["nonPreemptibleUsed"][GPU] == "2"
        assert "muster.dev/non-preemptible-used" not in stored["metadata"].get("annotations", {})
        # stop-policy HoldAndDrain: its running pods are soft-evicted, new ones not admitted
        cluster.rest.request(
            "PATCH",
            quota_path,
            {"metadata": {"annotations": {"muster.dev/stop-policy": "HoldAndDrain"}}},
            content_type="application/merge-patch+json",
        )
        for name in ("b-0", "b-1"):
            lc.wait_until(
                lambda name=name: teams.get(teams.b, name) is None or None,
                timeout=60,
                what=f"{name} drained",
            )
        drained = teams.events(teams.b, "Preempted")
        assert sorted(e["involvedObject"]["name"] for e in drained) == ["b-0", "b-1"]
        assert "HoldAndDrain" in drained[0]["message"]
        teams.create(teams.b, "b-2", requests={GPU: 1}, labels=PREEMPTIBLE)
        pod = lc.wait_until(
            lambda: (
                (condition(teams.get(teams.b, "b-2") or {}, "PodScheduled") or {}).get("reason")
                == "Unschedulable"
                or None
            ),
            timeout=30,
            what="b-2 held",
        )
        assert pod
        message = condition(teams.get(teams.b, "b-2") or {}, "PodScheduled") or {}
        assert "stop-policy HoldAndDrain" in message.get("message", "")
    finally:
        teams.cleanup()


def test_partial_gang_then_preempt(cluster: Cluster, muster_and_evictor: MusterProcess) -> None:
    """Two pods of a three-pod gang bind on free nodes; the third needs a borrower's node."""
    for i in range(3):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "24"}, "max": {GPU: "24"}}, {"min": {GPU: "0"}, "max": {GPU: "24"}}
    )
    try:
        fill_with_borrowers(teams, 1)
        for i in range(3):
            labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "job"}
            teams.create(teams.a, f"job-{i}", requests={GPU: 8}, labels=labels)
        lc.wait_until(
            lambda: teams.get(teams.b, "b-0") is None or None, timeout=60, what="b-0 evicted"
        )
        for i in range(3):
            teams.wait(teams.a, f"job-{i}", "Running", timeout=60)
        assert [e["involvedObject"]["name"] for e in teams.events(teams.b, "Preempted")] == ["b-0"]
        assert muster_and_evictor.evictor_metrics_url is not None
        metrics = httpx.get(muster_and_evictor.evictor_metrics_url, timeout=5).text
        assert 'muster_evictor_evictions_total{outcome="evicted"} 1.0' in metrics
    finally:
        teams.cleanup()


def test_muster_evicts_itself_when_configured(
    cluster: Cluster, control_plane: lc.ControlPlane, tmp_path: Path, tokens: dict[str, Path]
) -> None:
    """podShouldBeDeletedWhenPreempted: true: no evictor runs, Muster evicts the victims."""
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "8"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )
    args = tmp_path / "args.yaml"
    args.write_text("podShouldBeDeletedWhenPreempted: true\n")
    # manifests/rbac.yaml grants Muster no evictions (only the evictor evicts); the chart
    # adds this rule to Muster's ClusterRole with podShouldBeDeletedWhenPreempted: true.
    granted = grant_evictions(control_plane, "muster-system", "muster")
    muster = MusterProcess(
        tmp_path, kubeconfig=tokens["muster"], extra_args=("--config", str(args))
    )
    try:
        with control_plane.using_extender(lc.ExtenderConfig(muster.url, bind=True)):
            fill_with_borrowers(teams, 2)
            labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "solo"}
            teams.create(teams.a, "solo-0", requests={GPU: 8}, labels=labels)
            teams.wait(teams.a, "solo-0", "Running", timeout=60)
            gone = [name for name in ("b-0", "b-1") if teams.get(teams.b, name) is None]
            assert len(gone) == 1
    finally:
        muster.stop()
        teams.cleanup()
        granted()


def grant_evictions(
    control_plane: lc.ControlPlane, namespace: str, account: str
) -> Callable[[], None]:
    """A ClusterRole allowing ``pods/eviction`` create, bound to the ServiceAccount;
    returns what takes it back."""
    name = f"{account}-evicts-e2e"
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    control_plane.rest.request(
        "POST",
        f"{rbac}/clusterroles",
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}],
        },
    )
    control_plane.rest.request(
        "POST",
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )

    def take_back() -> None:
        for plural in ("clusterrolebindings", "clusterroles"):
            with contextlib.suppress(lc.ApiError):
                control_plane.rest.request("DELETE", f"{rbac}/{plural}/{name}")

    return take_back
