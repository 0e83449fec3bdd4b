"""DRA devices in quotas and on node copies (issue 36, items 1 and 2).

Every expected figure is derived by hand from the rules in extender/core/dra/catalog.py's
docstring (and the README's DRA section): a device resource per DeviceClass (mapped by
``deviceClassResources``), a pod charged the devices of its claims, a shared claim once
per job, a node's room the devices its slices hold less those claims hold that no bound
pod carries.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base.errors import ManifestError
from extender.core.config import MusterArgs
from extender.core.dra import (
    UNKNOWN_CAPACITY,
    Selector,
    Unsupported,
    parse_resource_claim,
    parse_resource_slice,
    parse_selector,
)
from extender.core.dra.selectors import DeviceFacts
from extender.core.objects import parse_node, parse_pod
from extender.core.preemption.planner import PreemptionPlan, Refusal, plan_job_preemption
from extender.core.state import ClusterState
from quota.tree import parse_elastic_quota
from tests.builders import json_values, node, quota
from tests.dra_builders import (
    DRIVER,
    claim_template,
    device_class,
    dra_pod,
    exactly,
    resource_claim,
    resource_slice,
)

GPU = "nvidia.com/gpu"
MAPPED = MusterArgs(deviceClassResources={DRIVER: GPU})
NOW = 1_800_000_000.0


def dra_snapshot(
    nodes: Iterable[Mapping[str, Any]],
    objects: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    quotas: Iterable[Mapping[str, Any]] = (),
    args: MusterArgs = MAPPED,
) -> ClusterState:
    snap = ClusterState(args, [parse_elastic_quota(q) for q in quotas])
    for item in nodes:
        snap.upsert_node(parse_node(item))
    for item in objects:
        snap.set_dra_object(item["kind"], item)
    for item in pods:
        snap.upsert_pod(parse_pod(item))
    return snap


def used(snap: ClusterState, quota_name: str) -> int:
    return snap.ledger[quota_name].used.get(GPU, 0) // 1000


def free_gpus(snap: ClusterState, node_name: str) -> int:
    return snap.free_on(node_name).get(GPU, 0) // 1000


# ---- selectors -----------------------------------------------------------------------


def test_supported_selector_forms_select_as_cel_would() -> None:
    a100 = DeviceFacts(
        DRIVER,
        {f"{DRIVER}/model": "A100", f"{DRIVER}/index": 3},
        {f"{DRIVER}/memory": 40 * 2**30 * 1000},
    )
    # Each expression, read by hand against the device above: driver equal, the model
    # string equal, index 3 >= 2, 40Gi compared with 32Gi is +1 (> 0).
    expression = (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "A100" && '
        f'(device.attributes["{DRIVER}"].index >= 2) && '
        f'device.capacity["{DRIVER}"].memory.compareTo(quantity("32Gi")) > 0'
    )
    selector = parse_selector(expression)
    assert isinstance(selector, Selector) and len(selector.terms) == 4
    assert selector.matches(a100)
    # 40Gi is not less than 32Gi; a missing attribute never matches (CEL: an error).
    smaller = parse_selector(f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("32Gi"))')
    assert isinstance(smaller, Selector) and not smaller.matches(a100)
    missing = parse_selector(f'device.attributes["{DRIVER}"].numa == 0')
    assert isinstance(missing, Selector) and not missing.matches(a100)


@pytest.mark.parametrize(
    "expression",
    [
        'device.driver == "a" || device.driver == "b"',
        '"model" in device.attributes["x"]',
        'device.attributes["x"].version.isGreaterThan(semver("1.0.0"))',
        'device.attributes["x"].model < "B"',
    ],
)
def test_other_cel_is_unsupported_with_a_reason(expression: str) -> None:
    result = parse_selector(expression)
    assert isinstance(result, Unsupported) and result.why


# ---- parsing: bad input names the field ----------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(count=0), "count"),
        (lambda c: c["spec"]["devices"]["requests"][0].pop("exactly"), "requests[0]"),
        (
            lambda c: c["spec"]["devices"]["requests"][0]["exactly"].pop("deviceClassName"),
            "deviceClassName",
        ),
        (lambda c: c["spec"]["devices"].update(requests="x"), "spec.devices.requests"),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].pop("device"),
            "results[0].device",
        ),
        (
            lambda c: c["spec"]["devices"]["requests"][0]["exactly"].update(allocationMode="Some"),
            "allocationMode",
        ),
    ],
)
def test_a_malformed_claim_is_an_error_naming_the_field(mutate: Any, field: str) -> None:
    claim = resource_claim("c", "team-a", exactly(2), allocated_on="n0", devices=["gpu-0"])
    mutate(claim)
    with pytest.raises(ManifestError) as error:
        parse_resource_claim(claim)
    assert field in error.value.field


def test_a_malformed_slice_is_an_error_naming_the_field() -> None:
    bad = resource_slice("n0", 1, attributes={"model": {"int": "A100"}})
    with pytest.raises(ManifestError) as error:
        parse_resource_slice(bad)
    assert error.value.field == "spec.devices[0].attributes.model.int"


def test_a_pod_naming_neither_claim_nor_template_is_an_error() -> None:
    bad = dra_pod("p", claim="c")
    bad["spec"]["resourceClaims"][0] = {"name": "gpus"}
    with pytest.raises(ManifestError) as error:
        parse_pod(bad)
    assert error.value.field == "spec.resourceClaims[0]"


def test_a_bad_dra_object_leaves_the_state_unchanged() -> None:
    snap = dra_snapshot([node("n0", gpu=0)], [device_class(), resource_slice("n0", 4)])
    with pytest.raises(ManifestError):
        snap.set_dra_object("ResourceSlice", resource_slice("n0", 1, attributes={"m": {}}))
    assert free_gpus(snap, "n0") == 4


# ---- item 1: quota -------------------------------------------------------------------


def test_devices_of_a_template_claim_are_charged_under_the_mapped_name() -> None:
    # Template: one request of 2 devices of class gpu.example.com, mapped to nvidia.com/gpu.
    # The pod is bound, so it counts as used: team-a uses 2.
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [device_class(), resource_slice("n0", 8), claim_template("two", "team-a", exactly(2))],
        [dra_pod("p", template="two", node="n0")],
        [quota("team-a", max={GPU: "8"})],
    )
    assert snap.pods["team-a/p"].requests[GPU] == 2000
    assert used(snap, "team-a") == 2
    # The node's 8 devices are its room; the pod takes 2: 6 free.
    assert free_gpus(snap, "n0") == 6


def test_an_unmapped_class_counts_under_its_implicit_extended_resource() -> None:
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [device_class(), resource_slice("n0", 8), claim_template("one", "team-a", exactly(1))],
        [dra_pod("p", template="one", node="n0")],
        args=MusterArgs(),
    )
    implicit = f"deviceclass.resource.kubernetes.io/{DRIVER}"
    assert snap.pods["team-a/p"].requests[implicit] == 1000
    assert snap.free_on("n0")[implicit] == 7000


def test_allocation_mode_all_is_resolved_from_the_slices() -> None:
    # All devices of the class: n0 has 4, n1 has 2.  Bound to n1: 2.  Pending: the most a
    # node holds, 4.
    objects = [
        device_class(),
        resource_slice("n0", 4),
        resource_slice("n1", 2),
        claim_template("all", "team-a", exactly(None)),
    ]
    snap = dra_snapshot(
        [node("n0", gpu=0), node("n1", gpu=0)],
        objects,
        [dra_pod("bound", template="all", node="n1"), dra_pod("waiting", template="all")],
    )
    assert snap.pods["team-a/bound"].requests[GPU] == 2000
    assert snap.pods["team-a/waiting"].requests[GPU] == 4000


def test_an_allocated_claim_is_charged_its_allocated_devices() -> None:
    # The claim asks 2 but its status says 3 devices were allocated: 3 (as allocated).
    claim = resource_claim(
        "c", "team-a", exactly(2), allocated_on="n0", devices=["gpu-0", "gpu-1", "gpu-2"]
    )
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [device_class(), resource_slice("n0", 8), claim],
        [dra_pod("p", claim="c", node="n0")],
        [quota("team-a", max={GPU: "8"})],
    )
    assert used(snap, "team-a") == 3
    assert free_gpus(snap, "n0") == 5


def test_a_claim_shared_by_pods_of_one_job_is_charged_once() -> None:
    # Two pods of gang "train" name claim c (2 devices): the job is charged 2, not 4; the
    # first pod by key (team-a/p0) carries it.  When p0 goes, p1 carries it.
    claim = resource_claim("c", "team-a", exactly(2), allocated_on="n0", devices=["gpu-0", "gpu-1"])
    pods = [dra_pod(f"p{i}", claim="c", node="n0", group="train") for i in range(2)]
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [device_class(), resource_slice("n0", 8), claim],
        pods,
        [quota("team-a", max={GPU: "8"})],
    )
    assert used(snap, "team-a") == 2
    assert snap.pods["team-a/p0"].requests.get(GPU) == 2000
    assert GPU not in snap.pods["team-a/p1"].requests
    assert free_gpus(snap, "n0") == 6
    snap.remove_pod("team-a/p0")
    assert used(snap, "team-a") == 2
    assert snap.pods["team-a/p1"].requests.get(GPU) == 2000
    assert free_gpus(snap, "n0") == 6
    snap.remove_pod("team-a/p1")
    # No pod uses it: the resourceclaim controller deallocates it, its 2 devices free.
    assert used(snap, "team-a") == 0
    assert free_gpus(snap, "n0") == 8


def test_a_claim_shared_by_two_jobs_is_charged_to_neither_and_held_on_its_node() -> None:
    claim = resource_claim("c", "team-a", exactly(2), allocated_on="n0", devices=["gpu-0", "gpu-1"])
    pods = [dra_pod("x", claim="c", node="n0"), dra_pod("y", claim="c", node="n0")]
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [device_class(), resource_slice("n0", 8), claim],
        pods,
        [quota("team-a", max={GPU: "8"})],
    )
    assert used(snap, "team-a") == 0
    # Held on n0 by the claim itself: 8 - 2 = 6 free, and no pod's requests carry them.
    assert free_gpus(snap, "n0") == 6
    assert snap.nodes["n0"].allocatable[GPU] == 6000


def test_an_extended_resource_backed_by_dra_is_charged_once() -> None:
    # The container asks nvidia.com/gpu: 1, which DeviceClass gpu.example.com backs
    # (extendedResourceName); kube-scheduler made claim "ext" for it (allocated gpu-0).
    # Charged once: 1, not 1 + 1.
    cls = device_class(extended=GPU)
    claim = resource_claim("ext", "team-a", exactly(1), allocated_on="n0", devices=["gpu-0"])
    extended = dra_pod("p", claim="unused", node="n0", gpu=1)
    extended["spec"].pop("resourceClaims")
    extended["spec"]["containers"][0]["resources"].pop("claims")
    extended["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "ext",
        "requestMappings": [{"containerName": "c", "resourceName": GPU, "requestName": "r0"}],
    }
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [cls, resource_slice("n0", 8), claim],
        [extended],
        [quota("team-a", max={GPU: "8"})],
        args=MusterArgs(),
    )
    assert used(snap, "team-a") == 1
    assert free_gpus(snap, "n0") == 7


def test_a_claim_allocated_before_its_pod_binds_holds_its_devices_once_bound_carries_them() -> None:
    claim = resource_claim("c", "team-a", exactly(2), allocated_on="n0", devices=["gpu-0", "gpu-1"])
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [device_class(), resource_slice("n0", 8), claim],
        [dra_pod("p", claim="c")],
    )
    # Pending: the claim holds 2 on n0 (allocatable 6).
    assert snap.nodes["n0"].allocatable[GPU] == 6000
    snap.upsert_pod(parse_pod(dra_pod("p", claim="c", node="n0")))
    # Bound: the pod's requests carry them; allocatable back to 8, 6 free.
    assert snap.nodes["n0"].allocatable[GPU] == 8000
    assert free_gpus(snap, "n0") == 6


def test_what_muster_cannot_count_is_unknown_and_said() -> None:
    # A class whose selector uses '||': its resource's room is unknown on every node
    # (abundant, so Muster's filter refuses nothing), and the pod says why.
    cls = device_class(expressions=['device.driver == "a" || device.driver == "b"'])
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [cls, resource_slice("n0", 8), claim_template("one", "team-a", exactly(1))],
        [dra_pod("p", template="one")],
    )
    assert snap.nodes["n0"].allocatable[GPU] == UNKNOWN_CAPACITY
    assert any("'||' is not evaluated" in reason for reason in snap.pods["team-a/p"].unsupported)


def test_a_request_whose_selectors_narrow_the_class_is_unknown() -> None:
    # Half the devices are H100: a request for model A100 picks among the class's devices.
    objects = [
        device_class(),
        resource_slice("n0", 2, name="a"),
        resource_slice("n0", 2, attributes={"model": {"string": "H100"}}, name="h"),
        claim_template(
            "a100",
            "team-a",
            exactly(1, selectors=[f'device.attributes["{DRIVER}"].model == "A100"']),
        ),
    ]
    snap = dra_snapshot([node("n0", gpu=0)], objects, [dra_pod("p", template="a100")])
    assert any("pick among" in reason for reason in snap.pods["team-a/p"].unsupported)


def test_a_class_seen_after_its_pods_recharges_them() -> None:
    snap = dra_snapshot(
        [node("n0", gpu=0)],
        [resource_slice("n0", 8), claim_template("one", "team-a", exactly(1))],
        [dra_pod("p", template="one", node="n0")],
    )
    assert any("not seen" in reason for reason in snap.pods["team-a/p"].unsupported)
    snap.set_dra_object("DeviceClass", device_class())
    assert snap.pods["team-a/p"].unsupported == ()
    assert free_gpus(snap, "n0") == 7


# ---- item 2: node fit on copies ------------------------------------------------------


def trainer(name: str) -> dict[str, Any]:
    return dra_pod(
        name,
        template="eight",
        group="train",
        preemptible=False,
        can_preempt=True,
        created="2026-01-01T11:00:00Z",
    )


def borrower(name: str, node_name: str, minute: int, **kwargs: Any) -> dict[str, Any]:
    started = f"2026-01-01T10:{minute:02d}:00Z"
    return dra_pod(
        name,
        "team-b",
        node=node_name,
        preemptible=True,
        created=started,
        started=started,
        **kwargs,
    )


def two_nodes_borrowed(extra: Iterable[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    return [
        device_class(),
        resource_slice("n0", 8),
        resource_slice("n1", 8),
        claim_template("eight", "team-a", exactly(8)),
        claim_template("eight", "team-b", exactly(8)),
        *extra,
    ]


QUOTAS = [
    quota("team-a", min={GPU: "16"}, max={GPU: "16"}),
    quota("team-b", min={GPU: "0"}, max={GPU: "16"}),
]


def test_a_dra_gang_preempts_a_borrowing_teams_dra_pods_whole() -> None:
    # n0 and n1 hold 8 devices each; team-b's two pods take 8 each through their claims,
    # all borrowed (min 0).  team-a's gang of two 8-device pods is within its min 16, so
    # it reclaims: both borrowers go, and one trainer lands on each node.
    snap = dra_snapshot(
        [node("n0", gpu=0), node("n1", gpu=0)],
        two_nodes_borrowed(),
        [
            borrower("b0", "n0", 1, template="eight"),
            borrower("b1", "n1", 2, template="eight"),
            trainer("t0"),
            trainer("t1"),
        ],
        QUOTAS,
    )
    assert used(snap, "team-b") == 16
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, PreemptionPlan), decision
    assert sorted(v.pod.key for v in decision.victims) == ["team-b/b0", "team-b/b1"]
    assert sorted(decision.placements.values()) == ["n0", "n1"]


def test_a_plan_does_not_free_devices_a_surviving_pod_still_uses() -> None:
    # b1 shares its claim with "other" (a pod of another job, not preemptible): the claim
    # is charged to no one and held on n1.  Evicting b1 frees nothing there, so the
    # gang (8 + 8) cannot fit: n0 frees 8 by evicting b0, n1 never does.
    shared = resource_claim(
        "shared", "team-b", exactly(8), allocated_on="n1", devices=[f"gpu-{i}" for i in range(8)]
    )
    snap = dra_snapshot(
        [node("n0", gpu=0), node("n1", gpu=0)],
        two_nodes_borrowed([shared]),
        [
            borrower("b0", "n0", 1, template="eight"),
            borrower("b1", "n1", 2, claim="shared"),
            dra_pod("other", "team-b", claim="shared", node="n1", preemptible=False),
            trainer("t0"),
            trainer("t1"),
        ],
        QUOTAS,
    )
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, Refusal), decision


def test_no_plan_for_devices_muster_cannot_count() -> None:
    cls = device_class(expressions=['device.driver == "a" || device.driver == "b"'])
    snap = dra_snapshot(
        [node("n0", gpu=0), node("n1", gpu=0)],
        [cls, *two_nodes_borrowed()[1:]],
        [
            borrower("b0", "n0", 1, template="eight"),
            borrower("b1", "n1", 2, template="eight"),
            trainer("t0"),
            trainer("t1"),
        ],
        QUOTAS,
    )
    decision = plan_job_preemption(snap, "team-a/train", NOW)
    assert isinstance(decision, Refusal), decision
    assert "'||' is not evaluated" in decision.reasons[0]


# ---- bad input never crashes: any field of a valid object replaced by any JSON -------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replaced(obj: Any, path: tuple[Any, ...], new: Any) -> Any:
    copied = copy.deepcopy(obj)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copied


VALID: list[tuple[str, dict[str, Any]]] = [
    ("DeviceClass", device_class(extended=GPU)),
    ("ResourceSlice", resource_slice("n0", 2, attributes={"i": {"int": 1}, "m": {"string": "x"}})),
    ("ResourceClaim", resource_claim("c", "team-a", exactly(2), allocated_on="n0", devices=["g"])),
    ("ResourceClaimTemplate", claim_template("t", "team-a", exactly(None, selectors=["true"]))),
]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_malformed_dra_objects_raise_only_manifest_errors_naming_a_field(data: Any) -> None:
    kind, valid = data.draw(st.sampled_from(VALID))
    path = data.draw(st.sampled_from(_paths(valid)))
    broken = _replaced(valid, path, data.draw(json_values(width=3, leaves=6)))
    snap = ClusterState(MAPPED)
    try:
        snap.set_dra_object(kind, broken)
    except ManifestError as error:
        assert error.field


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_malformed_pod_claim_raises_only_a_manifest_error(data: Any) -> None:
    valid = dra_pod("p", template="t", made="p-t-1")
    valid["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "e"}
    paths = [
        p for p in _paths(valid) if p[0] in ("spec", "status") and "resourceclaim" in str(p).lower()
    ]
    path = data.draw(st.sampled_from(paths))
    broken = _replaced(valid, path, data.draw(json_values(width=3, leaves=6)))
    try:
        pod = parse_pod(broken)
    except ManifestError as error:
        assert error.field
        return
    dra_snapshot([node("n0", gpu=0)], [device_class()], [], args=MAPPED).upsert_pod(pod)
