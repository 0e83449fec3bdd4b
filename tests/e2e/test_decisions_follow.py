"""Muster's decisions keep up with a live kube-scheduler (issue 23).

Three stories, each played on the real control plane through the stock kube-scheduler
on manifests/scheduler-config.yaml (Muster's filter and preempt verbs; kube-scheduler
binds), with the reference evictor consuming the soft-eviction marks and the harness
playing the kubelet.  Pods are created one after another *while kube-scheduler runs*,
not queued all at once, so kube-scheduler may take a pod before Muster's informer has
seen the previous one bind, or before the rest of its gang exists:

A. A burst of preemptible pods never takes its quota past ``max``, and fills it as far
   as whole pods allow.
B. Two preemptors of one quota that may reclaim one 8-GPU pod from a neighbour take
   exactly one: the neighbour keeps its ``min``.
C. A gang with no declared size (no PodGroup, no min-available) is never bound in part:
   with room for two of its three pods none binds (C1); with room for all three, all
   bind (C2).

Each story runs ``MUSTER_DECISIONS_TRIALS`` (default 20) seeded trials on one Muster
process, one namespace and one set of nodes; a trial's seed fixes its sizes, gaps and
orders, and every failing trial is reported with its seed.  What happens to the pods is
observed from a watch on the trial's pods (every version the API server serves, so a
pod bound and gone between two polls is still seen), checked after every change.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Cluster, condition, make_pod, sample_scheduler_config
from muster_process import MusterProcess
from test_muster_extender import GPU, create_quota
from test_preemption_story import SOFT_EVICTION, Teams, muster_with_evictor, tokens

import localcluster as lc

__all__ = ["tokens"]  # the module-scoped fixture, shared with the story tests

pytestmark = pytest.mark.e2e

Json = dict[str, Any]

#: Seeded trials per story (issue 23 asks for 20); lower it locally with the environment.
TRIALS = int(os.environ.get("MUSTER_DECISIONS_TRIALS", "20"))
#: Every pod of a trial carries this label, valued with the trial's id.
TRIAL = "e2e.muster.dev/trial"
POOL = "e2e.muster.dev/pool"
GROUP = "pod-group.scheduling.sigs.k8s.io"
PREEMPTIBLE = {"quota.scheduling.koordinator.sh/preemptible": "true"}
PREEMPTOR = {
    "quota.scheduling.koordinator.sh/preemptible": "false",
    "quota.scheduling.koordinator.sh/can-preempt": "true",
}
#: Muster's default ``gangSettleSeconds``: how long a gang of undeclared size must stop
#: growing before Muster places it.
GANG_SETTLE_SECONDS = 1.0


@pytest.fixture(scope="module")
def muster(
    control_plane: lc.ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    tokens: dict[str, Path],
) -> Iterator[MusterProcess]:
    """One Muster (default arguments) and the evictor for the whole module, with
    kube-scheduler on the sample configuration."""
    workdir = tmp_path_factory.mktemp("muster-decisions")
    with muster_with_evictor(control_plane, workdir, tokens, sample_scheduler_config) as process:
        yield process


# --------------------------------------------------------------------------- helpers


def bound(pod: Json) -> bool:
    """On a node and not finished or being deleted."""
    return bool(
        pod.get("spec", {}).get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    )


def departing(pod: Json) -> bool:
    """Marked for soft eviction, being deleted, or told it will be disrupted."""
    target = condition(pod, "DisruptionTarget") or {}
    return bool(
        SOFT_EVICTION in (pod["metadata"].get("labels") or {})
        or pod["metadata"].get("deletionTimestamp")
        or target.get("status") == "True"
    )


def turned_away(pod: Json) -> bool:
    """kube-scheduler tried the pod and left it unschedulable."""
    cond = condition(pod, "PodScheduled") or {}
    return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"


Observer = Callable[[str, Json, dict[str, Json]], None]


class TrialPods:
    """The pods labelled with one trial's id, in every namespace, from a watch.

    ``pods`` holds the latest version of each pod still there (by ``namespace/name``);
    ``observe(kind, version, pods)`` runs after every change, under ``lock``.
    """

    def __init__(self, rest: lc.RestClient, trial: str, observe: Observer) -> None:
        self.pods: dict[str, Json] = {}
        self.lock = threading.Lock()
        self.last_change = time.monotonic()
        self._observe = observe
        self._watch = lc.Watcher(
            rest, "/api/v1/pods", self._event, label_selector=f"{TRIAL}={trial}", name=trial
        )

    def __enter__(self) -> TrialPods:
        self._watch.start()
        assert self._watch.synced.wait(30), "the trial's watch did not list"
        return self

    def __exit__(self, *exc: object) -> None:
        self._watch.stop()

    def _event(self, kind: str, pod: Json) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        with self.lock:
            if kind == "DELETED":
                self.pods.pop(key, None)
            else:
                self.pods[key] = pod
            self.last_change = time.monotonic()
            self._observe(kind, pod, self.pods)

    def snapshot(self) -> dict[str, Json]:
        with self.lock:
            return dict(self.pods)

    def quiet_for(self, seconds: float) -> bool:
        with self.lock:
            return time.monotonic() - self.last_change >= seconds


def paced(schedule: Sequence[tuple[float, Callable[[], object]]]) -> float:
    """Run each action at its offset (seconds) from now, in order; return when the last
    one ran, as an offset.  The pacing is the scenario (pods arriving while
    kube-scheduler runs), not a wait for anything."""
    start = time.monotonic()
    for offset, action in schedule:
        delay = start + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        action()
    return time.monotonic() - start


def watch_for(seconds: float, violation: Callable[[], str | None]) -> str | None:
    """Poll ``violation`` for ``seconds``; the first one found, else ``None``."""
    try:
        return lc.wait_until(violation, timeout=seconds, interval=0.05, what="a violation")
    except TimeoutError:
        return None


def clear_trial(
    cluster: Cluster, muster: MusterProcess, namespaces: Sequence[str], trial: str
) -> None:
    """Delete the trial's pods at once and wait until they are gone, and gone from
    Muster's view too (so the next trial starts on empty nodes and quotas)."""
    keys: list[str] = []
    for namespace in namespaces:
        path = f"/api/v1/namespaces/{namespace}/pods"
        selector = {"labelSelector": f"{TRIAL}={trial}"}
        listed = cluster.rest.request("GET", path, query=selector)
        keys += [f"{namespace}/{p['metadata']['name']}" for p in listed.get("items", [])]
        cluster.rest.request("DELETE", path, query={**selector, "gracePeriodSeconds": 0})

    def gone() -> bool:
        for namespace in namespaces:
            path = f"/api/v1/namespaces/{namespace}/pods"
            listed = cluster.rest.request("GET", path, query={"labelSelector": f"{TRIAL}={trial}"})
            if listed.get("items"):
                return False
        # Muster forgets a deleted pod (it may still explain past decisions about it).
        return all("job" not in muster.debug(f"pods/{key}") for key in keys)

    lc.wait_until(gone, timeout=30, what=f"trial {trial}'s pods gone")


