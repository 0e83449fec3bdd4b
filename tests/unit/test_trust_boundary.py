"""The trust boundary (docs/security.md): what a tenant writes on its own pods is input.

A tenant may create and label pods in its own namespace and nothing else.  Each test
plays one attack through the core (or the adapter that reads the cluster) and derives
what Muster must do from the threat model by hand: quota membership is the admins', a
record is believed only if Muster signed it, numbers read back are bounded, and a victim
is checked against the rules before it is marked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from base import keys
from base.times import format_time
from extender.core.config import MusterArgs
from extender.core.filter.verb import filter_pod
from extender.core.objects import parse_pod
from extender.core.preemption.planner import PreemptionPlan, plan_job_preemption
from extender.core.preemption.policy import victim_refusal
from extender.core.records import RecordKeys, believed_pod, forged_records
from extender.core.reservations import backoff_on, record_problems, restored_effects
from extender.core.state import Reservation
from extender.kube.client import KubeClient
from extender.kube.recordkeys import KeyDirectory, RecordKeyError, read_key_directory
from extender.kube.source import KubeSource
from quota.tree import QuotaMembershipError, QuotaTree, parse_elastic_quota
from tests.builders import RECORD_KEYS, node, pod, quota, record_keys, signed, snapshot

GPU = "nvidia.com/gpu"
NOW = 1_767_261_600.0  # 2026-01-01T10:00:00Z, the builders' T0


def teams(**annotations_of: dict[str, str]) -> list[dict[str, Any]]:
    """Two teams, each with a quota in its own namespace: min 4 GPUs, max 8."""
    return [
        quota(name, min={GPU: "4"}, max={GPU: "8"}, annotations=annotations_of.get(name))
        for name in ("team-a", "team-b")
    ]


# ---- quota membership ---------------------------------------------------------------


def test_a_label_naming_another_team_s_quota_is_refused_naming_the_label_and_quota() -> None:
    # team-a's pod names team-b: team-b's quota lives in namespace team-b and lists no
    # other namespace, so it does not admit team-a; the pod is refused, never moved.
    snap = snapshot([node("n0")], [], teams())
    intruder = parse_pod(pod("p", "team-a", gpu=2, quota="team-b", preemptible=False))
    snap.upsert_pod(intruder)
    with pytest.raises(QuotaMembershipError) as refused:
        snap.quota_of(intruder)
    assert f"label {keys.QUOTA_NAME_LABEL}=team-b" in refused.value.reason
    assert "does not admit namespace team-a" in refused.value.reason
    result = filter_pod(snap, intruder, ["n0"], as_extender=True, now=NOW)
    assert result.quota_failures == (refused.value.reason,)
    assert result.passed == []
    # Nothing is charged to team-b (nor to team-a).
    assert not any(snap.ledger["team-b"].used.values())
    assert not any(snap.ledger["team-a"].used.values())


def test_relabelling_a_running_pod_keeps_it_in_its_namespace_s_quota() -> None:
    # team-a (min = max = 8) runs 8 GPUs; its next 8-GPU pod is refused (8 + 8 > 8).  The
    # tenant relabels the running pod with team-b's quota, then with one that does not
    # exist: each time the pod stays counted in team-a (a refused label never takes a pod
    # out of accounting), so the next pod is still refused.
    quotas = [quota("team-a", min={GPU: "8"}, max={GPU: "8"}), quota("team-b", max={GPU: "8"})]
    running = pod("a-0", "team-a", gpu=8, node="n0", preemptible=False)
    nxt = pod("a-1", "team-a", gpu=8, preemptible=False)
    snap = snapshot([node("n0"), node("n1")], [running, nxt], quotas)
    for label in ("team-b", "nope"):
        relabelled = pod("a-0", "team-a", gpu=8, node="n0", preemptible=False, quota=label)
        snap.upsert_pod(parse_pod(relabelled))
        assert snap.ledger["team-a"].used[GPU] == 8000
        assert not any(snap.ledger["team-b"].used.values())
        result = filter_pod(snap, snap.pods["team-a/a-1"], ["n1"], as_extender=True, now=NOW)
        assert result.quota_failures and result.passed == []


def test_a_namespace_with_a_quota_never_falls_to_the_default_quota() -> None:
    snap = snapshot([node("n0")], [], teams())
    for named in ("default", None):
        candidate = parse_pod(pod(f"p-{named}", "team-a", gpu=1, quota=named))
        if named is None:  # no label: its namespace's quota
            assert snap.quota_of(candidate) == "team-a"
        else:
            with pytest.raises(QuotaMembershipError, match="its namespace's quota is team-a"):
                snap.quota_of(candidate)
    # A namespace without a quota is the default quota's, with the label or without.
    for named in ("default", None):
        assert snap.quota_of(parse_pod(pod("q", "elsewhere", quota=named))) == "default"


def test_an_admin_may_admit_more_namespaces_by_annotation_or_by_the_quota_tree() -> None:
    listing = {keys.QUOTA_NAMESPACES_ANNOTATION: json.dumps(["team-a"])}
    shared = quota("shared", namespace="platform", max={GPU: "8"}, annotations=listing)
    # The parent "org" lists team-a: its subtree is team-a's to divide.  It lives in
    # namespace "quotas", with every other quota object: that grants "quotas" nothing.
    org = quota("org", namespace="quotas", is_parent=True, max={GPU: "16"}, annotations=listing)
    child = quota("research", namespace="research", parent="org", max={GPU: "8"})
    own = quota("team-a", max={GPU: "4"})  # declared in namespace team-a
    tree = QuotaTree(parse_elastic_quota(q) for q in (shared, org, child, own))
    assert tree.quota_for("team-a", "shared") == "shared"  # listed by the annotation
    assert tree.quota_for("team-a", "research") == "research"  # under a parent listing it
    # The namespace's own quota is the one declared in it, though "shared" lists it and
    # sorts first: listing a namespace admits it, it does not take it over.
    assert tree.quota_for("team-a", None) == "team-a"
    for namespace, named in (("team-b", "shared"), ("quotas", "research")):
        with pytest.raises(QuotaMembershipError):
            tree.quota_for(namespace, named)
    with pytest.raises(QuotaMembershipError, match="which does not exist"):
        tree.quota_for("team-a", "nope")


@pytest.mark.parametrize("text", ["team-a", '["team-a", 3]', "{}", '[""]'])
def test_a_namespaces_annotation_that_is_not_a_list_of_names_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=keys.QUOTA_NAMESPACES_ANNOTATION):
        parse_elastic_quota(quota("q", annotations={keys.QUOTA_NAMESPACES_ANNOTATION: text}))


def test_the_default_quota_never_preempts_and_has_the_ceiling_the_arguments_give() -> None:
    # Two namespaces without quotas: both pods are the implicit default quota's.  With
    # defaultQuotaPreemption Never (the default), the high-priority one evicts nobody.
    args = MusterArgs.model_validate(
        {"disableDefaultTriggerPreemption": False, "disableDefaultPreemptible": False}
    )
    running = pod("low", "x", gpu=8, node="n0", priority=0)
    waiting = pod("high", "y", gpu=8, priority=100)
    refusal = plan_job_preemption(
        snapshot([node("n0")], [running, waiting], [], args), "y/high", NOW
    )
    assert not isinstance(refusal, PreemptionPlan)
    opened = args.model_copy(update={"default_quota_preemption": "LowerPriority"})
    plan = plan_job_preemption(
        snapshot([node("n0")], [running, waiting], [], opened), "y/high", NOW
    )
    assert isinstance(plan, PreemptionPlan)
    assert [v.pod.key for v in plan.victims] == ["x/low"]
    # defaultQuotaMax: 4 GPUs in all for namespaces without a quota; 8 asked is refused.
    capped = MusterArgs.model_validate({"defaultQuotaMax": {GPU: 4}})
    snap = snapshot([node("n0")], [waiting], [], capped)
    result = filter_pod(snap, snap.pods["y/high"], ["n0"], as_extender=True, now=NOW)
    assert result.quota_failures and "default" in result.quota_failures[0]


# ---- Muster's records -----------------------------------------------------------------


def test_a_record_is_believed_only_with_its_signature_for_that_pod_and_that_record() -> None:
    payload = {"job": "team-a/j", "node": "n0", "created": NOW, "expires": NOW + 300}
    written = RECORD_KEYS.sign(keys.RESERVATION_ANNOTATION, "uid-1", payload)
    assert RECORD_KEYS.verify(keys.RESERVATION_ANNOTATION, "uid-1", written)
    # another pod, another record, a changed field, no signature, an unknown key: no
    assert not RECORD_KEYS.verify(keys.RESERVATION_ANNOTATION, "uid-2", written)
    assert not RECORD_KEYS.verify(keys.GANG_BACKOFF_ANNOTATION, "uid-1", written)
    assert not RECORD_KEYS.verify(keys.RESERVATION_ANNOTATION, "uid-1", written | {"node": "n1"})
    assert not RECORD_KEYS.verify(keys.RESERVATION_ANNOTATION, "uid-1", payload)
    other = RecordKeys((("other", b"o" * 32),))
    assert not other.verify(keys.RESERVATION_ANNOTATION, "uid-1", written)


def test_keys_rotate_without_losing_records(tmp_path: Path) -> None:
    (tmp_path / "key-1").write_text("a" * 32)
    old = read_key_directory(tmp_path)
    record = old.sign(keys.GANG_BACKOFF_ANNOTATION, "u", {"attempts": 1})
    (tmp_path / "key-2").write_text("b" * 32)
    both = read_key_directory(tmp_path)
    assert both.verify(keys.GANG_BACKOFF_ANNOTATION, "u", record)  # old records still hold
    assert both.sign(keys.GANG_BACKOFF_ANNOTATION, "u", {})["signature"].startswith("key-2:")
    (tmp_path / "key-1").unlink()
    assert not read_key_directory(tmp_path).verify(keys.GANG_BACKOFF_ANNOTATION, "u", record)


def test_a_key_directory_muster_cannot_sign_with_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    with pytest.raises(RecordKeyError, match="no key files"):
        read_key_directory(tmp_path)
    (tmp_path / "short").write_text("x")
    with pytest.raises(RecordKeyError, match="short: a record key needs at least 16 bytes"):
        read_key_directory(tmp_path)
    with pytest.raises(RecordKeyError, match="missing"):
        read_key_directory(tmp_path / "missing")


def test_a_key_directory_is_re_read_and_a_new_key_signs_only_once_settled(
    tmp_path: Path,
) -> None:
    (tmp_path / "key-1").write_text("a" * 32)
    now = [0.0]
    directory = KeyDirectory(tmp_path, recheck_seconds=5, settle_seconds=180, clock=lambda: now[0])
    first = directory()
    (tmp_path / "key-2").write_text("b" * 32)
    assert directory() is first  # not re-checked before recheck_seconds
    now[0] = 10.0
    keys_now = directory()
    assert [name for name, _ in keys_now.keys] == ["key-1", "key-2"]
    # key-2 was first seen at 10 s: it verifies at once, but key-1 signs until 190 s, so
    # no replica whose copy of the Secret lags signs what the others cannot check yet.
    signed_by_2 = RecordKeys((("key-2", b"b" * 32),)).sign(keys.GANG_BACKOFF_ANNOTATION, "u", {})
    assert keys_now.verify(keys.GANG_BACKOFF_ANNOTATION, "u", signed_by_2)
    assert keys_now.sign(keys.GANG_BACKOFF_ANNOTATION, "u", {})["signature"].startswith("key-1:")
    now[0] = 190.0
    assert directory().sign(keys.GANG_BACKOFF_ANNOTATION, "u", {})["signature"].startswith("key-2:")


def forged_reservation(victims: list[str], expires: float = NOW + 10**9) -> dict[str, Any]:
    """A tenant's pending pod with a hand-written reservation naming ``victims``."""
    made = pod("sneaky", "team-a", gpu=8, preemptible=False)
    made["metadata"]["uid"] = "uid-sneaky"
    note = {"job": "team-a/sneaky", "node": "n0", "created": NOW, "expires": expires}
    made["metadata"]["annotations"][keys.RESERVATION_ANNOTATION] = json.dumps(
        note | {"victims": victims}
    )
    return made


