"""A tenant tries to walk out of its quota, on the real control plane (docs/security.md).

The tenant is a ServiceAccount of team A's namespace with a Role over pods, Jobs and
PodGroups in that namespace only, and writes through its own token, as a team member
would.  Muster and the evictor run on the manifests' ServiceAccounts, behind a stock
kube-scheduler.  Each attack of issue 32 is tried; what must follow is derived from the
threat model: a pod's quota is the admins' choice, a record is believed only if Muster
signed it, and a self-applied label gives a pod no standing.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Cluster, condition, make_pod, tenant_client
from muster_process import MUSTER, ROOT, MusterProcess, start_evictor
from test_muster_extender import GPU
from test_notice import muster_with_notice  # noqa: F401 (a fixture)
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    SOFT_EVICTION,
    Teams,
    _epoch,
    muster_and_evictor,
    tokens,
)

import localcluster as lc
from extender.core.marks import Mark, read_mark

pytestmark = pytest.mark.e2e

QUOTA_LABEL = "quota.scheduling.koordinator.sh/name"
RESERVATION = "muster.dev/reservation"
BACKOFF = "muster.dev/gang-backoff"
PREEMPTIBLE_LABEL = "quota.scheduling.koordinator.sh/preemptible"
ADMITTED_PREEMPTIBLE = "muster.dev/AdmittedPreemptible"
GUARANTEED = {
    "quota.scheduling.koordinator.sh/preemptible": "false",
    "quota.scheduling.koordinator.sh/can-preempt": "true",
}


@contextlib.contextmanager
def two_teams(cluster: Cluster, nodes: int, a_max: int) -> Iterator[Teams]:
    """``nodes`` 8-GPU nodes; team A may use 0 to ``a_max`` GPUs (all of it borrowed),
    team B is guaranteed 8 of up to 16; cleaned up after."""
    for i in range(nodes):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster,
        {"min": {GPU: "0"}, "max": {GPU: str(a_max)}},
        {"min": {GPU: "8"}, "max": {GPU: "16"}},
    )
    try:
        yield teams
    finally:
        teams.cleanup()


def untouched(teams: Teams, namespace: str, name: str) -> dict[str, Any]:
    """The pod, asserted running and carrying none of a victim's marks."""
    pod = teams.get(namespace, name)
    assert pod is not None and pod["status"]["phase"] == "Running", name
    assert SOFT_EVICTION not in pod["metadata"].get("labels", {}), name
    assert condition(pod, "DisruptionTarget") is None, name
    return pod