def report(story: str, lines: list[str], problems: list[str], took: float) -> str:
    summary = "\n".join([f"{story}: {len(problems)} of {TRIALS} trials failed", *lines])
    print(f"{summary}\n{story}: {TRIALS} trials took {took:.1f}s")
    return "\n".join([summary, *problems])


# --------------------------------------------------------------------------- story A


def test_a_burst_never_passes_max(cluster: Cluster, muster: MusterProcess) -> None:
    """Quota ``a`` (min 0) caps cpu; the nodes have plenty, so only the quota limits.
    Preemptible lone pods arrive within about a second, 0-50 ms apart (each gap 0, back to
    back, with a probability drawn per trial): either 5-20 pods of 1 cpu against max 3,
    or 4-12 pods of 5, 1 or 0.5 cpu against max 6 (alternate trials).  The cpu
    of the quota's bound pods never exceeds ``max``; once settled, no pending pod would
    fit in what is left (the quota is filled as far as whole pods allow)."""
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "64", "memory": "256Gi"})
    create_quota(cluster, "a", cluster.namespace, {"min": {"cpu": "0"}, "max": {"cpu": "3"}})
    started = time.monotonic()
    problems: list[str] = []
    peaks: list[str] = []
    for trial in range(TRIALS):
        problem, peak = _burst(cluster, muster, trial)
        peaks.append(peak)
        if problem:
            problems.append(problem)
    message = report("A", [f"peaks: {', '.join(peaks)}"], problems, time.monotonic() - started)
    assert not problems, message