def test_the_informer_ignores_a_forged_reservation_and_counts_it_once() -> None:
    source = KubeSource(cast(KubeClient, object()), MusterArgs(), record_keys=record_keys)
    source._on_pod("ADDED", pod("quota-holder", "team-a"))
    source._on_pod("ADDED", forged_reservation(["kube-system/coredns", "team-b/b-0"]))
    source._on_pod("MODIFIED", forged_reservation(["kube-system/coredns"]))
    with source.exclusive() as snap:
        assert snap.reservations == {}
        assert keys.RESERVATION_ANNOTATION not in snap.pods["team-a/sneaky"].annotations
    samples = [s for m in source.forged_records.collect() for s in m.samples]
    assert [(s.labels["record"], s.value) for s in samples if s.name.endswith("_total")] == [
        (keys.RESERVATION_ANNOTATION, 1.0)
    ]


def test_a_self_applied_soft_eviction_label_gives_a_pod_no_standing() -> None:
    own = pod("b-0", "team-b", gpu=8, node="n0", preemptible=True)
    own["metadata"]["labels"][keys.SOFT_EVICTION_KEY] = "true"
    believed, forged = believed_pod(own, RECORD_KEYS)
    assert forged == (keys.SOFT_EVICTION_KEY,)
    assert keys.SOFT_EVICTION_KEY not in believed["metadata"]["labels"]
    assert not parse_pod(believed).departing
    # Muster's own mark on it is believed.
    mark = {"initiator": "muster", "preemptor": "team-a/j", "timestamp": format_time(NOW)}
    own["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = signed(
        keys.SOFT_EVICTION_KEY, "team-b/b-0", mark
    )
    assert forged_records(own, RECORD_KEYS) == ()
    assert parse_pod(believed_pod(own, RECORD_KEYS)[0]).departing


