"""The object parsers on arbitrary JSON: a ManifestError naming a field, never anything else."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from base.errors import ManifestError
from extender.core.objects import parse_node, parse_pod
from quota.tree import parse_elastic_quota
from tests.builders import JSON_LEAVES, json_values

JSON = json_values(width=3, leaves=12)
FIELDS = st.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        "labels",
        "annotations",
        "name",
        "namespace",
        "containers",
        "initContainers",
        "resources",
        "requests",
        "limits",
        "overhead",
        "nodeSelector",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        "matchExpressions",
        "matchFields",
        "key",
        "operator",
        "values",
        "tolerations",
        "taints",
        "priority",
        "priorityClassName",
        "preemptionPolicy",
        "nodeName",
        "allocatable",
        "capacity",
        "min",
        "max",
        "startTime",
        "creationTimestamp",
        "ports",
        "topologySpreadConstraints",
        "volumes",
        "unschedulable",
        "effect",
    ]
)
SHAPED = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(FIELDS, children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(FIELDS, SHAPED | JSON, max_size=4))
def test_parsers_raise_only_manifest_errors(obj: dict[str, Any]) -> None:
    for parse in (parse_pod, parse_node, parse_elastic_quota):
        try:
            parse(obj)
        except ManifestError as error:
            assert error.field
