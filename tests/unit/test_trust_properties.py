"""Property: whatever a tenant writes on its own pods, Muster keeps to its rules.

Tenant pods (namespace team-a) carry arbitrary values under every key Muster reads:
the quota, preemptible and can-preempt labels, the soft-eviction label and mark, forged
reservations naming other namespaces' pods, forged gang backoffs with any numbers.
They are read as the live informer reads them (records checked against the keys, then
parsed, then their records restored) beside an honest team-b and a kube-system pod.
Whatever they say: nothing raises outside a parse error the informer turns into a skip;
no pod is charged to a quota that does not admit its namespace; no forged record is
held; and every plan's victims are ones the rules allow (never kube-system's pod, never
a non-preemptible one).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from base import keys
from base.errors import ManifestError
from extender.core.effects import apply
from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.preemption.policy import victim_refusal
from extender.core.records import believed_pod
from extender.core.reservations import restored_effects
from tests.builders import RECORD_KEYS, json_values, node, pod, quota, snapshot

NOW = 1_767_261_600.0
HONEST = ["team-b/b-0", "team-b/b-1", "kube-system/coredns"]

label_values = st.sampled_from(["true", "false", "team-a", "team-b", "default", "nope", ""]) | (
    st.text(max_size=6)
)
times = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.just(NOW),
)
reservations = st.fixed_dictionaries(
    {
        "job": st.sampled_from(["team-a/t-0", "team-a/g", "team-b/b-0"]),
        "node": st.sampled_from(["n0", "n1", "nowhere"]),
        "created": times,
        "expires": times,
        "victims": st.lists(st.sampled_from([*HONEST, "team-a/t-1", "bad"]), max_size=3),
    }
).map(json.dumps)
backoffs = st.fixed_dictionaries(
    {
        "attempts": st.integers(min_value=-5, max_value=10**30) | st.text(max_size=3),
        "givenUp": times,
        "until": st.none() | times,
    }
).map(json.dumps)
marks = st.fixed_dictionaries(
    {"preemptor": st.sampled_from(["team-a/t-0", None, 3]), "timestamp": st.text(max_size=25)}
).map(json.dumps)
annotation_values = (
    reservations | backoffs | marks | json_values(width=3, leaves=6).map(json.dumps) | st.text()
)


@st.composite
def tenant_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    made = []
    for index in range(draw(st.integers(min_value=1, max_value=4))):
        labels = draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        keys.QUOTA_NAME_LABEL,
                        keys.PREEMPTIBLE_LABEL,
                        keys.CAN_PREEMPT_LABEL,
                        keys.SOFT_EVICTION_KEY,
                        keys.POD_GROUP_LABEL,
                    ]
                ),
                label_values,
                max_size=5,
            )
        )
        annotations = draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        keys.RESERVATION_ANNOTATION,
                        keys.GANG_BACKOFF_ANNOTATION,
                        keys.SOFT_EVICTION_KEY,
                        keys.GANG_MIN_AVAILABLE_ANNOTATION,
                    ]
                ),
                annotation_values,
                max_size=4,
            )
        )
        running = draw(st.booleans())
        made.append(
            pod(
                f"t-{index}",
                "team-a",
                gpu=draw(st.integers(min_value=0, max_value=8)),
                node="n1" if running else None,
                priority=draw(st.integers(min_value=0, max_value=100)),
                labels=labels,
                annotations=annotations,
            )
        )
    return made


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tenant=tenant_pods())
def test_tenant_input_never_moves_quotas_forges_records_or_widens_victims(
    tenant: list[dict[str, Any]],
) -> None:
    quotas = [
        quota("team-a", min={"nvidia.com/gpu": "4"}, max={"nvidia.com/gpu": "8"}),
        quota("team-b", min={"nvidia.com/gpu": "4"}, max={"nvidia.com/gpu": "16"}),
    ]
    honest = [
        pod("b-0", "team-b", gpu=4, node="n0", preemptible=True, priority=1),
        pod("b-1", "team-b", gpu=4, node="n0", preemptible=False, priority=1),
        pod("coredns", "kube-system", gpu=0, cpu="1", node="n0"),
    ]
    snap = snapshot([node("n0"), node("n1"), node("n2")], honest, quotas)
    for obj in tenant:  # as the informer reads them (extender/kube/source.py)
        believed, _ = believed_pod(obj, RECORD_KEYS)
        try:
            parsed = parse_pod(believed)
        except ManifestError:
            continue  # the informer skips the object, naming the field
        snap.upsert_pod(parsed, now=NOW)
        if parsed.node_name is None:
            for effect in restored_effects(snap, parsed):
                apply(snap, effect)

    # Every pod is charged to a quota that admits its namespace (a refused label leaves
    # the pod in its namespace's quota, never in none).
    for key, held in snap.pods.items():
        name = snap.charged_to(held)
        own = snap.tree.quota_in_namespace(held.namespace)
        assert name is not None, key
        assert snap.tree.admits(name, held.namespace) or (name == "default" and own is None), key
    # Nothing the tenant wrote is held as Muster's: no reservation, no mark, no backoff.
    assert snap.reservations == {}
    assert not any(p.soft_evicted for p in snap.pods.values())
    assert snap.book.backoffs == {}
    # Every plan's victims are ones the rules allow.
    for job in sorted({p.job for p in snap.pods.values() if p.namespace == "team-a"}):
        pending = [p for p in snap.members.job_pods(job) if p.node_name is None]
        for member in pending:
            filter_pod(snap, member, ["n0", "n1", "n2"], as_extender=True, now=NOW)
        if not pending:
            continue
        plan = plan_job_preemption(snap, job, NOW)
        if isinstance(plan, PreemptionPlan):
            for victim in plan.victims:
                assert victim.pod.key not in ("team-b/b-1", "kube-system/coredns")
                assert victim_refusal(snap, job, victim.pod) is None