# ---- numbers read back are bounded ---------------------------------------------------


def test_a_huge_backoff_attempt_count_is_not_a_record_muster_writes() -> None:
    made = parse_pod(
        pod(
            "g-0",
            "team-a",
            annotations={
                keys.GANG_BACKOFF_ANNOTATION: json.dumps(
                    {"attempts": 10**18, "givenUp": NOW, "until": NOW + 60}
                )
            },
        )
    )
    assert backoff_on(made) is None
    assert [field for field, _ in record_problems(made)] == [
        f"metadata.annotations.{keys.GANG_BACKOFF_ANNOTATION}"
    ]


def test_expiries_read_back_are_capped_by_the_configured_timeouts() -> None:
    # A reservation ending in 31 years: held for at most reservationTimeoutSeconds (300)
    # plus the terminating extensions' limit (600), from its creation.
    snap = snapshot([node("n0")], [], teams())
    pending = parse_pod(forged_reservation([], expires=NOW + 10**9))
    snap.upsert_pod(pending)
    (effect,) = restored_effects(snap, pending)
    reservation = cast(Reservation, effect.reservation)  # type: ignore[attr-defined]
    assert reservation.expires == NOW + 300 + 600
    # Past year 9999 it is no record of Muster's at all, and formatting never fails.
    beyond = parse_pod(forged_reservation([], expires=1e300))
    assert restored_effects(snap, beyond) == []
    assert record_problems(beyond)[0][0].endswith(keys.RESERVATION_ANNOTATION)
    assert format_time(1e300) == "9999-12-31T23:59:59Z"
    assert format_time(float("nan")) == "1970-01-01T00:00:00Z"


