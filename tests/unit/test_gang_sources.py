"""Gang membership from what the ecosystem writes (issue 26, item 2): one function, one
order of precedence.

docs/design.md's pod-group keys, extended by the issue's list: Kubernetes' own gang API
(``spec.schedulingGroup.podGroupName`` on v1.36+, ``spec.workloadRef`` on v1.35), the
scheduler-plugins labels, Volcano's annotations, Kueue's plain-pod label (with its
total-count annotation as the size), Koordinator's gang annotation, then the
all-or-nothing label on a controller's pods.  Each expected name below is read off the
pod by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from base.errors import ManifestError
from extender.core import gangsize
from extender.core.jobs import min_available_annotation
from extender.core.objects import parse_pod
from tests.builders import node, pod, snapshot

NATIVE_136 = {"schedulingGroup": {"podGroupName": "native-new"}}
NATIVE_135 = {"workloadRef": {"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "0"}}
XK8S = {"scheduling.x-k8s.io/pod-group": "plugins"}
VOLCANO = {"scheduling.k8s.io/group-name": "volcano"}
VOLCANO_OWN = {"scheduling.volcano.sh/group-name": "volcano-own"}
KUEUE = {"kueue.x-k8s.io/pod-group-name": "kueue"}
KOORDINATOR = {"gang.scheduling.koordinator.sh/name": "koordinator"}


def made(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> Any:
    return parse_pod(pod("p", labels=labels, annotations=annotations, spec=spec))


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "group"),
    [
        ({}, {}, NATIVE_136, "native-new"),
        ({}, {}, NATIVE_135, "wl-workers-0"),
        ({}, {}, {"workloadRef": {"name": "wl", "podGroup": "workers"}}, "wl-workers"),
        (XK8S, {}, {}, "plugins"),
        ({}, VOLCANO, {}, "volcano"),
        ({}, VOLCANO_OWN, {}, "volcano-own"),
        (KUEUE, {}, {}, "kueue"),
        ({}, KOORDINATOR, {}, "koordinator"),
    ],
    ids=["v1.36", "v1.35", "v1.35-no-replica", "x-k8s", "volcano", "volcano-own", "kueue", "koord"],
)
def test_each_source_names_the_group(
    labels: dict[str, str], annotations: dict[str, str], spec: dict[str, Any], group: str
) -> None:
    info = made(labels, annotations, spec)
    assert info.group == group and info.job == f"team-a/{group}"


def test_the_order_of_precedence() -> None:
    # Every source at once, then each removed in turn: the next one in the order names it.
    labels = {**XK8S, **KUEUE}
    annotations = {**VOLCANO, **KOORDINATOR}
    assert made(labels, annotations, NATIVE_136).group == "native-new"
    assert made(labels, annotations, NATIVE_135).group == "wl-workers-0"
    assert made(labels, annotations).group == "plugins"
    assert made(KUEUE, annotations).group == "volcano"
    assert made(KUEUE, KOORDINATOR).group == "kueue"
    assert made({}, KOORDINATOR).group == "koordinator"


@pytest.mark.parametrize(
    "spec",
    [
        {"schedulingGroup": "g"},
        {"schedulingGroup": {"podGroupName": 3}},
        {"workloadRef": ["wl"]},
        {"workloadRef": {"name": ""}},
    ],
)
def test_native_fields_of_an_unexpected_shape_are_ignored_not_fatal(spec: dict[str, Any]) -> None:
    info = made(spec=spec)
    assert info.group is None and info.job == "team-a/p"


def test_kueues_total_count_declares_the_size_after_koordinators_min_available() -> None:
    counted = made(KUEUE, {"kueue.x-k8s.io/pod-group-total-count": "3"})
    assert min_available_annotation(counted) == 3
    both = {
        "kueue.x-k8s.io/pod-group-total-count": "3",
        "gang.scheduling.koordinator.sh/min-available": "2",
    }
    assert min_available_annotation(made(KUEUE, both)) == 2
    snap = snapshot([node("n1")])
    assert gangsize.declared_size(snap, counted) == 3
    with pytest.raises(ManifestError) as error:
        min_available_annotation(made(KUEUE, {"kueue.x-k8s.io/pod-group-total-count": "0"}))
    assert error.value.field == "metadata.annotations.kueue.x-k8s.io/pod-group-total-count"