def _milli(cpu: int) -> str:
    return f"{cpu // 1000}" if cpu % 1000 == 0 else f"{cpu}m"


def _set_max(cluster: Cluster, muster: MusterProcess, cpu: int) -> None:
    cluster.rest.request(
        "PATCH",
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.namespace}/elasticquotas/a",
        {"spec": {"max": {"cpu": _milli(cpu)}}},
        content_type="application/merge-patch+json",
    )
    lc.wait_until(
        lambda: muster.debug("quotas").get("a", {}).get("max", {}).get("cpu") == _milli(cpu),
        timeout=15,
        what=f"Muster to see quota a's max {_milli(cpu)} cpu",
    )


def _burst(cluster: Cluster, muster: MusterProcess, trial: int) -> tuple[str | None, str]:
    rng = random.Random(f"burst/{trial}")
    if trial % 2 == 0:
        limit, sizes = 3000, [1000] * rng.randint(5, 20)
    else:
        limit, sizes = 6000, [rng.choice((5000, 1000, 500)) for _ in range(rng.randint(4, 12))]
    _set_max(cluster, muster, limit)
    tid = f"burst-{trial}"
    names = [f"t{trial}-p{i}" for i in range(len(sizes))]
    cpu = {f"{cluster.namespace}/{n}": size for n, size in zip(names, sizes, strict=True)}
    # Gaps of 0-50 ms, back to back (0) with a probability of the trial's own: from pods
    # spread out to one clump, kube-scheduler taking each pod as it comes.
    clumping = rng.random()
    gaps = [0.0 if rng.random() < clumping else rng.uniform(0, 0.05) for _ in names]
    seed = (
        f"trial {trial} (seed 'burst/{trial}'): max {_milli(limit)} cpu, "
        f"pods {[_milli(s) for s in sizes]}, {clumping:.0%} back to back"
    )
    peak: dict[str, Any] = {"cpu": 0, "pods": []}

    def observe(_kind: str, _pod: Json, pods: dict[str, Json]) -> None:
        on = sorted(key for key, pod in pods.items() if bound(pod))
        total = sum(cpu[key] for key in on)
        if total > peak["cpu"]:
            peak.update(cpu=total, pods=on)

    def settled(watch: TrialPods) -> dict[str, Json] | None:
        pods = watch.snapshot()
        if len(pods) < len(names):
            return None
        used = sum(cpu[key] for key, pod in pods.items() if bound(pod))
        waiting = [key for key, pod in pods.items() if not bound(pod)]
        tried = all(turned_away(pods[key]) for key in waiting)
        fits = [key for key in waiting if used + cpu[key] <= limit]
        done = used > limit or (tried and not fits)
        # Quiet for a second: the decisions about this burst are made.
        return pods if done and watch.quiet_for(1.0) else None

    problem = None
    with TrialPods(cluster.rest, tid, observe) as watch:
        offsets = [sum(gaps[: i + 1]) for i in range(len(names))]
        create = partial(cluster.create_pod, labels={**PREEMPTIBLE, TRIAL: tid})
        took = paced(
            [
                (offset, partial(create, name, requests={"cpu": _milli(size)}))
                for offset, name, size in zip(offsets, names, sizes, strict=True)
            ]
        )
        try:
            pods = lc.wait_until(lambda: settled(watch), timeout=20, what="the burst settled")
        except TimeoutError:
            pods = watch.snapshot()
            problem = f"{seed}: not settled in 20s"
        used = sum(cpu[key] for key, pod in pods.items() if bound(pod))
        fits = [key for key, pod in pods.items() if not bound(pod) and used + cpu[key] <= limit]
    with watch.lock:
        worst, worst_pods = peak["cpu"], list(peak["pods"])
    if worst > limit:
        problem = (
            f"{seed}: {_milli(worst)} cpu bound at once, over max {_milli(limit)} "
            f"({len(worst_pods)} pods: {[k.split('/')[1] for k in worst_pods]})"
        )
    elif fits:
        problem = (
            f"{seed}: settled with {_milli(used)} of {_milli(limit)} cpu bound and "
            f"{[k.split('/')[1] for k in fits]} pending, which fit"
        )
    print(f"A {seed}: created in {took:.2f}s, peak {_milli(worst)} cpu, final {_milli(used)}")
    clear_trial(cluster, muster, [cluster.namespace], tid)
    return problem, f"{_milli(worst)}/{_milli(limit)}"