def test_simulate_refuses_a_malformed_record_naming_the_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from extender.cli.main import main

    dump = tmp_path / "dump.json"
    items = [node("n0"), forged_reservation([], expires=1e300)]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["simulate", str(dump), "--output", "json"]) == 2
    error = capsys.readouterr().err
    assert "Pod team-a/sneaky" in error and keys.RESERVATION_ANNOTATION in error
    assert "Traceback" not in error


def test_simulate_with_the_keys_drops_forged_records_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from extender.cli.main import main

    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "key-1").write_text("k" * 32)
    dump = tmp_path / "dump.json"
    victim = pod("b-0", "team-b", gpu=8, node="n0", preemptible=True)
    items = [node("n0"), *teams(), victim, forged_reservation(["team-b/b-0"], NOW + 60)]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["simulate", str(dump), "--output", "json"]) == 0  # believed as written
    believed = json.loads(capsys.readouterr().out)
    code = main(
        ["simulate", str(dump), "--output", "json", "--records-key-dir", str(tmp_path / "keys")]
    )
    assert code == 0
    out = capsys.readouterr()
    assert f"team-a/sneaky: ignoring {keys.RESERVATION_ANNOTATION}" in out.err
    # Without the forged reservation team-a's 8-GPU non-preemptible job exceeds its min
    # of 4: it is refused, and nothing is evicted; believed, the reservation held n0.
    checked = json.loads(out.out)
    assert checked["evictions"] == [] and "team-a/sneaky" in checked["unschedulable"]
    assert believed != checked


# ---- every victim is checked again before it is marked ------------------------------


def test_a_victim_a_record_names_is_checked_against_the_rules() -> None:
    b_running = pod("b-0", "team-b", gpu=4, node="n0", preemptible=True, priority=5)
    b_guarded = pod("b-1", "team-b", gpu=4, node="n0", preemptible=False, priority=5)
    a_own = pod("a-0", "team-a", gpu=4, node="n1", preemptible=True, priority=50)
    a_wait = pod("j", "team-a", gpu=8, can_preempt=True, priority=10)
    snap = snapshot([node("n0"), node("n1")], [b_running, b_guarded, a_own, a_wait], teams())
    pods = snap.pods
    # another quota's preemptible pod: reclaimWithinCohort Any allows it
    assert victim_refusal(snap, "team-a/j", pods["team-b/b-0"]) is None
    # a non-preemptible pod, whatever names it
    assert "not preemptible" in (victim_refusal(snap, "team-a/j", pods["team-b/b-1"]) or "")
    # its own quota's pod of higher priority: withinQuota LowerPriority refuses it
    assert "policy" in (victim_refusal(snap, "team-a/j", pods["team-a/a-0"]) or "")
    # a job that may not preempt (no can-preempt label, disableDefaultTriggerPreemption)
    snap.upsert_pod(parse_pod(pod("k", "team-a", gpu=8)))
    assert "may not trigger" in (victim_refusal(snap, "team-a/k", pods["team-b/b-0"]) or "")
    # a job with no pending pods
    assert "no pending pods" in (victim_refusal(snap, "team-a/gone", pods["team-b/b-0"]) or "")


