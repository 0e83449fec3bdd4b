"""The reference evictor's logic against a scripted API client (no API server): it
evicts each marked pod once, with the grace period the mark asks for, retries what a
PodDisruptionBudget refuses, and lets go of pods that are gone."""

from __future__ import annotations

import json
from typing import Any, cast

from base import keys
from extender.kube.client import ApiError, KubeClient
from extender.kube.evictor import Evictor


class ScriptedClient:
    """Answers eviction POSTs from a script of statuses per pod name (200 when out)."""

    def __init__(self, script: dict[str, list[int]]) -> None:
        self.script = script
        self.evictions: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        assert method == "POST" and path.endswith("/eviction"), (method, path)
        name = path.split("/")[-2]
        self.evictions.append((name, body["deleteOptions"]))
        statuses = self.script.get(name) or [200]
        status = statuses.pop(0)
        if status != 200:
            raise ApiError(status, "scripted")
        return {}


def marked(name: str, uid: str, grace: int | None = None) -> dict[str, Any]:
    mark = {"preemptor": "team-a/job", "deleteOptions": {"gracePeriodSeconds": grace}}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-b",
            "uid": uid,
            "labels": {keys.SOFT_EVICTION_KEY: "true"},
            "annotations": {keys.SOFT_EVICTION_KEY: json.dumps(mark)},
        }
    }


def evictor(client: ScriptedClient) -> Evictor:
    made = Evictor(cast(KubeClient, client))
    made.writer.attempts = 1  # the evictor's own retry is what is tested here
    return made


def outcomes(made: Evictor) -> dict[str, float]:
    return {
        sample.labels["outcome"]: sample.value
        for metric in made.registry.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def test_each_marked_pod_is_evicted_once_with_the_mark_s_grace_period() -> None:
    client = ScriptedClient({})
    made = evictor(client)
    made._on_pod("ADDED", marked("b-0", "u0", grace=7))
    made._on_pod("MODIFIED", marked("b-0", "u0", grace=7))  # its next update: not again
    made._on_pod("ADDED", marked("b-1", "u1"))
    assert [name for name, _ in client.evictions] == ["b-0", "b-1"]
    assert client.evictions[0][1] == {"preconditions": {"uid": "u0"}, "gracePeriodSeconds": 7}
    assert "gracePeriodSeconds" not in client.evictions[1][1]
    assert outcomes(made)["evicted"] == 2


def test_a_refused_eviction_is_retried_and_a_gone_pod_forgotten() -> None:
    client = ScriptedClient({"b-0": [429, 429], "b-1": [404]})
    made = evictor(client)
    made._on_pod("ADDED", marked("b-0", "u0"))
    made._on_pod("ADDED", marked("b-1", "u1"))
    assert set(made._waiting) == {"team-b/b-0"}  # refused by its budget: waits
    for obj in list(made._waiting.values()):  # one retry round: refused again
        made._evict(obj)
    for obj in list(made._waiting.values()):  # the budget allows it now
        made._evict(obj)
    assert made._waiting == {}
    counts = outcomes(made)
    assert (counts["refused"], counts["gone"], counts["evicted"]) == (2, 1, 1)
    # a pod deleted meanwhile stops waiting
    client.script["b-2"] = [429]
    made._on_pod("ADDED", marked("b-2", "u2"))
    deleting = marked("b-2", "u2")
    deleting["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    made._on_pod("MODIFIED", deleting)
    assert made._waiting == {}


def test_a_mark_that_is_not_json_evicts_with_the_pod_s_own_grace_period() -> None:
    client = ScriptedClient({})
    made = evictor(client)
    odd = marked("b-0", "u0")
    odd["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = "[" * 50_000
    made._on_pod("ADDED", odd)
    assert client.evictions == [("b-0", {"preconditions": {"uid": "u0"}})]