# --------------------------------------------------------------------------- story B


def test_b_two_preemptors_keep_the_neighbours_min(cluster: Cluster, muster: MusterProcess) -> None:
    """Two 8-GPU nodes, both held by quota b's preemptible 8-GPU pods (b: min 8, max 16).
    Quota a (min 16, max 16) gets two 8-GPU pods that may preempt, ``a-hi`` (priority
    50) and ``a-lo`` (priority 5), in a seeded order, 0-50 ms or 0.3-1.5 s apart.
    Reclaiming one b pod keeps b at its min 8; a second would not.  Exactly one b pod is
    ever marked or evicted, b's bound pods that are not leaving never hold fewer than 8
    GPUs, and one a pod binds while the other stays pending.  Which one binds is not
    asserted: Muster's PostFilter plans jobs as their pods come (a pod already planned
    for keeps its reservation), not by priority."""
    for i in range(2):
        cluster.create_node(f"n{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    teams = Teams(
        cluster, {"min": {GPU: "16"}, "max": {GPU: "16"}}, {"min": {GPU: "8"}, "max": {GPU: "16"}}
    )
    started = time.monotonic()
    problems: list[str] = []
    outcomes: list[str] = []
    try:
        classes = {level: _priority_class(cluster, teams.a, value) for level, value in _LEVELS}
        for trial in range(TRIALS):
            problem, outcome = _reclaim(cluster, muster, teams, classes, trial)
            outcomes.append(outcome)
            if problem:
                problems.append(problem)
    finally:
        teams.cleanup()
    message = report(
        "B", [f"outcomes: {'; '.join(outcomes)}"], problems, time.monotonic() - started
    )
    assert not problems, message


_LEVELS = (("hi", 50), ("lo", 5))


def _priority_class(cluster: Cluster, namespace: str, value: int) -> str:
    """A PriorityClass of this value, once the Priority admission plugin knows it (a gated
    probe pod naming it is accepted, then deleted)."""
    name = f"muster-e2e-{value}"
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    try:
        cluster.rest.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
    except lc.ApiError as error:
        if error.status != 409:
            raise
    probe = f"probe-{value}"

    def accepted() -> bool:
        try:
            cluster.rest.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                make_pod(probe, priority_class=name, scheduling_gates=["e2e.muster.dev/probe"]),
            )
        except lc.ApiError as error:
            if error.status == 403 and "PriorityClass" in str(error):
                return False
            raise
        return True

    lc.wait_until(accepted, timeout=30, what=f"PriorityClass {name} admitted")
    cluster.rest.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/{probe}", query={"gracePeriodSeconds": 0}
    )
    return name


@dataclass
class _Reclaim:
    b_names: list[str]
    victims: set[str] = field(default_factory=set)
    b_low: int = 16
    a_bound: set[str] = field(default_factory=set)


