"""GPUs through Dynamic Resource Allocation, live (issue 36, items 3 and 4).

The harness publishes ResourceSlices for two GPU-less nodes as a DRA driver would (8
devices each; no device exists: the kubelet stand-in runs the pods); kube-scheduler's own
DynamicResources plugin allocates the claims kube-controller-manager's resourceclaim
controller makes from ResourceClaimTemplates, and Muster, with the DeviceClass mapped to
``nvidia.com/gpu`` (``deviceClassResources``), charges and plans them.

Derived by hand from the README's "GPUs through DRA" and docs/design.md: team B (min 0)
runs two preemptible pods claiming 8 devices each, one per node: it uses 16, all
borrowed.  Team A (min 16) submits a gang of two 8-device pods: within its min, so it
reclaims; every device is taken, so both borrowers go (whole: each frees its node's 8
through its claim), and the gang binds, one pod per node; team A then uses 16, team B 0.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, make_pod
from muster_process import MusterProcess
from test_muster_extender import GPU
from test_preemption_story import (  # noqa: F401 (fixtures)
    PREEMPTIBLE,
    TRAINER,
    Teams,
    muster_with_arguments,
    tokens,
)

import localcluster as lc
from base import keys

pytestmark = pytest.mark.e2e

RESOURCE_API = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.e2e.muster.dev"


@contextlib.contextmanager
def published_devices(
    cluster: Cluster, nodes: list[str], per_node: int, extended: str | None = None
) -> Iterator[str]:
    """A DeviceClass selecting the driver's devices (backing ``extended``, if given), and a
    ResourceSlice of ``per_node`` devices for each node (as a driver publishes them); the
    class's name; all deleted after."""
    rest = cluster.rest
    device_class = f"gpu-{cluster.namespace}"[:63].rstrip("-")
    rest.request(
        "POST",
        f"{RESOURCE_API}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                **({"extendedResourceName": extended} if extended else {}),
            },
        },
    )
    slices = []
    try:
        for node in nodes:
            name = f"{node}-{DRIVER}"[:63].rstrip("-.")
            rest.request(
                "POST",
                f"{RESOURCE_API}/resourceslices",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": name},
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": f"gpu-{i}"} for i in range(per_node)],
                    },
                },
            )
            slices.append(name)
        yield device_class
    finally:
        for name in slices:
            with contextlib.suppress(lc.ApiError):
                rest.request("DELETE", f"{RESOURCE_API}/resourceslices/{name}")
        with contextlib.suppress(lc.ApiError):
            rest.request("DELETE", f"{RESOURCE_API}/deviceclasses/{device_class}")


def claim_template(cluster: Cluster, namespace: str, device_class: str, count: int) -> None:
    cluster.rest.request(
        "POST",
        f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpus"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpus",
                                "exactly": {"deviceClassName": device_class, "count": count},
                            }
                        ]
                    }
                }
            },
        },
    )


def claiming_pod(
    teams: Teams, namespace: str, name: str, labels: dict[str, str], claim: str | None = None
) -> None:
    """A pod asking 4 CPUs and the devices of a claim made from template ``gpus`` (or of
    the ResourceClaim ``claim``, which other pods may share)."""
    pod: dict[str, Any] = make_pod(name, requests={"cpu": "4"}, labels=labels)
    entry = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": "gpus"}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", **entry}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    teams.cluster.rest.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


@pytest.fixture
def class_name(cluster: Cluster) -> str:
    return f"gpu-{cluster.namespace}"[:63].rstrip("-")


@pytest.fixture
def muster_mapping_the_class(
    control_plane: lc.ControlPlane,
    tmp_path: Path,
    tokens: dict[str, Path],  # noqa: F811 (the fixture imported above)
    class_name: str,
) -> Iterator[MusterProcess]:
    arguments = {"deviceClassResources": {class_name: GPU}}
    with muster_with_arguments(control_plane, tmp_path, tokens, arguments) as muster:
        yield muster


def _two_nodes_two_teams(cluster: Cluster) -> tuple[list[str], Teams]:
    """Two nodes with no GPUs of their own (their devices come from slices); team A
    guaranteed 16 GPUs, team B none, both capped at 16."""
    nodes = [cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi"}) for i in range(2)]
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "16"}}, {"min": {GPU: "0"}, "max": {GPU: "16"}}
    )
    return nodes, teams


def test_a_dra_gang_reclaims_a_borrowing_teams_claimed_gpus_whole(
    cluster: Cluster, muster_mapping_the_class: MusterProcess, class_name: str
) -> None:
    muster = muster_mapping_the_class
    nodes, teams = _two_nodes_two_teams(cluster)
    try:
        with published_devices(cluster, nodes, 8) as device_class:
            assert device_class == class_name
            for namespace in (teams.a, teams.b):
                claim_template(cluster, namespace, device_class, 8)
            for name in ("b-0", "b-1"):
                claiming_pod(teams, teams.b, name, PREEMPTIBLE)
                teams.wait(teams.b, name, "Running", timeout=60)
            # Team B's claims, allocated by kube-scheduler, charged under nvidia.com/gpu.
            lc.wait_until(
                lambda: (
                    muster.debug("quotas").get(teams.b, {}).get("used", {}).get(GPU) == "16" or None
                ),
                timeout=30,
                what="team B charged its 16 claimed devices",
            )
            for i in range(2):
                labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
                claiming_pod(teams, teams.a, f"train-{i}", labels)
            for name in ("b-0", "b-1"):
                lc.wait_until(
                    lambda name=name: teams.get(teams.b, name) is None or None,
                    timeout=90,
                    what=f"{name} evicted",
                )
            for i in range(2):
                teams.wait(teams.a, f"train-{i}", "Running", timeout=90)
            placed = sorted(
                (teams.get(teams.a, f"train-{i}") or {})["spec"]["nodeName"] for i in range(2)
            )
            assert placed == sorted(nodes)
            # kube-scheduler allocated each trainer's claim on its node: the devices the
            # borrowers' claims held were released with them.
            claims = cluster.rest.request(
                "GET", f"{RESOURCE_API}/namespaces/{teams.a}/resourceclaims"
            )["items"]
            allocated = sorted(
                term["matchFields"][0]["values"][0]
                for claim in claims
                for term in claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
            )
            assert allocated == sorted(nodes)
            assert all(len(c["status"]["allocation"]["devices"]["results"]) == 8 for c in claims)
            quotas = lc.wait_until(
                lambda: (
                    (q := muster.debug("quotas")).get(teams.a, {}).get("used", {}).get(GPU) == "16"
                    and q
                ),
                timeout=30,
                what="team A charged its 16 devices",
            )
            assert GPU not in quotas[teams.b].get("used", {})
    finally:
        teams.cleanup()


