"""Small builders of Kubernetes objects (camelCase dicts) and snapshots for tests, the
arbitrary-JSON strategy the fuzz tests share, and a committed plan's marks on a state."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from hypothesis import strategies as st

from base import keys
from extender.core.config import MusterArgs
from extender.core.effects import HoldRoom, ReleaseRoom, apply
from extender.core.objects import parse_node, parse_pod
from extender.core.preemption.planner import PreemptionPlan
from extender.core.records import RecordKeys
from extender.core.state import ClusterState
from quota.tree import parse_elastic_quota

T0 = "2026-01-01T10:00:00Z"

#: The keys the adapters' tests sign and check Muster's records with.
RECORD_KEYS = RecordKeys((("test-key", b"k" * 32),))


def record_keys() -> RecordKeys:
    """:data:`RECORD_KEYS`, as the adapters ask for them (a callable: they may rotate)."""
    return RECORD_KEYS


def signed(record: str, uid: str, payload: Mapping[str, Any]) -> str:
    """The annotation text of Muster's ``record`` on pod ``uid``, signed with the test keys."""
    return json.dumps(RECORD_KEYS.sign(record, uid, payload))


#: Scalars arbitrary JSON is made of (no NaN: JSON has none).
JSON_LEAVES = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)


def json_values(*, width: int, leaves: int) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values: lists and objects up to ``width`` items, ``leaves`` scalars."""
    return st.recursive(
        JSON_LEAVES,
        lambda children: (
            st.lists(children, max_size=width)
            | st.dictionaries(st.text(max_size=8), children, max_size=width)
        ),
        max_leaves=leaves,
    )


def node(
    name: str,
    gpu: int = 8,
    cpu: str = "32",
    *,
    labels: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    pods: int = 110,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": "128Gi", "pods": str(pods)}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": allocatable},
    }


def pod(
    name: str,
    namespace: str = "team-a",
    *,
    gpu: int = 0,
    cpu: str | None = None,
    node: str | None = None,
    group: str | None = None,
    preemptible: bool | None = None,
    can_preempt: bool | None = None,
    priority: int | None = None,
    created: str = T0,
    started: str | None = None,
    quota: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    all_labels = dict(labels or {})
    if group is not None:
        all_labels[keys.POD_GROUP_LABEL] = group
    if preemptible is not None:
        all_labels[keys.PREEMPTIBLE_LABEL] = str(preemptible).lower()
    if can_preempt is not None:
        all_labels[keys.CAN_PREEMPT_LABEL] = str(can_preempt).lower()
    if quota is not None:
        all_labels[keys.QUOTA_NAME_LABEL] = quota
    requests: dict[str, str] = {}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    if cpu is not None:
        requests["cpu"] = cpu
    body: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node is not None:
        body["nodeName"] = node
    if priority is not None:
        body["priority"] = priority
    body.update(spec or {})
    status: dict[str, Any] = {}
    if node is not None:
        status = {"phase": "Running", "startTime": started or created}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
            "labels": all_labels,
            "annotations": dict(annotations or {}),
        },
        "spec": body,
        "status": status,
    }


def quota(
    name: str,
    *,
    min: Mapping[str, str] | None = None,
    max: Mapping[str, str] | None = None,
    namespace: str | None = None,
    parent: str | None = None,
    is_parent: bool = False,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    labels = {}
    if parent is not None:
        labels[keys.QUOTA_PARENT_LABEL] = parent
    if is_parent:
        labels[keys.QUOTA_IS_PARENT_LABEL] = "true"
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": name,
            "namespace": namespace or name,
            "labels": labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {"min": dict(min or {}), "max": dict(max or {})},
    }


def snapshot(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    quotas: Iterable[Mapping[str, Any]] = (),
    args: MusterArgs | None = None,
) -> ClusterState:
    snap = ClusterState(args, [parse_elastic_quota(q) for q in quotas])
    for item in nodes:
        snap.upsert_node(parse_node(item))
    for item in pods:
        snap.upsert_pod(parse_pod(item))
    return snap


#: How a committed plan's victim stands while it leaves (docs/design.md, Job-level preemption,
#: step 6): named only by the job's reservation (its mark not written or not seen yet),
#: marked for soft eviction, or marked and being deleted (the evictor's grace period).
Leaving = Literal["promised", "marked", "terminating"]
LEAVING: tuple[Leaving, ...] = ("promised", "marked", "terminating")


def leaving(manifest: Mapping[str, Any], preemptor: str | None, how: Leaving) -> dict[str, Any]:
    """A copy of a victim's ``manifest`` as it stands while leaving for ``preemptor``
    (``None``: a mark for no job, such as a ``HoldAndDrain`` drain's)."""
    made = copy.deepcopy(dict(manifest))
    if how == "promised":
        return made
    made["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    mark = {"initiator": "muster", "preemptor": preemptor, "reason": "test", "timestamp": T0}
    made["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps(mark)
    if how == "terminating":
        made["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    return made


def hold_plan(snap: ClusterState, plan: PreemptionPlan, now: float) -> None:
    """Commit ``plan``'s reservation to ``snap`` as the PostFilter does (its victims are the
    caller's: mark them with :func:`leaving`, or remove them once gone); the reservations
    it takes (:mod:`extender.core.preemption.yielding`) end."""
    for held in plan.yielded:
        apply(snap, ReleaseRoom(held.job))
    apply(snap, HoldRoom(plan.reservation(now, snap.args.reservation_timeout_seconds)))