def _reclaim(
    cluster: Cluster, muster: MusterProcess, teams: Teams, classes: dict[str, str], trial: int
) -> tuple[str | None, str]:
    rng = random.Random(f"reclaim/{trial}")
    tid = f"reclaim-{trial}"
    first = rng.choice(("hi", "lo"))
    close = rng.random() < 0.5
    gap = rng.uniform(0, 0.05) if close else rng.uniform(0.3, 1.5)
    order = [first, "lo" if first == "hi" else "hi"]
    seed = f"trial {trial} (seed 'reclaim/{trial}'): a-{order[0]}, a-{order[1]} {gap:.2f}s later"
    b_names = [f"t{trial}-b-{i}" for i in range(2)]
    a_names = {level: f"t{trial}-a-{level}" for level in ("hi", "lo")}
    for name in b_names:
        teams.create(
            teams.b, name, requests={"cpu": "4", GPU: 8}, labels={**PREEMPTIBLE, TRIAL: tid}
        )
    for name in b_names:
        teams.wait(teams.b, name, "Running")
    seen = _Reclaim(b_names)

    def observe(kind: str, pod: Json, pods: dict[str, Json]) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if namespace == teams.b and (kind == "DELETED" or departing(pod)):
            seen.victims.add(name)
        if namespace == teams.a and bound(pod):
            seen.a_bound.add(name)
        staying = [p for p in pods.values() if p["metadata"]["namespace"] == teams.b and bound(p)]
        gpus = sum(8 for p in staying if not departing(p))
        seen.b_low = min(seen.b_low, gpus)

    def create(level: str) -> None:
        teams.create(
            teams.a,
            a_names[level],
            requests={"cpu": "4", GPU: 8},
            labels={**PREEMPTOR, TRIAL: tid},
            priority_class=classes[level],
        )

    problem = None
    with TrialPods(cluster.rest, tid, observe) as watch:
        paced([(0.0, partial(create, order[0])), (gap, partial(create, order[1]))])

        def one_a_running() -> str | None:
            for name in a_names.values():
                pod = watch.snapshot().get(f"{teams.a}/{name}") or {}
                if pod.get("status", {}).get("phase") == "Running":
                    return name
            return None

        try:
            lc.wait_until(one_a_running, timeout=45, what="an a pod running")
        except TimeoutError:
            problem = f"{seed}: no a pod running after 45s"

        # A second plan would come within moments of the second pod's rejection.
        def second_victim() -> str | None:
            with watch.lock:
                return "second victim" if len(seen.victims) > 1 else None

        watch_for(2.0, second_victim)
        pods = watch.snapshot()
    with watch.lock:
        victims, low, a_bound = sorted(seen.victims), seen.b_low, sorted(seen.a_bound)
    pending = [
        name
        for name in a_names.values()
        if not (pods.get(f"{teams.a}/{name}") or {}).get("spec", {}).get("nodeName")
    ]
    winner = ",".join(n.split("-a-")[1] for n in a_bound) or "none"
    outcome = f"{trial}: {'/'.join(order)} {gap:.2f}s apart: {winner} bound, {len(victims)} victims"
    if len(victims) != 1 or low < 8 or len(a_bound) != 1 or len(pending) != 1:
        problem = (
            f"{seed}: b victims {victims} (b kept {low} GPUs at the least, min 8); "
            f"a bound {a_bound}, pending {pending}" + (f"; {problem}" if problem else "")
        )
    print(f"B {seed}: {outcome}")
    clear_trial(cluster, muster, [teams.a, teams.b], tid)
    return problem, outcome


# --------------------------------------------------------------------------- story C