EXTENDED = "example.com/dra-gpu"


def test_an_extended_resource_backed_by_dra_is_charged_once(
    cluster: Cluster,
    k8s_bin_dir: Path,
    muster_mapping_the_class: MusterProcess,
    class_name: str,
) -> None:
    # KEP-5004 (GA in 1.37): the container asks example.com/dra-gpu: 2, which the
    # DeviceClass backs (extendedResourceName); no node advertises it, and kube-scheduler
    # makes a claim for it (status.extendedResourceClaimStatus).  Muster charges the
    # container's 2 under the class's mapped nvidia.com/gpu, and the claim not again:
    # used 2, not 4.
    if lc.kubernetes_minor(k8s_bin_dir) < 37:
        pytest.skip("extended resources backed by DRA are GA from Kubernetes 1.37")
    muster = muster_mapping_the_class
    nodes = [cluster.create_node("n0", {"cpu": "32", "memory": "128Gi"})]
    teams = Teams(cluster, {"min": {GPU: "8"}, "max": {GPU: "8"}}, {"max": {GPU: "8"}})
    try:
        with published_devices(cluster, nodes, 8, extended=EXTENDED):
            teams.create(teams.a, "ext", requests={"cpu": "1", EXTENDED: 2}, labels=TRAINER)
            teams.wait(teams.a, "ext", "Running", timeout=60)
            pod = teams.get(teams.a, "ext") or {}
            made = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            assert made
            lc.wait_until(
                lambda: (
                    muster.debug("quotas").get(teams.a, {}).get("used", {}).get(GPU) == "2" or None
                ),
                timeout=30,
                what="team A charged 2 devices once",
            )
    finally:
        teams.cleanup()


def test_a_plan_never_counts_devices_a_surviving_pods_shared_claim_holds(
    cluster: Cluster, muster_mapping_the_class: MusterProcess, class_name: str
) -> None:
    # Team B: b-0 holds one node's 8 devices through its own claim; s-0 (preemptible) and
    # s-1 (not preemptible, another job) share claim "shared" of 8, on the other node.
    # Team A's gang of two 8-device pods needs both nodes; evicting s-0 frees nothing
    # while s-1 keeps the claim, so no plan fits the whole gang: nothing is evicted and
    # the gang waits whole (derived from the README's "a claim shared by pods of several
    # jobs ... no victim frees those" and design.md's "commits only if the whole job fits").
    muster = muster_mapping_the_class
    nodes, teams = _two_nodes_two_teams(cluster)
    try:
        with published_devices(cluster, nodes, 8) as device_class:
            for namespace in (teams.a, teams.b):
                claim_template(cluster, namespace, device_class, 8)
            cluster.rest.request(
                "POST",
                f"{RESOURCE_API}/namespaces/{teams.b}/resourceclaims",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": "shared"},
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpus",
                                    "exactly": {"deviceClassName": device_class, "count": 8},
                                }
                            ]
                        }
                    },
                },
            )
            claiming_pod(teams, teams.b, "b-0", PREEMPTIBLE)
            teams.wait(teams.b, "b-0", "Running", timeout=60)
            claiming_pod(teams, teams.b, "s-0", PREEMPTIBLE, claim="shared")
            teams.wait(teams.b, "s-0", "Running", timeout=60)
            staying = {"quota.scheduling.koordinator.sh/preemptible": "false"}
            claiming_pod(teams, teams.b, "s-1", staying, claim="shared")
            teams.wait(teams.b, "s-1", "Running", timeout=60)
            for i in range(2):
                labels = {**TRAINER, "pod-group.scheduling.sigs.k8s.io": "train"}
                claiming_pod(teams, teams.a, f"train-{i}", labels)

            def refused() -> str | None:
                decisions = muster.debug(f"pods/{teams.a}/train-0").get("decisions", [])
                reasons = [
                    str(reason)
                    for d in decisions
                    if d["verb"] == "postfilter"
                    for reason in d.get("reasons", [])
                ]
                return next((r for r in reasons if "would not fit" in r), None)

            outcome = lc.wait_until(refused, timeout=60, what="the plan refused")
            assert "room for 1 of its 2 unplaced pods" in outcome
            # The shared claim is charged to neither job: team B uses b-0's 8 alone.
            assert muster.debug("quotas")[teams.b]["used"][GPU] == "8"
            for name in ("b-0", "s-0", "s-1"):
                pod = teams.get(teams.b, name) or {}
                assert pod["status"]["phase"] == "Running"
                assert keys.SOFT_EVICTION_KEY not in pod["metadata"].get("labels", {})
            for i in range(2):
                pod = teams.get(teams.a, f"train-{i}") or {}
                assert not pod["spec"].get("nodeName")
    finally:
        teams.cleanup()