def test_a_live_dump_with_tenants_lies_loads_with_notes_for_kubectl_muster(
    tmp_path: Path,
) -> None:
    # kubectl muster reads a dump of the live cluster, whose labels and annotations
    # tenants wrote: a quota label naming nothing, and a reservation Muster could not
    # have written, are notes there (one tenant must not stop everyone's what-if), while
    # simulate over an admin's own files refuses them, naming the field.
    from extender.cli.errors import InputError
    from extender.cli.manifests import load_manifests

    odd = pod("odd", "team-a", gpu=1, quota="no-such-quota")
    dump = tmp_path / "dump.json"
    items = [node("n0"), *teams(), odd, forged_reservation([], expires=1e300)]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    with pytest.raises(InputError, match=keys.QUOTA_NAME_LABEL):
        load_manifests([dump], MusterArgs())
    loaded = load_manifests([dump], MusterArgs(), tenant_input=True)
    assert any("team-a/odd: unknown quota 'no-such-quota'" in n for n in loaded.notes)
    assert any(f"team-a/sneaky: ignoring {keys.RESERVATION_ANNOTATION}" in n for n in loaded.notes)
    sneaky = loaded.state.pods["team-a/sneaky"]
    assert keys.RESERVATION_ANNOTATION not in sneaky.annotations
    assert loaded.state.reservations == {}
    assert loaded.state.charged_to(loaded.state.pods["team-a/odd"]) == "team-a"


def test_a_running_borrower_relabelled_non_preemptible_is_still_reclaimed() -> None:
    # team-a (min 0) borrows n0's 8 GPUs with a preemptible pod; team-b (min 8) wants them
    # back.  The tenant relabels its running pod preemptible: "false".  It was admitted
    # preemptible (checked against max, not min): it stays preemptible, so team-b's
    # reclaim still evicts it.  Believed, team-a's non-preemptible use would be 8 > min 0,
    # a protection no quota granted, and the reclaim would be refused.
    quotas = [quota("team-a", max={GPU: "8"}), quota("team-b", min={GPU: "8"}, max={GPU: "8"})]
    borrower = pod("borrow", "team-a", gpu=8, node="n0", preemptible=True)
    wanting = pod("b-0", "team-b", gpu=8, preemptible=False, can_preempt=True)
    snap = snapshot([node("n0")], [borrower, wanting], quotas)
    snap.upsert_pod(parse_pod(pod("borrow", "team-a", gpu=8, node="n0", preemptible=False)))
    assert snap.preemptible(snap.pods["team-a/borrow"])
    plan = plan_job_preemption(snap, "team-b/b-0", NOW)
    assert isinstance(plan, PreemptionPlan), plan
    assert [v.pod.key for v in plan.victims] == ["team-a/borrow"]
    # A pending pod is admitted as its label says now: relabelled before it is counted, it
    # is checked against min as any non-preemptible pod.
    snap.upsert_pod(parse_pod(pod("p", "team-a", gpu=1, preemptible=True)))
    snap.upsert_pod(parse_pod(pod("p", "team-a", gpu=1, preemptible=False)))
    assert not snap.preemptible(snap.pods["team-a/p"])


def test_a_gang_with_one_pod_naming_a_refused_quota_is_refused_whole_without_error() -> None:
    # Found by the property test: the filter of a gang's honest pod read the quota of the
    # job's first unplaced pod, whose label names a quota that does not exist, and raised.
    # A job is admitted whole or not at all: one refused label refuses it, with the reason.
    snap = snapshot([node("n0")], [], teams())
    for name, label in (("t-0", "nope"), ("t-1", None), ("t-2", "team-b")):
        snap.upsert_pod(parse_pod(pod(name, "team-a", gpu=1, group="g", quota=label)))
    for name in ("t-0", "t-1", "t-2"):
        result = filter_pod(snap, snap.pods[f"team-a/{name}"], ["n0"], as_extender=True, now=NOW)
        assert result.passed == [], name
        assert result.quota_failures, name
    refusal = plan_job_preemption(snap, "team-a/g", NOW)
    assert not isinstance(refusal, PreemptionPlan)