def test_c_a_gang_of_undeclared_size_is_never_bound_in_part(
    cluster: Cluster, muster: MusterProcess
) -> None:
    """Gangs of three 8-GPU pods sharing a pod-group label, with no PodGroup and no
    min-available annotation, their pods created one by one 0-0.3 s apart.  Each trial
    plays both variants at once, on node pools of their own (a nodeSelector):

    C1: pool c1 is one 16-GPU node, room for two: no pod of the gang ever binds (watched
        until 2 s past the settle time, ``gangSettleSeconds`` = 1 s after its last pod).
    C2: pool c2 is a 16-GPU and an 8-GPU node, room for all three: all three bind
        within 15 s of the last one's creation.
    """
    cluster.create_node("c1", {"cpu": "32", "memory": "128Gi", GPU: 16}, labels={POOL: "c1"})
    cluster.create_node("c2-0", {"cpu": "32", "memory": "128Gi", GPU: 16}, labels={POOL: "c2"})
    cluster.create_node("c2-1", {"cpu": "32", "memory": "128Gi", GPU: 8}, labels={POOL: "c2"})
    started = time.monotonic()
    problems: list[str] = []
    partial: list[str] = []
    binds: list[float] = []
    for trial in range(TRIALS):
        problem, c1_bound, c2_took = _gangs(cluster, muster, trial)
        if c1_bound:
            partial.append(f"{trial}:{c1_bound}/3")
        if c2_took is not None:
            binds.append(c2_took)
        if problem:
            problems.append(problem)
    lines = [
        f"C1: {len(partial)} of {TRIALS} trials bound part of the gang ({', '.join(partial)})",
        f"C2: {len(binds)} of {TRIALS} trials bound whole; seconds from the last pod: "
        + (f"median {statistics.median(binds):.2f}, max {max(binds):.2f}" if binds else "(none)"),
    ]
    message = report("C", lines, problems, time.monotonic() - started)
    assert not problems, message


def _gangs(
    cluster: Cluster, muster: MusterProcess, trial: int
) -> tuple[str | None, int, float | None]:
    rng = random.Random(f"gang/{trial}")
    tid = f"gang-{trial}"
    schedule: list[tuple[float, str, str]] = []
    for variant in ("c1", "c2"):
        offset = rng.uniform(0, 0.3)
        for i in range(3):
            schedule.append((offset, variant, f"t{trial}-{variant}-{i}"))
            offset += rng.uniform(0, 0.3)
    schedule.sort()
    seed = f"trial {trial} (seed 'gang/{trial}'): created " + ", ".join(
        f"{name}@{offset:.2f}s" for offset, _variant, name in schedule
    )
    last = {variant: max(o for o, v, _n in schedule if v == variant) for variant in ("c1", "c2")}
    c1_ever: set[str] = set()
    c2_bound: set[str] = set()

    def observe(_kind: str, pod: Json, _pods: dict[str, Json]) -> None:
        name = pod["metadata"]["name"]
        if pod.get("spec", {}).get("nodeName"):
            (c1_ever if "-c1-" in name else c2_bound).add(name)

    def create(variant: str, name: str) -> None:
        cluster.create_pod(
            name,
            requests={"cpu": "1", GPU: 8},
            labels={GROUP: f"t{trial}-{variant}", TRIAL: tid},
            node_selector={POOL: variant},
        )

    problems: list[str] = []
    c2_took: float | None = None
    with TrialPods(cluster.rest, tid, observe) as watch:
        t0 = time.monotonic()
        paced([(offset, partial(create, variant, name)) for offset, variant, name in schedule])

        def c1_partial() -> str | None:
            with watch.lock:
                return "C1 bound" if c1_ever else None

        window = t0 + last["c1"] + GANG_SETTLE_SECONDS + 2.0 - time.monotonic()
        watch_for(max(window, 0.0), c1_partial)

        def c2_whole() -> float | None:
            with watch.lock:
                whole = len(c2_bound) == 3
            return time.monotonic() - (t0 + last["c2"]) if whole else None

        try:
            c2_took = lc.wait_until(
                c2_whole,
                timeout=max(t0 + last["c2"] + 15.0 - time.monotonic(), 0.1),
                what="C2 bound whole",
            )
        except TimeoutError:
            with watch.lock:
                problems.append(f"C2 not bound whole 15s after its last pod ({sorted(c2_bound)})")
    with watch.lock:
        c1_bound = sorted(c1_ever)
    if c1_bound:
        problems.insert(0, f"C1 bound in part: {c1_bound} of 3")
    print(f"C {seed}: C1 bound {len(c1_bound)}, C2 bound whole after {c2_took}")
    clear_trial(cluster, muster, [cluster.namespace], tid)
    problem = f"{seed}: {'; '.join(problems)}" if problems else None
    return problem, len(c1_bound), c2_took
