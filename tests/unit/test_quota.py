"""Quota tree, policies and the job-level admission formulas at their boundaries."""

from __future__ import annotations

import pytest

from base import keys
from base.errors import ManifestError
from quota.accounting import QuotaLedger
from quota.admission import job_admission_failures, min_violations, would_borrow
from quota.tree import (
    QuotaTree,
    QuotaTreeError,
    ReclaimWithinCohort,
    StopPolicy,
    WithinQuota,
    parse_elastic_quota,
)
from tests.builders import quota

GPU = "nvidia.com/gpu"


def g(n: int) -> dict[str, int]:
    return {GPU: n * 1000}


def ledger_for(*objects: dict[str, object]) -> QuotaLedger:
    return QuotaLedger(QuotaTree(parse_elastic_quota(o) for o in objects))


def test_min_greater_than_max_is_rejected_naming_the_field() -> None:
    with pytest.raises(
        ManifestError, match=r"spec.min.nvidia.com/gpu: min 9 is greater than max 8"
    ):
        parse_elastic_quota(quota("a", min={GPU: "9"}, max={GPU: "8"}))


def test_policies_parse_with_defaults_and_reject_unknown_values() -> None:
    spec = parse_elastic_quota(quota("a"))
    assert spec.policy.within_quota is WithinQuota.LOWER_PRIORITY
    assert spec.policy.reclaim_within_cohort is ReclaimWithinCohort.ANY
    spec = parse_elastic_quota(
        quota(
            "a",
            annotations={
                keys.STOP_POLICY_ANNOTATION: "Hold",
                keys.MAX_PRIORITY_THRESHOLD_ANNOTATION: "10",
            },
        )
    )
    assert spec.policy.stop_policy is StopPolicy.HOLD
    assert spec.policy.max_priority_threshold == 10
    with pytest.raises(ManifestError, match=r"within-quota.*'Sometimes' is not one of"):
        parse_elastic_quota(quota("a", annotations={keys.WITHIN_QUOTA_ANNOTATION: "Sometimes"}))


def test_tree_errors() -> None:
    with pytest.raises(QuotaTreeError, match="unknown quota 'nope'"):
        QuotaTree([parse_elastic_quota(quota("a", parent="nope"))])
    with pytest.raises(QuotaTreeError, match="cycle"):
        QuotaTree(
            [
                parse_elastic_quota(quota("a", parent="b")),
                parse_elastic_quota(quota("b", parent="a")),
            ]
        )
    with pytest.raises(QuotaTreeError, match="duplicate"):
        QuotaTree([parse_elastic_quota(quota("a")), parse_elastic_quota(quota("a"))])


def test_non_preemptible_job_bounded_by_min_and_max() -> None:
    ledger = ledger_for(quota("a", min={GPU: "16"}, max={GPU: "32"}))
    ledger.charge("a", g(8), preemptible=False, used=True)
    assert job_admission_failures(ledger, "a", g(8), {}) == []  # 8 + 8 = min: allowed
    assert job_admission_failures(ledger, "a", g(9), {}) == [
        "quota a: non-preemptible nvidia.com/gpu 17 would exceed min 16"
    ]
    # used (not only non-preemptible) counts against max
    ledger.charge("a", g(16), preemptible=True, used=True)
    assert job_admission_failures(ledger, "a", g(8), {}) == []  # 24 + 8 = max
    ledger.charge("a", g(1), preemptible=True, used=True)
    assert job_admission_failures(ledger, "a", g(8), {}) == [
        "quota a: nvidia.com/gpu 33 would exceed max 32"
    ]


def test_preemptible_job_keeps_room_for_non_preemptible_requests() -> None:
    ledger = ledger_for(quota("a", min={GPU: "16"}, max={GPU: "32"}))
    # 12 GPUs of non-preemptible pods exist (4 running, 8 pending): 12 of min stay held.
    ledger.charge("a", g(4), preemptible=False, used=True)
    ledger.charge("a", g(8), preemptible=False, used=False)
    ledger.charge("a", g(10), preemptible=True, used=True)
    # min(16, 12) + 10 + 10 = 32: allowed; one more is not.
    assert job_admission_failures(ledger, "a", {}, g(10)) == []
    failures = job_admission_failures(ledger, "a", {}, g(11))
    assert len(failures) == 1 and "preemptible nvidia.com/gpu 33" in failures[0]
    # held room is capped by min: 30 GPUs of non-preemptible requests hold only 16.
    ledger.charge("a", g(18), preemptible=False, used=False)
    assert job_admission_failures(ledger, "a", {}, g(6)) == []  # 16 + 10 + 6 = 32


def test_unlisted_resources_are_not_limited() -> None:
    ledger = ledger_for(quota("a", min={GPU: "16"}, max={GPU: "32"}))
    assert job_admission_failures(ledger, "a", {"cpu": 10**9}, {"memory": 10**12}) == []


def test_ancestor_max_bounds_the_subtree() -> None:
    ledger = ledger_for(
        quota("root", max={GPU: "16"}, is_parent=True),
        quota("a", max={GPU: "16"}, parent="root"),
        quota("b", max={GPU: "16"}, parent="root"),
    )
    ledger.charge("b", g(8), preemptible=True, used=True)
    assert job_admission_failures(ledger, "a", {}, g(8)) == []
    assert job_admission_failures(ledger, "a", {}, g(9)) == [
        "parent quota root: nvidia.com/gpu 17 would exceed max 16"
    ]


def test_stop_policy_admits_nothing() -> None:
    ledger = ledger_for(quota("a", annotations={keys.STOP_POLICY_ANNOTATION: "HoldAndDrain"}))
    assert job_admission_failures(ledger, "a", {}, g(1)) == [
        "quota a is stopped (stop-policy HoldAndDrain)"
    ]


def test_borrowing_and_min_protection() -> None:
    ledger = ledger_for(quota("a", min={GPU: "16"}, max={GPU: "32"}))
    ledger.charge("a", g(8), preemptible=True, used=True)
    assert not would_borrow(ledger, "a", g(8), {GPU})
    assert would_borrow(ledger, "a", g(9), {GPU})
    ledger.charge("a", g(16), preemptible=True, used=True)  # uses 24 of min 16
    contested = {GPU}
    # (in the contested resources, in any resource)
    assert min_violations(ledger, ["a"], g(8), contested) == (None, None)  # back to exactly min
    below = "quota a would fall below its min nvidia.com/gpu 16 (uses 24)"
    assert min_violations(ledger, ["a"], g(9), contested) == (below, below)
    # GPUs not contested: a guarantee broken only in a resource the job does not ask for.
    assert min_violations(ledger, ["a"], g(9), {"cpu"}) == (None, below)


def test_a_min_the_quota_does_not_use_does_not_protect_its_borrowed_pods() -> None:
    # 16 CPUs guaranteed but 4 used, beside 4 borrowed GPUs: its GPU pods may go.
    ledger = ledger_for(quota("b", min={"cpu": "16", GPU: "0"}, max={GPU: "8"}))
    ledger.charge("b", {"cpu": 4000, GPU: 4000}, preemptible=True, used=True)
    assert min_violations(ledger, ["b"], {"cpu": 1000, GPU: 1000}, {"cpu", GPU}) == (None, None)
