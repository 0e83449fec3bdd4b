"""The candidate walk's shortcut through the victim index (issue 15, the planner's speed).

The walk used to screen every unit of every quota by its place (node and resources);
it now reads only the index's lists of units asking for a resource some node lacks
(and the lists holding scattered units), merged back in the victim order, and screens
those.
Both must yield exactly the same units in the same order, for any units and any
``lacking`` map: a unit on one node passes the place screen only if its node lacks one
of its resources, so its list is read; a scattered unit passes the screen whatever it
asks for, so its list is always read.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.objects import parse_node, parse_pod
from extender.core.preemption.walk import asking_for, places_wanted, screened
from extender.core.state import ClusterState
from tests.builders import node, pod

NODES = ["n0", "n1", "n2"]
RESOURCES = ["nvidia.com/gpu", "cpu", "memory", "pods"]


@st.composite
def index_and_lacking(draw: st.DrawFn) -> tuple[ClusterState, dict[str, frozenset[str]]]:
    snap = ClusterState()
    for name in NODES:
        snap.upsert_node(parse_node(node(name, gpu=64, cpu="64")))
    for index in range(draw(st.integers(0, 14))):
        members = draw(st.integers(1, 3))  # a gang of several may be spread over nodes
        for member in range(members):
            gpu = draw(st.sampled_from([0, 0, 1, 2]))
            cpu = draw(st.sampled_from([None, "1"]))
            snap.upsert_pod(
                parse_pod(
                    pod(
                        f"p{index}-{member}",
                        draw(st.sampled_from(["team-a", "team-b"])),
                        gpu=gpu,
                        cpu=cpu,
                        node=draw(st.sampled_from(NODES)),
                        group=f"g{index}" if members > 1 else None,
                        preemptible=True,
                        priority=draw(st.sampled_from([0, 5])),
                        started=f"2026-01-01T10:{draw(st.integers(0, 59)):02d}:00Z",
                    )
                )
            )
    lacking = {
        name: frozenset(draw(st.sets(st.sampled_from(RESOURCES), max_size=2)))
        for name in draw(st.sets(st.sampled_from(NODES)))
    }
    return snap, lacking


@settings(max_examples=300, deadline=None)
@given(case=index_and_lacking(), last=st.sampled_from([0, 5, math.inf]))
def test_reading_the_lists_asking_for_what_nodes_lack_yields_what_the_place_screen_does(
    case: tuple[ClusterState, dict[str, frozenset[str]]], last: float
) -> None:
    snap, lacking = case
    victims = snap.victims
    screen = places_wanted(lacking, victims.unit_resources())
    every_unit: list[Any] = list(screened([victims.units()], last, screen))
    lists = asking_for(victims.units_asking(), victims.asks_of_scattered(), lacking)
    through_lists = list(screened(lists, last, screen))
    assert through_lists == every_unit
