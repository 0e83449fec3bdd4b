"""The objects that declare a gang, one parser per API (issue 26, item 2).

Each object below is written by hand in the shape its API's Go types give it (k8s.io/api
v0.35.8 ``scheduling/v1alpha1`` Workload; v0.36.3 ``v1alpha2`` and v0.37.2 ``v1beta1``
PodGroup; the scheduler-plugins and Volcano PodGroup CRDs), and each expectation is read
off the object: the size is ``minCount`` / ``minMember`` (Volcano: the larger of
``minMember`` and the sum of ``minTaskMember``), a basic policy is a gang of one.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from base.errors import ManifestError
from extender.core import gangsize
from extender.core.objects import parse_pod
from extender.core.podgroups import (
    GANG_OBJECT_KINDS,
    PodGroupInfo,
    gang_object_kind,
    parse_native_pod_group,
    parse_native_workload,
    parse_scheduler_plugins_pod_group,
    parse_volcano_pod_group,
)
from tests.builders import json_values, node, pod, snapshot

GPU = "nvidia.com/gpu"
#: The pod spec fields the test pod sets itself (or Muster reads), kept out of the extras.
KNOWN_SPEC_FIELDS = frozenset(
    {
        "containers",
        "initContainers",
        "overhead",
        "nodeName",
        "priority",
        "nodeSelector",
        "affinity",
        "tolerations",
        "priorityClassName",
        "preemptionPolicy",
        "schedulerName",
        "schedulingGroup",
        "workloadRef",
        "schedulingGates",
        "resources",
    }
)


def meta(name: str = "g") -> dict[str, Any]:
    return {"name": name, "namespace": "team-a"}


def test_a_native_pod_group_declares_min_count() -> None:
    obj = {"metadata": meta(), "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    assert parse_native_pod_group(obj) == PodGroupInfo("team-a", "g", 4)


def test_a_native_pod_group_with_a_basic_policy_is_a_gang_of_one() -> None:
    obj = {"metadata": meta(), "spec": {"schedulingPolicy": {"basic": {}}}}
    assert parse_native_pod_group(obj).min_member == 1


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {"gang": {"minCount": "4"}}}, "spec.schedulingPolicy.gang.minCount"),
        ({"schedulingPolicy": {}}, "spec.schedulingPolicy"),
        ({}, "spec.schedulingPolicy"),
    ],
)
def test_a_bad_native_pod_group_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as error:
        parse_native_pod_group({"metadata": meta(), "spec": spec})
    assert error.value.field == field


def test_a_135_workload_declares_each_pod_group_under_the_name_pods_give_it() -> None:
    # Pods name their group workloadRef {name: wl, podGroup: workers}: "wl-workers".
    obj = {
        "metadata": meta("wl"),
        "spec": {
            "podGroups": [
                {"name": "workers", "policy": {"gang": {"minCount": 3}}},
                {"name": "driver", "policy": {"basic": {}}},
            ]
        },
    }
    assert parse_native_workload(obj) == (
        PodGroupInfo("team-a", "wl-workers", 3),
        PodGroupInfo("team-a", "wl-driver", 1),
    )


def test_every_replica_of_a_135_workload_pod_group_is_sized_by_it() -> None:
    # Two replicas (keys "0" and "1") of pod group "workers" (minCount 2): two jobs,
    # "wl-workers-0" and "wl-workers-1", each declared 2 by the one Workload entry.
    snap = snapshot([node("n0", gpu=8)], [])
    snap.set_pod_group(PodGroupInfo("team-a", "wl-workers", 2))
    for replica in ("0", "1"):
        ref = {"workloadRef": {"name": "wl", "podGroup": "workers", "podGroupReplicaKey": replica}}
        snap.upsert_pod(parse_pod(pod(f"w-{replica}", gpu=1, spec=ref)))
        assert snap.declarations.declared_min_available(f"team-a/wl-workers-{replica}") == 2


def test_a_scheduler_plugins_pod_group_declares_min_member_timeout_and_min_resources() -> None:
    obj = {
        "metadata": meta(),
        "spec": {
            "minMember": 1,
            "scheduleTimeoutSeconds": 60,
            "minResources": {GPU: "24", "cpu": "12"},
        },
    }
    group = parse_scheduler_plugins_pod_group(obj)
    assert (group.min_member, group.schedule_timeout_seconds) == (1, 60)
    assert group.min_resources == {GPU: 24_000, "cpu": 12_000}  # milli-units


@pytest.mark.parametrize(
    ("spec", "size"),
    [
        ({"minMember": 4}, 4),
        ({"minMember": 2, "minTaskMember": {"ps": 1, "worker": 3}}, 4),  # tasks need 4
        ({"minMember": 5, "minTaskMember": {"worker": 3}}, 5),
        ({"minMember": 0}, None),
        ({}, None),
    ],
)
def test_a_volcano_pod_group_is_sized_by_min_member_and_its_tasks(
    spec: dict[str, Any], size: int | None
) -> None:
    assert parse_volcano_pod_group({"metadata": meta(), "spec": spec}).min_member == size


def test_a_bad_volcano_task_count_names_the_task() -> None:
    with pytest.raises(ManifestError) as error:
        parse_volcano_pod_group({"metadata": meta(), "spec": {"minTaskMember": {"w": -1}}})
    assert error.value.field == "spec.minTaskMember.w"


def test_the_first_api_in_order_declares_a_job_and_the_next_takes_over_when_it_goes() -> None:
    # The native PodGroup (rank 0) says 4, the scheduler-plugins one (a later rank) 2.
    native = gang_object_kind("scheduling.k8s.io/v1beta1", "PodGroup")
    plugins = gang_object_kind("scheduling.x-k8s.io/v1alpha1", "PodGroup")
    assert native is not None and plugins is not None and native.rank < plugins.rank
    snap = snapshot([node("n0", gpu=8)], [])
    spec = {"schedulingPolicy": {"gang": {"minCount": 4}}}
    (first,) = plugins.read({"metadata": meta(), "spec": {"minMember": 2}})
    (second,) = native.read({"metadata": meta(), "spec": spec})
    snap.set_pod_group(first)
    snap.set_pod_group(second)
    assert snap.declarations.declared_min_available("team-a/g") == 4
    snap.forget_pod_group("team-a", "g", native.rank)
    assert snap.declarations.declared_min_available("team-a/g") == 2
    snap.forget_pod_group("team-a", "g", plugins.rank)
    assert snap.declarations.declared_min_available("team-a/g") is None


def test_a_native_gang_waits_whole_for_its_declared_size() -> None:
    # PodGroup g (minCount 3) and two of its pods: the gang lacks a pod, so its size is
    # the declared 3, not the 2 that exist.
    snap = snapshot([node("n0", gpu=8)], [])
    snap.set_pod_group(PodGroupInfo("team-a", "g", 3))
    spec = {"schedulingGroup": {"podGroupName": "g"}}
    pods = [parse_pod(pod(f"p{i}", gpu=1, spec=spec)) for i in range(2)]
    for member in pods:
        snap.upsert_pod(member)
    assert gangsize.gang_size(snap, pods[0]) == 3 and gangsize.is_gang(snap, pods[0])


def test_every_kind_is_listed_once_with_a_path_the_api_server_serves() -> None:
    paths = [kind.path for kind in GANG_OBJECT_KINDS]
    assert len(set(paths)) == len(paths)
    assert "/apis/scheduling.k8s.io/v1alpha2/podgroups" in paths
    assert "/apis/scheduling.volcano.sh/v1beta1/podgroups" in paths
    assert [kind.writes_status for kind in GANG_OBJECT_KINDS].count(True) == 2


@settings(max_examples=200, deadline=None)
@given(
    extra=st.dictionaries(
        st.text(min_size=1, max_size=12).filter(lambda key: key not in KNOWN_SPEC_FIELDS),
        json_values(width=3, leaves=6),
        max_size=4,
    ),
    group=json_values(width=3, leaves=4),
    ref=json_values(width=3, leaves=4),
)
def test_pods_with_fields_muster_has_never_seen_are_parsed_leniently(
    extra: dict[str, Any], group: Any, ref: Any
) -> None:
    # A newer release's pod: spec fields Muster does not know, and the alpha gang fields
    # (schedulingGroup, workloadRef) in shapes Muster does not expect.  Read leniently:
    # the pod parses, its requests as written, and a malformed gang field names no group.
    spec = {**extra, "schedulingGroup": group, "workloadRef": ref}
    parsed = parse_pod(pod("p", gpu=2, spec=spec))
    assert parsed.requests[GPU] == 2000
    good_group = isinstance(group, dict) and isinstance(group.get("podGroupName"), str)
    good_ref = isinstance(ref, dict) and isinstance(ref.get("name"), str) and ref["name"]
    if not good_group and not good_ref:
        assert parsed.group is None
