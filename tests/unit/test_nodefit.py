"""Node constraints: selectors, required affinity, taints, unschedulable."""

from __future__ import annotations

from typing import Any

import pytest

from base.errors import ManifestError
from extender.core.objects import parse_node, parse_pod
from extender.core.placement.nodefit import static_misfit
from tests.builders import node, pod


def misfit(pod_spec: dict[str, Any], **node_kwargs: Any) -> str | None:
    return static_misfit(parse_pod(pod("p", spec=pod_spec)), parse_node(node("n", **node_kwargs)))


def affinity(
    *expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    }


def test_node_selector() -> None:
    assert misfit({"nodeSelector": {"pool": "a100"}}, labels={"pool": "a100"}) is None
    assert "nodeSelector pool=a100" in str(misfit({"nodeSelector": {"pool": "a100"}}))


@pytest.mark.parametrize(
    ("operator", "values", "labels", "fits"),
    [
        ("In", ["a", "b"], {"k": "b"}, True),
        ("In", ["a"], {"k": "b"}, False),
        ("In", ["a"], {}, False),
        ("NotIn", ["a"], {"k": "b"}, True),
        ("NotIn", ["a"], {}, True),
        ("NotIn", ["a"], {"k": "a"}, False),
        ("Exists", [], {"k": ""}, True),
        ("Exists", [], {}, False),
        ("DoesNotExist", [], {}, True),
        ("DoesNotExist", [], {"k": "x"}, False),
        ("Gt", ["4"], {"k": "5"}, True),
        ("Gt", ["5"], {"k": "5"}, False),
        ("Lt", ["5"], {"k": "4"}, True),
        ("Lt", ["5"], {"k": "5"}, False),
        ("Gt", ["1"], {"k": "many"}, False),
    ],
)
def test_required_node_affinity_operators(
    operator: str, values: list[str], labels: dict[str, str], fits: bool
) -> None:
    spec = affinity({"key": "k", "operator": operator, "values": values})
    assert (misfit(spec, labels=labels) is None) is fits


def test_affinity_terms_are_ored_and_match_fields_name_the_node() -> None:
    spec = affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["n"]}])
    assert misfit(spec) is None
    spec = affinity(fields=[{"key": "metadata.name", "operator": "In", "values": ["other"]}])
    assert misfit(spec) is not None
    two_terms = affinity({"key": "zone", "operator": "In", "values": ["x"]})
    terms = two_terms["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"].append({"matchExpressions": [{"key": "pool", "operator": "Exists"}]})
    assert misfit(two_terms, labels={"pool": "p"}) is None


def test_bad_operator_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError, match="operator"):
        parse_pod(pod("p", spec=affinity({"key": "k", "operator": "Near", "values": []})))
    with pytest.raises(ManifestError, match="integer"):
        parse_pod(pod("p", spec=affinity({"key": "k", "operator": "Gt", "values": ["x"]})))


GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "fits"),
    [
        ([], False),
        ([{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}], True),
        ([{"key": "gpu", "operator": "Equal", "value": "false"}], False),
        ([{"key": "gpu", "operator": "Exists"}], True),
        ([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"operator": "Exists"}], True),
    ],
)
def test_taints_and_tolerations(tolerations: list[dict[str, str]], fits: bool) -> None:
    assert (misfit({"tolerations": tolerations}, taints=[GPU_TAINT]) is None) is fits


def test_no_execute_counts_and_prefer_no_schedule_does_not() -> None:
    assert misfit({}, taints=[GPU_TAINT | {"effect": "NoExecute"}]) is not None
    assert misfit({}, taints=[GPU_TAINT | {"effect": "PreferNoSchedule"}]) is None


def test_unschedulable_node_unless_tolerated() -> None:
    assert misfit({}, unschedulable=True) == "node is unschedulable"
    tolerate = {
        "tolerations": [
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ]
    }
    assert misfit(tolerate, unschedulable=True) is None


def test_unmodelled_constraints_are_recorded() -> None:
    spec = {
        "affinity": {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"x": 1}]}
        },
        "topologySpreadConstraints": [{"maxSkew": 1}],
    }
    assert parse_pod(pod("p", spec=spec)).unsupported == (
        "required podAntiAffinity",
        "topologySpreadConstraints (DoNotSchedule)",
    )