def test_a_tenant_cannot_move_its_pods_to_another_quota_or_forge_muster_s_records(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    with two_teams(cluster, 3, a_max=8) as teams:
        try:
            tenant_walks_out(cluster, teams, muster_and_evictor)
        finally:
            system_pod = f"/api/v1/namespaces/kube-system/pods/{teams.a}-sys"
            with contextlib.suppress(lc.ApiError):
                cluster.rest.request("DELETE", system_pod)


def tenant_walks_out(cluster: Cluster, teams: Teams, muster: MusterProcess) -> None:
    tenant = tenant_client(cluster, teams.a)
    pods_a = f"/api/v1/namespaces/{teams.a}/pods"
    # Team B borrows a node with a preemptible pod; kube-system runs a pod of its own.
    teams.create(teams.b, "b-0", requests={GPU: 8}, labels=PREEMPTIBLE)
    teams.wait(teams.b, "b-0", "Running")
    borrowed_node = (teams.get(teams.b, "b-0") or {})["spec"]["nodeName"]
    cluster.rest.request(
        "POST",
        "/api/v1/namespaces/kube-system/pods",
        make_pod(f"{teams.a}-sys", requests={"cpu": "1"}),
    )
    teams.wait("kube-system", f"{teams.a}-sys", "Running")

    # 1. Quota by label: a guaranteed, preempting 8-GPU pod naming team B's quota.  Team
    #    B's quota is in namespace B and lists no other: the pod is refused, naming both.
    stealer = make_pod("steal", requests={GPU: 8}, labels={**GUARANTEED, QUOTA_LABEL: teams.b})
    tenant.request("POST", pods_a, stealer)

    def refused_naming_the_label() -> bool | None:
        decisions = muster.debug(f"pods/{teams.a}/steal").get("decisions", [])
        text = json.dumps([d["reasons"] for d in decisions])
        return (f"{QUOTA_LABEL}={teams.b}" in text and "does not admit" in text) or None

    lc.wait_until(refused_naming_the_label, timeout=30, what="the quota label refused")

    # 2. Forged reservations: two pods of one job that cannot run anyway (16 GPUs each,
    #    over team A's max) claim both free nodes for 30 years and name team B's and
    #    kube-system's pods as their victims.
    free = [name for name in cluster.nodes if name != borrowed_node]
    now = time.time()
    for i, node_name in enumerate(free):
        note = {
            "job": f"{teams.a}/forged",
            "node": node_name,
            "created": now,
            "expires": now + 10**9,
            "victims": [f"{teams.b}/b-0", f"kube-system/{teams.a}-sys"],
        }
        forged = make_pod(
            f"forged-{i}",
            requests={GPU: 16},
            labels={**PREEMPTIBLE, "pod-group.scheduling.sigs.k8s.io": "forged"},
            annotations={RESERVATION: json.dumps(note)},
        )
        tenant.request("POST", pods_a, forged)
    # Team B's guaranteed pod needs a whole free node, which the forged reservations
    # claim: believed, it would wait (or evict); it runs.
    teams.create(teams.b, "b-1", requests={GPU: 8}, labels=GUARANTEED)
    teams.wait(teams.b, "b-1", "Running", timeout=60)

    # 3. A forged gang backoff with an absurd attempt count, on a gang that fits: it runs
    #    as if it had none.
    for i in range(2):
        backoff = json.dumps({"attempts": 10**30, "givenUp": time.time(), "until": None})
        gang_pod = make_pod(
            f"g-{i}",
            requests={GPU: 1},
            labels={**PREEMPTIBLE, "pod-group.scheduling.sigs.k8s.io": "g"},
            annotations={BACKOFF: backoff, "gang.scheduling.koordinator.sh/min-available": "2"},
        )
        tenant.request("POST", pods_a, gang_pod)
    for i in range(2):
        teams.wait(teams.a, f"g-{i}", "Running", timeout=60)

    # Nothing was marked anywhere, and Muster counted each forged record once per pod.
    assert muster.metric("muster_forged_records_total", record=RESERVATION) == 2
    assert muster.metric("muster_forged_records_total", record=BACKOFF) == 2
    untouched(teams, teams.b, "b-0")
    untouched(teams, "kube-system", f"{teams.a}-sys")
    assert teams.events(teams.b, "Preempted") == []
    assert (teams.get(teams.a, "steal") or {})["status"].get("phase") == "Pending"


def test_a_self_applied_soft_eviction_label_does_not_stall_a_reclaim(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    with two_teams(cluster, 2, a_max=16) as teams:
        self_applied_label(cluster, teams, muster_and_evictor)


def self_applied_label(cluster: Cluster, teams: Teams, muster: MusterProcess) -> None:
    tenant = tenant_client(cluster, teams.a)
    pods_a = f"/api/v1/namespaces/{teams.a}/pods"
    # Team A borrows both nodes, and labels its own pods as already leaving.
    for i in range(2):
        tenant.request("POST", pods_a, make_pod(f"a-{i}", requests={GPU: 8}, labels=PREEMPTIBLE))
        teams.wait(teams.a, f"a-{i}", "Running")
        tenant.request(
            "PATCH",
            f"{pods_a}/a-{i}",
            {"metadata": {"labels": {SOFT_EVICTION: "true"}}},
            content_type="application/merge-patch+json",
        )
    # The evictor sees the labels and does not act on them: the marks are not Muster's.
    assert muster.evictor_metrics_url is not None
    evictor_url = muster.evictor_metrics_url

    def evictor_refused() -> bool | None:
        text = httpx.get(evictor_url, timeout=5).text
        return 'muster_evictor_evictions_total{outcome="forged"} 2.0' in text or None

    lc.wait_until(evictor_refused, timeout=30, what="the evictor to refuse the forged marks")
    for i in range(2):
        assert (teams.get(teams.a, f"a-{i}") or {})["status"]["phase"] == "Running"
    # Team B, with nothing running, reclaims 8 GPUs of its min for a guaranteed pod.
    # Believed, the labels would make both of team A's pods count as leaving: the plan
    # would evict nothing and wait for ever.  They are not Muster's marks: one of them is
    # the victim, marked by Muster, evicted, and team B's pod runs.
    teams.create(teams.b, "b-0", requests={GPU: 8}, labels=GUARANTEED)
    teams.wait(teams.b, "b-0", "Running", timeout=60)
    preempted = lc.wait_until(
        lambda: teams.events(teams.a, "Preempted") or None, timeout=30, what="Preempted event"
    )
    assert len(preempted) == 1
    victim = preempted[0]["involvedObject"]["name"]
    assert victim in ("a-0", "a-1")
    lc.wait_until(
        lambda: teams.get(teams.a, victim) is None or None, timeout=60, what=f"{victim} gone"
    )
    survivor = "a-1" if victim == "a-0" else "a-0"
    assert (teams.get(teams.a, survivor) or {})["status"]["phase"] == "Running"


def test_only_kube_scheduler_s_client_certificate_reaches_the_extender(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> None:
    """Muster served with mTLS, as the chart serves it: kube-scheduler, presenting the
    client certificate its ``tlsConfig`` names, schedules through it; a client without a
    certificate, or with one another CA signed, is refused before any verb runs."""
    files = lc.make_mutual_tls_pki("muster", "kube-scheduler").write(tmp_path / "tls")
    stranger = lc.make_mutual_tls_pki("other", "intruder").write(tmp_path / "stranger")
    kubeconfig = tokens["muster"]
    tls_port = lc.free_port()
    muster = lc.ServiceProcess(
        "muster serve (mTLS)",
        lambda probe_port: [
            *MUSTER,
            "serve",
            "--kubeconfig",
            str(kubeconfig),
            "--records-key-dir",
            str(lc.records_key_dir(kubeconfig.parent)),
            "--host",
            "127.0.0.1",
            "--port",
            str(tls_port),
            "--probe-port",
            str(probe_port),  # plain HTTP: /readyz, /healthz, /metrics only
            "--tls-cert",
            str(files["tls.crt"]),
            "--tls-key",
            str(files["tls.key"]),
            "--client-ca",
            str(files["ca.crt"]),
        ],
        tmp_path / "muster.log",
        cwd=ROOT,
    )
    muster.start()
    url = f"https://127.0.0.1:{tls_port}"
    scheduler_tls = lc.ExtenderTLS(files["ca.crt"], files["client.crt"], files["client.key"])
    extender = lc.ExtenderConfig(url, bind=True, tls=scheduler_tls)
    try:
        with control_plane.using_extender(
            extender, scheduler_config=control_plane.scheduler_overrides
        ):
            cluster.create_node("n0", {"cpu": "32", "memory": "128Gi", GPU: 8})
            cluster.create_pod("p", requests={GPU: 1}, labels=PREEMPTIBLE)
            cluster.wait_running("p", timeout=60)
            served = httpx.get(f"{muster.url}/metrics", timeout=5).text
            assert any(
                line.startswith("muster_extender_requests_total{")
                and 'verb="bind"' in line
                and 'code="200"' in line
                and float(line.split()[-1]) >= 1
                for line in served.splitlines()
            ), "kube-scheduler bound through Muster over mTLS"
            body = {"Pod": make_pod("x", requests={GPU: 1}), "NodeNames": ["n0"], "Nodes": None}
            for client in (None, stranger):
                with pytest.raises(httpx.TransportError):
                    httpx.post(f"{url}/filter", json=body, verify=tls(files, client), timeout=5)
            answered = httpx.post(f"{url}/filter", json=body, verify=tls(files, files), timeout=5)
            assert answered.status_code == 200
            # /debug is not served at all without --enable-debug-endpoints.
            debug = httpx.get(f"{url}/debug/quotas", verify=tls(files, files), timeout=5)
            assert debug.status_code == 404
    finally:
        muster.stop()


def tls(server: dict[str, Path], client: dict[str, Path] | None) -> ssl.SSLContext:
    """A client context trusting ``server``'s CA, presenting ``client``'s certificate."""
    context = ssl.create_default_context(cafile=str(server["ca.crt"]))
    if client is not None:
        context.load_cert_chain(str(client["client.crt"]), str(client["client.key"]))
    return context


def test_a_tenant_s_claims_about_its_work_cannot_shield_its_pods(
    cluster: Cluster,
    muster_and_evictor: MusterProcess,  # noqa: F811
) -> None:
    with two_teams(cluster, 2, a_max=16) as teams:
        claims_about_work(cluster, teams)


def claims_about_work(cluster: Cluster, teams: Teams) -> None:
    # Team A borrows both nodes: a-early first; a-late once a-early has run 2 s, claiming
    # through the tenant's token that it last saved its work in 2000 (26 years lost if it
    # went) and that it needs an hour of notice.  Team B, with nothing running, reclaims
    # one node.  Derived from the rules: a job's unsaved work begins no earlier than its
    # start (a claim cannot make it dearer than the work it did), so a-late, the later
    # started, loses less and is the victim; and the notice is capped by the admins (here
    # the default, none), so it is evicted at once and B's pod runs within a minute.
    tenant = tenant_client(cluster, teams.a)
    pods_a = f"/api/v1/namespaces/{teams.a}/pods"
    tenant.request("POST", pods_a, make_pod("a-early", requests={GPU: 8}, labels=PREEMPTIBLE))
    teams.wait(teams.a, "a-early", "Running")
    started = _epoch((teams.get(teams.a, "a-early") or {})["status"]["startTime"])
    lc.wait_until(lambda: time.time() > started + 2 or None, timeout=10, what="2 s to pass")
    claims = {
        "muster.dev/last-checkpoint": "2000-01-01T00:00:00Z",
        "muster.dev/preemption-notice-seconds": "3600",
    }
    late = make_pod("a-late", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=claims)
    tenant.request("POST", pods_a, late)
    teams.wait(teams.a, "a-late", "Running")
    teams.create(teams.b, "b-0", requests={GPU: 8}, labels=GUARANTEED)
    teams.wait(teams.b, "b-0", "Running", timeout=60)
    preempted = [e["involvedObject"]["name"] for e in teams.events(teams.a, "Preempted")]
    assert preempted == ["a-late"]
    untouched(teams, teams.a, "a-early")


def test_a_victim_whose_mark_its_owner_takes_off_is_still_evicted_on_time(
    cluster: Cluster,
    muster_with_notice: MusterProcess,  # noqa: F811
) -> None:
    with two_teams(cluster, 1, a_max=8) as teams:
        mark_taken_off(cluster, teams)


def mark_taken_off(cluster: Cluster, teams: Teams) -> None:
    # Team A borrows the one node with a pod that asks 15 s of notice (the cap is 60).
    # Team B reclaims it: Muster marks a-0, due 15 s after the mark (M).  Through its own
    # token, team A takes the mark (label and annotation) off at once.  The evictor acts
    # on marks only, and Muster still counts a-0 as leaving (its DisruptionTarget is pod
    # status, which the tenant cannot write): left so, team B would wait out the 300 s
    # reservation.  Derived from the threat model: a victim's owner cannot take back what
    # Muster decided, nor buy time: a-0 is marked again with what is left of its notice,
    # so it is evicted at M + 15 (not before, and within the 10 s a mark, the evictor's
    # watch and an eviction take), and team B's pod runs.
    tenant = tenant_client(cluster, teams.a)
    pod_a = f"/api/v1/namespaces/{teams.a}/pods/a-0"
    notice = {"muster.dev/preemption-notice-seconds": "15"}
    a0 = make_pod("a-0", requests={GPU: 8}, labels=PREEMPTIBLE, annotations=notice)
    tenant.request("POST", f"/api/v1/namespaces/{teams.a}/pods", a0)
    teams.wait(teams.a, "a-0", "Running")
    teams.create(teams.b, "b-0", requests={GPU: 8}, labels=GUARANTEED)

    def mark() -> Mark | None:
        pod = teams.get(teams.a, "a-0") or {}
        annotations = pod.get("metadata", {}).get("annotations", {})
        return read_mark(annotations[SOFT_EVICTION]) if SOFT_EVICTION in annotations else None

    first = lc.wait_until(mark, timeout=30, what="a-0 marked")
    assert first.timestamp is not None and first.notice_seconds == 15
    due = first.timestamp + 15
    tenant.request(
        "PATCH",
        pod_a,
        {"metadata": {"labels": {SOFT_EVICTION: None}, "annotations": {SOFT_EVICTION: None}}},
        content_type="application/merge-patch+json",
    )
    again = lc.wait_until(mark, timeout=10, what="a-0 marked again")
    # The same deadline: what was left of the notice when it was marked again (the
    # marks' times have one-second resolution).
    assert again.timestamp is not None
    assert abs(again.timestamp + again.notice_seconds - due) <= 1.0, (again, due)
    assert time.time() < due  # the tenant took it off while it was on notice

    def leaving() -> float | None:
        pod = teams.get(teams.a, "a-0")
        return time.time() if pod is None or pod["metadata"].get("deletionTimestamp") else None

    evicted = lc.wait_until(leaving, timeout=60, what="a-0 evicted")
    assert due - 1 <= evicted <= due + 10, evicted - due
    teams.wait(teams.b, "b-0", "Running", timeout=30)


def test_a_borrower_relabelled_non_preemptible_stays_preemptible_across_a_restart(
    cluster: Cluster,
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811
) -> None:
    # Team A (min 0) borrows the one node with a preemptible pod, then, through its own
    # token, relabels it preemptible: "false".  Admitted preemptible (checked against max,
    # not min), it stays so: Muster records that on the pod, in a condition (pod status,
    # which the tenant cannot write or take off).  Muster is then stopped and a new one
    # started: it reads the pod's label as it is now, "false", and the condition.  Derived
    # from the threat model: a relabel grants no protection the quota never checked, so
    # team B's reclaim of its min (8) still evicts a-0 and b-0 runs.  Believed, the label
    # would make a-0 team A's guarantee (8 over its min of 0) and the reclaim would find
    # no victim.
    muster = MusterProcess(tmp_path, kubeconfig=tokens["muster"])
    evictor = start_evictor(tokens["muster-evictor"], tmp_path / "evictor.log")
    try:
        with (
            control_plane.using_extender(lc.ExtenderConfig(muster.url, bind=True)),
            two_teams(cluster, 1, a_max=8) as teams,
        ):
            tenant = tenant_client(cluster, teams.a)
            pods_a = f"/api/v1/namespaces/{teams.a}/pods"
            a0 = make_pod("a-0", requests={GPU: 8}, labels=PREEMPTIBLE)
            tenant.request("POST", pods_a, a0)
            teams.wait(teams.a, "a-0", "Running")
            relabel = {"metadata": {"labels": {PREEMPTIBLE_LABEL: "false"}}}
            tenant.request(
                "PATCH", f"{pods_a}/a-0", relabel, content_type="application/merge-patch+json"
            )
            recorded = lc.wait_until(
                lambda: condition(teams.get(teams.a, "a-0") or {}, ADMITTED_PREEMPTIBLE),
                timeout=30,
                what="a-0 recorded as staying preemptible",
            )
            assert recorded["status"] == "True"
            muster.stop()
            muster = MusterProcess(tmp_path, kubeconfig=tokens["muster"], port=muster.port)
            teams.create(teams.b, "b-0", requests={GPU: 8}, labels=GUARANTEED)
            teams.wait(teams.b, "b-0", "Running", timeout=60)
            preempted = [e["involvedObject"]["name"] for e in teams.events(teams.a, "Preempted")]
            assert preempted == ["a-0"]
    finally:
        evictor.stop()
        muster.stop()
