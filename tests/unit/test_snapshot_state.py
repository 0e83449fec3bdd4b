"""The snapshot's running indexes equal a from-scratch rebuild, after any sequence of events.

A hypothesis state machine feeds one :class:`ClusterState` random events, as the informers
and the decisions do (nodes and pods come, change and go; quotas are replaced;
reservations and admission holds are taken, released and expire), and after every step
compares everything the decisions can read from it with a snapshot built afresh from
the same objects.  This pins the bookkeeping while its internals are reorganised.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from base import keys
from extender.core.objects import parse_node, parse_pod
from extender.core.state import ClusterState, Reservation
from quota.tree import parse_elastic_quota
from tests.builders import node, pod, quota

GPU = "nvidia.com/gpu"
NODES = ("n0", "n1", "n2")
NAMESPACES = ("qa", "qb", "ops")
POD_NAMES = tuple(f"p{i}" for i in range(6))
QUOTA_SETS = {
    "flat": [quota("qa", min={GPU: "8"}, max={GPU: "16"}), quota("qb", max={GPU: "24"})],
    "tree": [
        quota("root", is_parent=True, namespace="root", max={GPU: "24"}),
        quota("qa", parent="root", min={GPU: "4"}, max={GPU: "16"}),
        quota("qb", parent="root", max={GPU: "16"}),
    ],
    "none": [],
}
T0 = 1_800_000_000.0


def _nonzero(resources: Any) -> dict[str, int]:
    return {name: amount for name, amount in dict(resources).items() if amount}


def observable(snap: ClusterState) -> dict[str, Any]:
    """Everything decisions read from a snapshot, in a comparable form."""
    pods = sorted(snap.pods)
    return {
        "nodes": {
            name: (
                _nonzero(snap.free_on(name)),
                _nonzero(snap.requested_on(name)),
                {k: _nonzero(v) for k, v in snap.reserved_on(name).items()},
                _nonzero(snap.preemptible_on(name)),
                sorted(p.key for p in snap.pods_on(name)),
                sorted(snap.members.nominated_to(name)),
            )
            for name in sorted(snap.nodes)
        },
        "ledger": {
            name: tuple(
                _nonzero(part)
                for part in (
                    snap.ledger[name].used,
                    snap.ledger[name].np_used,
                    snap.ledger[name].np_request,
                    snap.ledger[name].subtree_used,
                )
            )
            for name in sorted(snap.tree.specs)
        },
        "units": list(snap.victims.units()),
        "units_by_quota": {q: list(snap.victims.units(q)) for q in sorted(snap.tree.specs)},
        "unit_pods": {
            job: [p.key for p in unit] for job, unit in sorted(snap.victims.unit_pods().items())
        },
        "unit_resources": sorted(sorted(r) for r in snap.victims.unit_resources()),
        "units_asking": sorted(
            (sorted(asks), list(units)) for asks, units in snap.victims.units_asking().items()
        ),
        "asks_of_scattered": sorted(sorted(asks) for asks in snap.victims.asks_of_scattered()),
        "pods": {
            key: (
                snap.counts_as_used(snap.pods[key]),
                snap.reserved_node(key),
                snap.reservation_holder(key),
                snap.quota_held(key),
                snap.quota_name(snap.pods[key]),
            )
            for key in pods
        },
        "jobs": {
            job: (sorted(snap.members.job_members(job)), snap.declarations.min_available(job))
            for job in sorted({snap.pods[key].job for key in pods})
        },
        "marked": {
            job: sorted(snap.members.marked_victims(job))
            for job in sorted({snap.pods[key].job for key in pods} | {"qa/p0", "qa/g"})
        },
        "reservations": dict(sorted(snap.reservations.items())),
        "holds": snap.book.holds(),
        "reserved_nodes": sorted(snap.nodes_with_reserved_room()),
        "charged_to": {key: snap.charged_to(snap.pods[key]) for key in sorted(snap.pods)},
    }


def rebuild(snap: ClusterState, quotas: list[dict[str, Any]]) -> ClusterState:
    fresh = ClusterState(snap.args, [parse_elastic_quota(q) for q in quotas])
    fresh.membership.keep_preemptible(
        snap.membership.kept_preemptible()
    )  # history, as reservations are
    for info in snap.nodes.values():
        fresh.upsert_node(info)
    for key in sorted(snap.pods):
        fresh.upsert_pod(snap.pods[key])
    for reservation in snap.reservations.values():
        fresh.add_reservation(reservation)
    for job, (until, held) in snap.book.holds().items():
        fresh.hold_quota(job, sorted(held), until)
    return fresh


class SnapshotEvents(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.quotas = QUOTA_SETS["flat"]
        self.snap = ClusterState(None, [parse_elastic_quota(q) for q in self.quotas])
        self.now = T0

    @rule(name=st.sampled_from(NODES), gpu=st.sampled_from([4, 8]))
    def upsert_node(self, name: str, gpu: int) -> None:
        self.snap.upsert_node(parse_node(node(name, gpu=gpu)))

    @rule(name=st.sampled_from(NODES))
    def remove_node(self, name: str) -> None:
        self.snap.remove_node(name)

    @rule(
        name=st.sampled_from(POD_NAMES),
        namespace=st.sampled_from(NAMESPACES),
        where=st.sampled_from([None, *NODES]),
        gpu=st.integers(0, 8),
        preemptible=st.sampled_from([None, True, False]),
        group=st.sampled_from([None, "g"]),
        priority=st.sampled_from([0, 10, 20]),
        started=st.integers(0, 3),
        phase=st.sampled_from(["", "Succeeded"]),
        terminating=st.booleans(),
        marked_for=st.sampled_from([None, "qa/p0", "qa/g"]),
        nominated=st.sampled_from([None, *NODES]),
        quota_label=st.sampled_from([None, "qa", "missing"]),
        min_available=st.sampled_from([None, "1", "2"]),
    )
    def upsert_pod(
        self,
        name: str,
        namespace: str,
        where: str | None,
        gpu: int,
        preemptible: bool | None,
        group: str | None,
        priority: int,
        started: int,
        phase: str,
        terminating: bool,
        marked_for: str | None,
        nominated: str | None,
        quota_label: str | None,
        min_available: str | None,
    ) -> None:
        for key in [k for k in self.snap.pods if k.endswith(f"/{name}")]:
            self.snap.remove_pod(key)  # one pod per name, whatever its namespace
        manifest = pod(
            name,
            namespace,
            gpu=gpu,
            node=where,
            group=group,
            preemptible=preemptible,
            priority=priority,
            started=f"2026-01-01T10:0{started}:00Z",
            quota=quota_label,
            annotations=(
                {keys.GANG_MIN_AVAILABLE_ANNOTATION: min_available} if min_available else None
            ),
        )
        if phase:
            manifest["status"]["phase"] = phase
        if terminating:
            manifest["metadata"]["deletionTimestamp"] = "2026-01-01T11:00:00Z"
        if marked_for is not None:
            manifest["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
            mark = json.dumps({"preemptor": marked_for})
            manifest["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = mark
        if nominated is not None:
            manifest["status"]["nominatedNodeName"] = nominated
        self.snap.upsert_pod(parse_pod(manifest))

    @precondition(lambda self: bool(self.snap.pods))
    @rule(data=st.data())
    def remove_pod(self, data: st.DataObject) -> None:
        self.snap.remove_pod(data.draw(st.sampled_from(sorted(self.snap.pods))))

    @rule(which=st.sampled_from(sorted(QUOTA_SETS)))
    def set_quotas(self, which: str) -> None:
        self.quotas = QUOTA_SETS[which]
        self.snap.set_quotas([parse_elastic_quota(q) for q in self.quotas])

    @precondition(lambda self: bool(self.snap.pods))
    @rule(data=st.data(), timeout=st.sampled_from([1.0, 100.0]))
    def add_reservation(self, data: st.DataObject, timeout: float) -> None:
        keys_ = sorted(self.snap.pods)
        job = self.snap.pods[data.draw(st.sampled_from(keys_))].job
        # A reservation places only its own job's pending pods (a plan's, or restored).
        chosen = sorted(
            k for k in self.snap.members.job_members(job) if not self.snap.pods[k].node_name
        )
        if not chosen:
            return
        placements = {key: data.draw(st.sampled_from(NODES)) for key in chosen}
        victims = tuple(data.draw(st.lists(st.sampled_from(keys_), max_size=2, unique=True)))
        quota_name = self.snap.quota_name(self.snap.pods[chosen[0]]) or "default"
        self.snap.add_reservation(
            Reservation(job, quota_name, placements, victims, self.now, self.now + timeout)
        )

    @precondition(lambda self: bool(self.snap.reservations))
    @rule(data=st.data())
    def remove_reservation(self, data: st.DataObject) -> None:
        self.snap.remove_reservation(data.draw(st.sampled_from(sorted(self.snap.reservations))))

    @precondition(lambda self: bool(self.snap.pods))
    @rule(data=st.data(), duration=st.sampled_from([1.0, 50.0]))
    def hold_quota(self, data: st.DataObject, duration: float) -> None:
        keys_ = sorted(self.snap.pods)
        chosen = data.draw(st.lists(st.sampled_from(keys_), min_size=1, max_size=3, unique=True))
        self.snap.hold_quota(self.snap.pods[chosen[0]].job, chosen, self.now + duration)

    @rule(seconds=st.sampled_from([0.5, 2.0, 60.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.snap.release_quota_holds(self.now)
        self.snap.expire_reservations(self.now)

    @invariant()
    def indexes_equal_a_rebuild(self) -> None:
        assert observable(self.snap) == observable(rebuild(self.snap, self.quotas))


SnapshotEvents.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
test_snapshot_indexes_equal_a_rebuild = SnapshotEvents.TestCase
