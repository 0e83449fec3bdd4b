"""The reference evictor's logic against a scripted API client (no API server): it
evicts each marked pod once, with the grace period the mark asks for, retries what a
PodDisruptionBudget refuses, and lets go of pods that are gone."""

from __future__ import annotations

import json
from typing import Any, cast

from base import keys
from extender.kube.client import ApiError, KubeClient
from extender.kube.evictor import Evictor
from tests.builders import record_keys, signed


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
            "annotations": {keys.SOFT_EVICTION_KEY: signed(keys.SOFT_EVICTION_KEY, uid, mark)},
        }
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def evictor(client: ScriptedClient, clock: Clock | None = None) -> Evictor:
    # No jitter (0.5 → a factor of exactly 1): the backoff is 5, 10, 20, ... seconds.
    return Evictor(
        cast(KubeClient, client),
        clock=clock or Clock(),
        jitter=lambda: 0.5,
        record_keys=record_keys,
    )


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


def test_a_mark_muster_did_not_write_is_never_evicted() -> None:
    client = ScriptedClient({})
    made = evictor(client)
    # A tenant's own label, with no mark: the label alone is no reason to evict.
    bare = marked("b-0", "u0")
    del bare["metadata"]["annotations"][keys.SOFT_EVICTION_KEY]
    made._on_pod("ADDED", bare)
    # A mark written by hand (no signature), and Muster's mark copied from pod u1 to u2:
    # the signature covers the pod's UID, so the copy fails the check.
    forged = marked("b-1", "u1")
    mark = json.loads(forged["metadata"]["annotations"][keys.SOFT_EVICTION_KEY])
    del mark["signature"]
    forged["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = json.dumps(mark)
    made._on_pod("ADDED", forged)
    copied = marked("b-2", "u2")
    copied["metadata"]["annotations"] = marked("b-1", "u1")["metadata"]["annotations"]
    made._on_pod("ADDED", copied)
    made._on_pod("MODIFIED", copied)  # counted once per pod
    assert client.evictions == []
    assert outcomes(made) == {"forged": 3}
    made._on_pod("ADDED", marked("b-3", "u3"))  # Muster's own: evicted
    assert [name for name, _ in client.evictions] == ["b-3"]


def test_a_refused_eviction_is_retried_after_its_backoff_and_a_gone_pod_forgotten() -> None:
    clock = Clock()
    client = ScriptedClient({"b-0": [429, 429], "b-1": [404]})
    made = evictor(client, clock)
    made._on_pod("ADDED", marked("b-0", "u0"))
    made._on_pod("ADDED", marked("b-1", "u1"))
    assert set(made._waiting) == {"team-b/b-0"}  # refused by its budget: waits
    assert made.retry_due() == 0  # its backoff (5 s) is not over
    clock.now += 5
    assert made.retry_due() == 1  # refused again: now it waits 10 s
    assert made._waiting["team-b/b-0"].next_try == clock.now + 10
    assert made.oldest_refused_age() == 5.0
    clock.now += 10
    assert made.retry_due() == 1  # the budget allows it now
    assert made._waiting == {} and made.oldest_refused_age() == 0.0
    counts = outcomes(made)
    assert (counts["refused"], counts["gone"], counts["evicted"]) == (2, 1, 1)
    # a pod deleted meanwhile stops waiting
    client.script["b-2"] = [429]
    made._on_pod("ADDED", marked("b-2", "u2"))
    deleting = marked("b-2", "u2")
    deleting["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    made._on_pod("MODIFIED", deleting)
    assert made._waiting == {}


def test_the_backoff_is_capped_and_jittered() -> None:
    clock = Clock()
    client = ScriptedClient({"b-0": [503] * 10})
    made = Evictor(  # +20%
        cast(KubeClient, client), clock=clock, jitter=lambda: 1.0, record_keys=record_keys
    )
    made._on_pod("ADDED", marked("b-0", "u0"))
    delays = []
    for _ in range(6):
        refused = made._waiting["team-b/b-0"]
        delays.append(round(refused.next_try - clock.now, 6))
        clock.now = refused.next_try
        made.retry_due()
    # 5, 10, 20, 40, 60 (the cap), 60 seconds, each +20%.
    assert delays == [6.0, 12.0, 24.0, 48.0, 72.0, 72.0]
    assert outcomes(made)["failed"] == 7


def test_a_pod_another_thread_is_evicting_is_not_evicted_twice() -> None:
    client = ScriptedClient({})
    made = evictor(client)
    made._claimed.add("u0")  # the retry thread is evicting it right now
    made._on_pod("MODIFIED", marked("b-0", "u0"))
    assert client.evictions == []
    made._claimed.clear()
    made._on_pod("MODIFIED", marked("b-0", "u0"))
    made._on_pod("MODIFIED", marked("b-0", "u0"))
    assert len(client.evictions) == 1


def test_a_mark_that_is_not_json_is_not_muster_s_and_does_not_stop_the_evictor() -> None:
    client = ScriptedClient({})
    made = evictor(client)
    odd = marked("b-0", "u0")
    odd["metadata"]["annotations"][keys.SOFT_EVICTION_KEY] = "[" * 50_000  # deep nesting
    made._on_pod("ADDED", odd)
    made._on_pod("ADDED", marked("b-1", "u1"))
    assert [name for name, _ in client.evictions] == ["b-1"]
    assert outcomes(made) == {"forged": 1, "evicted": 1}


def test_a_mark_taken_back_while_its_eviction_is_refused_is_not_retried() -> None:
    # Muster takes b-0's mark back (the label watch says DELETED) while the evictor's
    # call for it is on its way and comes back refused (429): it must not wait for a
    # retry, nor be evicted later without its mark.  Found in review.
    client = ScriptedClient({"b-0": [429]})
    made = evictor(client)
    unmarked = marked("b-0", "u0")
    original = client.request

    def request(method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        made._on_pod("DELETED", unmarked)  # the unmark lands mid-call
        return original(method, path, body, **kwargs)

    client.request = request  # type: ignore[method-assign]
    made._on_pod("ADDED", marked("b-0", "u0"))
    assert made._waiting == {}
    # And a retry round that listed a pod before its mark was taken back skips it.
    client.request = original  # type: ignore[method-assign]
    client.script["b-1"] = [429]
    made._on_pod("ADDED", marked("b-1", "u1"))
    listed = made._waiting["team-b/b-1"].obj
    made._on_pod("DELETED", marked("b-1", "u1"))
    made._evict(listed, retry=True)
    assert [name for name, _ in client.evictions] == ["b-0", "b-1"]
