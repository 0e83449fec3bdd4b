"""End-to-end benchmark: the real kube-scheduler, alone and with Muster, on the local control plane.

    python -m bench.e2e [--nodes 500] [--pods 2000] [--repeat 3] [--gang 8] [--gang-repeat 3]
                        [--scheduler-qps 1000] [--kubelet] [--modes alone,muster-filter,...]
                        [--packing most-allocated|default] [--gang-mode muster-filter|muster]
                        [--muster-ref REF] [--profile PREFIX] [--json PATH]

Everything runs in one control plane (``localcluster/``: etcd, kube-apiserver and
kube-scheduler built from the pinned modules, the harness's kubelet emulator) with one
cluster shape: ``--nodes`` Ready nodes of 32 cpu, 128Gi and 8 ``nvidia.com/gpu``.
Muster runs as a child process (``python -m extender.cli.main``) from the working tree, or
from ``git archive REF`` with ``--muster-ref`` (the checkout may change under a long run);
the code measured is printed with the results.  A Muster mode written ``MODE@REF`` (e.g.
``muster-filter@HEAD~1``) runs the code at ``REF``: before and after, alternating in one run.

**Throughput** (kube-scheduler alone, then with Muster as its extender in the ``--modes``
configurations, alternating, ``--repeat`` rounds; ``noop-filter+watch`` is the no-op
extender with a ``curl`` watch on every pod beside it, what keeping a cluster view costs
kube-apiserver without an extender's own work). Every trial's kube-scheduler runs the
same profile (``--packing``: NodeResourcesFit MostAllocated, as the sample configuration
recommends, or kube-scheduler's defaults). In every trial:

1. kube-scheduler is stopped, and ``--pods`` pods (100m cpu, 128Mi each, no GPU) are
   created in ``--namespaces`` namespaces, concurrently (``--threads`` client threads).
   Each namespace has an ElasticQuota (min and max well above what its pods ask for), so
   Muster's job-level quota admission runs for every pod;
2. for a Muster trial, a fresh ``muster serve --kubeconfig <admin> --no-leader-elect`` is
   started and waited for (``/readyz``); for an *alone* trial no Muster process runs;
3. kube-scheduler is started (alone, or with an ``extenders`` entry, ``nodeCacheCapable:
   true``: filter and preempt; with prioritize; with prioritize and ``bindVerb``) and a
   watch on the pods records, with this process's monotonic clock, when each pod's ``spec.nodeName``
   first appears.

The figure is the scheduler's sustained rate with a full queue: ``(pods - 1) / (last
binding - first binding)``, the scheduler's point of view. Pods are created while the
scheduler is down so that the client's creation rate (and its CPU, on a small machine)
is not part of it: "first create to last bound" would mix the two. Scheduler start to
last binding (process start, informer sync, then the same work) is reported beside it.
Pods are then deleted (grace 0) and waited for until gone. kube-scheduler's client runs
with ``--scheduler-qps`` (default 1000, burst 2000): the harness's own 200/400 caps
bindings near 250/s, kube-scheduler's default 50/100 near 52/s. The kubelet emulator is
paused during these trials (pods stay bound and Pending, as in upstream scheduler_perf)
unless ``--kubelet``: it writes each pod's status from one thread, so at a high binding
rate its writes lag behind and load the machine after the window, not in it.

CPU seconds used by each component during the window (scheduler start to last binding)
are read from ``/proc``: etcd, kube-apiserver, kube-scheduler, Muster (and its main thread,
the event loop, apart) and this process; "others" is the rest of the machine's busy time
(other users of a shared machine), with the biggest such processes named in the log.
kube-apiserver's request and watch-event counters that grew in the window (its
``/metrics``: requests by verb and resource, watch events and their bytes by kind) are
logged and kept in ``--json``.

**Gang preemption** (after the throughput rounds): Muster (``--gang-mode``: filter and
preempt, or with prioritize too; no ``bindVerb``), ``muster evictor`` and the kubelet
emulator run; team B (quota min 0) borrows every GPU with one preemptible 8-GPU pod per node
(``terminationGracePeriodSeconds: 1``: the emulator removes a pod being deleted once its
grace period has passed); then team A, whose quota's min covers the gang, submits a gang of
``--gang`` non-preemptible 8-GPU pods that may preempt, its size declared with the
min-available annotation. Reported: gang creation to every
gang pod bound, and its parts: creation to the first victim marked
(``scheduling.koordinator.sh/soft-eviction``), first victim marked to the last victim gone
(*victim termination*), last victim gone to the last gang pod bound (kube-scheduler's retry
and binding). Between rounds the gang is deleted and team B refills the freed nodes.

``--profile PREFIX`` adds one Muster trial (the first Muster mode of ``--modes``), not
counted in the medians, with ``py-spy record`` attached to Muster (collapsed stacks in
``PREFIX.txt``; py-spy must be installed), and prints the hottest functions.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import urllib3

import localcluster as lc

ROOT = Path(__file__).resolve().parent.parent

Json = dict[str, Any]
GPU = "nvidia.com/gpu"
BENCH_LABEL = "muster-bench"
TRIAL_LABEL = "muster-bench/trial"
SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"
CAN_PREEMPT = "quota.scheduling.koordinator.sh/can-preempt"
POD_GROUP = "pod-group.scheduling.sigs.k8s.io"
MIN_AVAILABLE = "gang.scheduling.koordinator.sh/min-available"
QUOTA_API = "/apis/scheduling.x-k8s.io/v1alpha1"
NODE_CAPACITY: dict[str, str | int] = {"cpu": "32", "memory": "128Gi", GPU: 8}
CLK_TCK = os.sysconf("SC_CLK_TCK")

#: How Muster is started (``serve`` or ``evictor`` and their flags follow).
MUSTER_COMMAND = [sys.executable, "-m", "extender.cli.main"]

ALONE = "alone"
NOOP_FILTER = "noop-filter"
MUSTER_FILTER = "muster-filter"
MUSTER = "muster"
MUSTER_BIND = "muster+bind"
NOOP_WATCH = "noop-filter+watch"
MODES = (ALONE, NOOP_FILTER, NOOP_WATCH, MUSTER_FILTER, MUSTER, MUSTER_BIND)
NOOP_SOURCE = Path(__file__).resolve().parent / "noop-extender"

#: kube-scheduler's own bin packing (``--packing most-allocated``), as
#: manifests/scheduler-config.yaml configures it.
MOST_ALLOCATED_PROFILE: Json = {
    "schedulerName": "default-scheduler",
    "pluginConfig": [
        {
            "name": "NodeResourcesFit",
            "args": {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "resources": [
                        {"name": GPU, "weight": 5},
                        {"name": "cpu", "weight": 1},
                        {"name": "memory", "weight": 1},
                    ],
                }
            },
        }
    ],
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- CPU accounting


def process_cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of a process (all its threads), or of one of its threads;
    0 if it is gone."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        stat = Path(path).read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def all_processes_cpu() -> dict[int, tuple[str, float]]:
    """Every process's command name and CPU seconds, from /proc."""
    out: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[int(entry.name)] = (comm, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


class CpuMeter:
    """CPU seconds used by named processes, and by everything else, between two reads.

    ``others`` is the machine's busy time not used by the named processes (other users'
    work, kernel time not charged to a process); ``others_top`` names the biggest other
    processes that lived through the interval (short-lived ones are missed)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._start = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        self._machine = machine_busy_seconds()
        self._everyone = all_processes_cpu()

        #: Main threads counted apart (``<name>.main``): Muster's event loop.
        self._main = {
            name: process_cpu_seconds(pid, pid) for name, pid in pids.items() if name == "muster"
        }

    def add(self, name: str, pid: int) -> None:
        """Count a process started after the meter, from its start."""
        self.pids[name] = pid
        self._start[name] = 0.0

    def read(self) -> dict[str, float]:
        used = {
            name: process_cpu_seconds(pid) - self._start[name] for name, pid in self.pids.items()
        }
        busy = machine_busy_seconds() - self._machine
        used["others"] = max(0.0, busy - sum(used.values()))
        for name, start in self._main.items():
            pid = self.pids[name]
            used[f"{name}.main"] = process_cpu_seconds(pid, pid) - start
        return {name: round(value, 2) for name, value in used.items()}

    def others_top(self, count: int = 3) -> list[tuple[str, float]]:
        mine = set(self.pids.values())
        by_name: dict[str, float] = {}
        for pid, (comm, seconds) in all_processes_cpu().items():
            if pid in mine:
                continue
            before = self._everyone.get(pid)
            delta = seconds - before[1] if before is not None and before[0] == comm else seconds
            if delta > 0:
                by_name[comm] = by_name.get(comm, 0.0) + delta
        ranked = sorted(by_name.items(), key=lambda item: -item[1])[:count]
        return [(name, round(value, 2)) for name, value in ranked]


# --------------------------------------------------------------------------- API traffic

_LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_counters(rest: lc.RestClient) -> Counter[str]:
    """kube-apiserver's request and watch-event counters from its ``/metrics``:
    ``"<verb> <resource>[/<subresource>]"`` → requests served (``apiserver_request_total``,
    all codes), ``"events <kind>"`` → watch events sent (``apiserver_watch_events_total``,
    one per event per watcher) and ``"event-bytes <kind>"`` → their encoded size."""
    status, text = rest.get_text("/metrics", timeout=10)
    counters: Counter[str] = Counter()
    if status != 200:
        return counters
    for line in text.splitlines():
        name, _, rest_of_line = line.partition("{")
        if name not in (
            "apiserver_request_total",
            "apiserver_watch_events_total",
            "apiserver_watch_events_sizes_sum",
        ):
            continue
        labels_text, _, value = rest_of_line.rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        if name == "apiserver_request_total":
            sub = labels.get("subresource", "")
            key = f"{labels.get('verb')} {labels.get('resource')}{'/' + sub if sub else ''}"
        elif name == "apiserver_watch_events_total":
            key = f"events {labels.get('kind') or labels.get('resource')}"
        else:
            key = f"event-bytes {labels.get('kind') or labels.get('resource')}"
        counters[key] += float(value)
    return counters


def counter_delta(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """What grew between two reads of :func:`apiserver_counters`, biggest first."""
    grown = {key: int(after[key] - before.get(key, 0)) for key in after}
    return dict(sorted(((k, v) for k, v in grown.items() if v > 0), key=lambda kv: -kv[1]))


# --------------------------------------------------------------------------- pod watch


@dataclasses.dataclass
class PodRecord:
    """What the watch saw of one pod, in ``time.monotonic()`` seconds."""

    seen_at: float
    node: str | None = None
    bound_at: float | None = None
    running_at: float | None = None
    marked_at: float | None = None
    #: First seen with a ``DisruptionTarget=True`` condition, and the component its
    #: message names (``default-scheduler``, ``muster``, ``Eviction API``).
    disrupted_at: float | None = None
    disrupted_by: str | None = None
    deleted_at: float | None = None


class PodWatch:
    """Lists, then watches (``lc.Watcher``), every pod labelled ``muster-bench``; records
    when each pod is first seen bound, Running, marked for soft eviction, and deleted.
    ``wait`` blocks on a predicate over the records, with a deadline."""

    def __init__(self, rest: lc.RestClient) -> None:
        self.records: dict[str, PodRecord] = {}
        self.cond = threading.Condition()
        self._watcher = lc.Watcher(
            rest,
            "/api/v1/pods",
            lambda kind, pod: self._apply(kind, pod, time.monotonic()),
            on_list=self._listed,
            label_selector=BENCH_LABEL,
            page_size=500,
            list_timeout=60,
            watch_seconds=240,
            name="bench-watch",
        )

    @property
    def errors(self) -> list[str]:
        return self._watcher.errors

    def start(self) -> PodWatch:
        self._watcher.start()
        if not self._watcher.synced.wait(60):
            raise TimeoutError(f"pod watch did not sync: {self.errors[-3:]}")
        return self

    def stop(self) -> None:
        self._watcher.stop()

    def _listed(self, pods: list[Json]) -> None:
        """A complete list: every pod in it is there; any other is gone."""
        now = time.monotonic()
        seen = {self._apply("ADDED", pod, now) for pod in pods}
        with self.cond:
            for key, record in self.records.items():
                if key not in seen and record.deleted_at is None:
                    record.deleted_at = now
            self.cond.notify_all()

    def _apply(self, kind: str, pod: Json, now: float) -> str:
        meta = pod.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self.cond:
            record = self.records.get(key)
            if record is None or (record.deleted_at is not None and kind == "ADDED"):
                record = self.records[key] = PodRecord(seen_at=now)
            node = pod.get("spec", {}).get("nodeName")
            if node and record.bound_at is None:
                record.node, record.bound_at = str(node), now
            if pod.get("status", {}).get("phase") == "Running" and record.running_at is None:
                record.running_at = now
            if SOFT_EVICTION in (meta.get("labels") or {}) and record.marked_at is None:
                record.marked_at = now
            if record.disrupted_at is None:
                for condition in pod.get("status", {}).get("conditions") or []:
                    if (
                        condition.get("type") == "DisruptionTarget"
                        and condition.get("status") == "True"
                    ):
                        record.disrupted_at = now
                        record.disrupted_by = str(condition.get("message", "")).split(":")[0]
            if kind == "DELETED" and record.deleted_at is None:
                record.deleted_at = now
            self.cond.notify_all()
        return key

    def keys(self, match: Callable[[str, PodRecord], bool]) -> list[str]:
        with self.cond:
            return [k for k, r in self.records.items() if match(k, r)]

    def wait(
        self,
        keys: Sequence[str],
        done: Callable[[PodRecord], bool],
        *,
        timeout: float,
        what: str,
    ) -> list[PodRecord]:
        """Wait until ``done`` holds for the record of every key; return the records."""

        def all_done() -> bool:
            for key in keys:
                record = self.records.get(key)
                if record is None or not done(record):
                    return False
            return True

        with self.cond:
            if not self.cond.wait_for(all_done, timeout):
                missing = sum(1 for k in keys if (r := self.records.get(k)) is None or not done(r))
                raise TimeoutError(
                    f"{what}: {missing} of {len(keys)} pods still not there after {timeout:.0f}s"
                    f" (watch errors: {self.errors[-3:]})"
                )
            return [self.records[k] for k in keys]


def is_bound(record: PodRecord) -> bool:
    return record.bound_at is not None


def is_running(record: PodRecord) -> bool:
    return record.running_at is not None


def is_gone(record: PodRecord) -> bool:
    return record.deleted_at is not None


# --------------------------------------------------------------------------- API helpers


def pod_body(
    name: str,
    requests: dict[str, str],
    labels: dict[str, str],
    *,
    grace_seconds: int = 0,
) -> Json:
    resources: Json = {"requests": requests}
    if GPU in requests:  # extended resources: limits must equal requests
        resources["limits"] = {GPU: requests[GPU]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {BENCH_LABEL: "e2e", **labels}},
        "spec": {
            "terminationGracePeriodSeconds": grace_seconds,
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}
            ],
        },
    }


def with_retries(action: Callable[[], Json], attempts: int = 6) -> Json:
    """Retry throttling (429), server errors and dropped connections."""
    delay = 0.2
    for attempt in range(attempts):
        try:
            return action()
        except lc.ApiError as exc:
            if (exc.status != 429 and exc.status < 500) or attempt == attempts - 1:
                raise
        except (urllib3.exceptions.HTTPError, OSError):
            if attempt == attempts - 1:
                raise
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def create_pods(
    rest: lc.RestClient, pods: Sequence[tuple[str, Json]], threads: int
) -> tuple[list[str], float]:
    """Create ``(namespace, pod)`` pairs concurrently; return their keys and the seconds
    it took."""

    def create(item: tuple[str, Json]) -> str:
        namespace, body = item
        path = f"/api/v1/namespaces/{namespace}/pods"
        with_retries(lambda: rest.request("POST", path, body))
        return f"{namespace}/{body['metadata']['name']}"

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        keys = list(pool.map(create, pods))
    return keys, time.monotonic() - start


def delete_pods(rest: lc.RestClient, namespaces: Iterable[str], selector: str) -> None:
    """Delete the selected pods of each namespace at once (grace period 0)."""
    query: dict[str, str | int | bool] = {"labelSelector": selector, "gracePeriodSeconds": 0}
    for namespace in namespaces:
        path = f"/api/v1/namespaces/{namespace}/pods"

        def delete(path: str = path) -> Json:
            return rest.request("DELETE", path, query=query, timeout=120)

        with_retries(delete)


def create_quota(rest: lc.RestClient, namespace: str, spec: Json) -> None:
    body = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": namespace, "namespace": namespace},
        "spec": spec,
    }
    rest.request("POST", f"{QUOTA_API}/namespaces/{namespace}/elasticquotas", body)


# --------------------------------------------------------------------------- Muster


def git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def muster_tree_state() -> str:
    """HEAD, and a fingerprint of uncommitted changes to Muster's code (base, extender,
    quota)."""
    diff = git("diff", "HEAD", "--", "base", "extender", "quota")
    head = git("rev-parse", "--short=12", "HEAD")
    if not diff:
        return f"{head} (clean)"
    return (
        f"{head} + uncommitted changes (diff sha1 {hashlib.sha1(diff.encode()).hexdigest()[:12]})"
    )


def export_muster(ref: str, workdir: Path) -> tuple[str, Path]:
    """``git archive`` Muster's code at ``ref`` into the workdir: Muster then runs from
    there, whatever happens to the working tree meanwhile (a shared checkout)."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    target = workdir / f"muster-src-{commit[:12]}"
    target.mkdir(parents=True, exist_ok=True)
    packages = [p for p in ("base", "extender", "quota") if git("ls-tree", commit, p)]
    archive = subprocess.run(
        ["git", "archive", commit, *packages], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return commit, target


class ExtenderProcess(lc.ServiceProcess):
    """An extender as a child process (``MusterServer``, ``NoopExtender``): on a free
    loopback port, started and waited for until its ``/readyz`` answers."""

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} is not running"
        return self.popen.pid

    def metrics(self) -> dict[str, float]:
        return {}


class MusterServer(ExtenderProcess):
    """``muster serve --kubeconfig ... --no-leader-elect``, run from ``cwd`` (the
    checkout, or an exported commit), with ``/debug/`` on (on 127.0.0.1) where that
    code has the flag for it."""

    def __init__(
        self, kubeconfig: Path, log_path: Path, cwd: Path, cpus: set[int] | None = None
    ) -> None:
        main = (cwd / "extender" / "cli" / "main.py").read_text()
        debug = ["--enable-debug-endpoints"] if "--enable-debug-endpoints" in main else []
        if "--records-key-dir" in main:
            debug += ["--records-key-dir", str(lc.records_key_dir(kubeconfig.parent))]
        super().__init__(
            "muster serve",
            lambda port: [
                *MUSTER_COMMAND,
                "serve",
                "--kubeconfig",
                str(kubeconfig),
                "--port",
                str(port),
                "--no-leader-elect",
                *debug,
            ],
            log_path,
            cwd=cwd,
            cpus=cpus,
            ready_timeout=120,
            stop_timeout=15,
        )
        self.start()

    def metrics(self) -> dict[str, float]:
        """Request counts and mean latency (ms) per verb, from ``/metrics``."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for line in text.splitlines():
            for suffix, target in (("_sum", sums), ("_count", counts)):
                prefix = f'muster_extender_request_duration_seconds{suffix}{{verb="'
                if line.startswith(prefix):
                    verb = line[len(prefix) :].split('"', 1)[0]
                    target[verb] = float(line.rsplit(" ", 1)[1])
        out: dict[str, float] = {}
        for verb, count in counts.items():
            if count:
                out[f"{verb}_n"] = count
                out[f"{verb}_mean_ms"] = round(1000 * sums.get(verb, 0.0) / count, 2)
        return out

    def debug(self, path: str) -> Any:
        return httpx.get(f"{self.url}/debug/{path}", timeout=10).json()


class NoopExtender(ExtenderProcess):
    """``bench/noop-extender`` (Go, built into the workdir): passes every node, the floor
    any extender's filter call costs kube-scheduler."""

    def __init__(self, binary: Path, log_path: Path, cpus: set[int] | None = None) -> None:
        super().__init__(
            "the no-op extender",
            lambda port: [str(binary), "-listen", f"127.0.0.1:{port}"],
            log_path,
            cpus=cpus,
            ready_timeout=30,
            stop_timeout=15,
        )
        self.start()

    @staticmethod
    def build(workdir: Path) -> Path:
        binary = workdir / "noop-extender"
        subprocess.run(
            ["go", "build", "-o", str(binary), "."],
            cwd=NOOP_SOURCE,
            check=True,
            env={**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"},
        )
        return binary


class Evictor(lc.ServiceProcess):
    """``muster evictor --kubeconfig ...`` as a child process (nothing to wait for)."""

    def __init__(self, kubeconfig: Path, log_path: Path, cwd: Path) -> None:
        command = [*MUSTER_COMMAND, "evictor", "--kubeconfig", str(kubeconfig)]
        if "--records-key-dir" in (cwd / "extender" / "cli" / "main.py").read_text():
            command += ["--records-key-dir", str(lc.records_key_dir(kubeconfig.parent))]
        super().__init__(
            "muster evictor",
            lambda _port: command,
            log_path,
            cwd=cwd,
            ready_path=None,
            stop_timeout=15,
        )
        self.start()


@contextlib.contextmanager
def py_spy(pid: int, prefix: str) -> Iterator[None]:
    """``py-spy record`` on ``pid`` (collapsed stacks in ``PREFIX.txt``) for the block."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    process = subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--nonblocking",
            "--format",
            "raw",
            "--output",
            f"{prefix}.txt",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)  # let it attach
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        if process.returncode not in (0, -signal.SIGINT):
            log(f"py-spy exited {process.returncode}: {err.decode(errors='replace')[-500:]}")


def _frames(line: str) -> tuple[list[str], int]:
    """A collapsed-stack line: its frames, without line numbers, and its sample count."""
    stack, _, count = line.rpartition(" ")
    frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";") if frame]
    return frames, int(count) if count.isdigit() else 0


#: Innermost frames of a thread that is waiting (py-spy still counts some as active).
WAITING = (
    "EpollSelector.select (selectors.py)",
    "SSLSocket.read (ssl.py)",
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
    "SyncStream.read (httpcore/_backends/sync.py)",
)


def summarize_profile(path: Path, top: int = 25) -> list[str]:
    """The hottest functions of a collapsed-stack file (``py-spy record --format raw``).

    Samples whose innermost frame is a wait (``WAITING``: the event loop's select, an
    informer's blocking read, an idle worker thread) are counted apart; the percentages
    are of the other ("busy") samples: the share in which a function is the innermost
    frame (self) or anywhere on the stack (inclusive)."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = waiting = main = 0
    for line in path.read_text().splitlines():
        frames, count = _frames(line)
        if not frames or not count:
            continue
        total += count
        if frames[-1] in WAITING:
            waiting += count
            continue
        if "_run_module_as_main" in frames[0]:
            main += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    busy = total - waiting
    if not busy:
        return ["(no busy samples)"]
    lines = [
        f"{total} samples, {waiting} waiting ({100 * waiting / total:.1f}%); of the {busy} busy "
        f"ones, {100 * main / busy:.1f}% on the main thread (the event loop)"
    ]
    lines.append("self % of busy   function")
    lines += [f"{100 * n / busy:6.1f}   {f}" for f, n in own.most_common(top)]
    lines.append("incl % of busy   function")
    lines += [f"{100 * n / busy:6.1f}   {f}" for f, n in inclusive.most_common(3 * top)]
    return lines


# --------------------------------------------------------------------------- the benchmark


@dataclasses.dataclass
class Trial:
    mode: str
    round: int
    pods: int
    create_s: float
    first_to_last_s: float
    start_to_last_s: float
    pods_per_s: float
    cpu: dict[str, float]
    others_top: list[tuple[str, float]]
    muster: dict[str, float]
    #: kube-apiserver's counters that grew in the window (:func:`apiserver_counters`).
    api: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class GangRound:
    round: int
    gang: int
    victims: int
    total_s: float
    to_first_mark_s: float
    termination_s: float
    rebind_s: float


class Bench:
    def __init__(
        self, cp: lc.ControlPlane, options: argparse.Namespace, muster_cwds: dict[str, Path]
    ) -> None:
        self.cp = cp
        #: Where Muster runs from: "" → the default code, a ref → that commit's export.
        self.muster_cwds = muster_cwds
        self.muster_cwd = muster_cwds[""]
        self.options = options
        self.rest = lc.RestClient(cp.server, cp.admin_token, cp.ca_file)
        self.watch = PodWatch(lc.RestClient(cp.server, cp.admin_token, cp.ca_file)).start()
        self.namespaces = [f"bench-{i}" for i in range(options.namespaces)]
        self.serial = 0
        self.noop_binary: Path | None = None
        self.muster_cpus = parse_cpus(options.muster_cpus) if options.muster_cpus else None
        if options.packing == "most-allocated":
            cp.scheduler_overrides["profiles"] = [MOST_ALLOCATED_PROFILE]
        if options.scheduler_qps:
            connection = cp.scheduler_configuration()["clientConnection"]
            qps = options.scheduler_qps
            cp.scheduler_overrides["clientConnection"] = {
                **connection,
                "qps": qps,
                "burst": 2 * qps,
            }

    # -- setup

    def create_nodes(self) -> None:
        count = self.options.nodes
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=self.options.threads) as pool:
            list(
                pool.map(
                    lambda i: self.cp.create_node(f"node-{i:04d}", NODE_CAPACITY), range(count)
                )
            )
        log(f"{count} nodes in {time.monotonic() - start:.1f} s")

    def create_quotas(self) -> None:
        per_ns = -(-self.options.pods // len(self.namespaces))
        cpu_min = max(1, per_ns // 5)  # pods ask for 100m: twice what they need
        for namespace in self.namespaces:
            self.cp.create_namespace(namespace)
            create_quota(
                self.rest,
                namespace,
                {
                    "min": {"cpu": str(cpu_min), "memory": f"{per_ns * 256}Mi"},
                    "max": {"cpu": str(cpu_min * 2), "memory": f"{per_ns * 512}Mi"},
                },
            )
        gang_gpus = self.options.gang * 8
        self.cp.create_namespace("team-a")
        create_quota(
            self.rest, "team-a", {"min": {GPU: str(gang_gpus)}, "max": {GPU: str(gang_gpus)}}
        )
        self.cp.create_namespace("team-b")
        all_gpus = self.options.nodes * 8
        create_quota(self.rest, "team-b", {"min": {GPU: "0"}, "max": {GPU: str(all_gpus)}})

    def pids(self, muster: ExtenderProcess | None) -> dict[str, int]:
        pids = {
            name: pid for name, pid in self.cp.pids.items() if name in ("etcd", "kube-apiserver")
        }
        pids["bench"] = os.getpid()
        if isinstance(muster, NoopExtender):
            pids["noop-extender"] = muster.pid
        elif muster is not None:
            pids["muster"] = muster.pid
        return pids

    # -- throughput

    def extender(self, mode: str, muster: ExtenderProcess | None) -> lc.ExtenderConfig | None:
        if muster is None:
            return None
        mode = base_mode(mode)
        if mode == NOOP_WATCH:
            mode = NOOP_FILTER
        return lc.ExtenderConfig(
            muster.url,
            bind=mode == MUSTER_BIND,
            prioritize_verb=None if mode in (MUSTER_FILTER, NOOP_FILTER) else "prioritize",
            preempt_verb=None if mode == NOOP_FILTER else "preempt",
        )

    def throughput_trial(self, mode: str, round_: int, profile: str | None = None) -> Trial:
        self.serial += 1
        trial = f"t{self.serial}"
        self.cp.stop_scheduler()
        bodies = [
            (
                self.namespaces[i % len(self.namespaces)],
                pod_body(f"{trial}-{i}", {"cpu": "100m", "memory": "128Mi"}, {TRIAL_LABEL: trial}),
            )
            for i in range(self.options.pods)
        ]
        keys, create_s = create_pods(self.rest, bodies, self.options.threads)
        self.watch.wait(keys, lambda r: True, timeout=60, what="pods seen by the watch")
        log(f"{trial} {mode}: {len(keys)} pods created in {create_s:.1f} s")
        muster: ExtenderProcess | None = None
        watcher: subprocess.Popen[bytes] | None = None
        if mode in (NOOP_FILTER, NOOP_WATCH):
            if self.noop_binary is None:
                self.noop_binary = NoopExtender.build(self.cp.workdir)
            muster = NoopExtender(
                self.noop_binary, self.cp.workdir / f"noop-{trial}.log", self.muster_cpus
            )
            if mode == NOOP_WATCH:
                watcher = self.pod_watcher()
        elif mode != ALONE:
            muster = MusterServer(
                self.cp.kubeconfig,
                self.cp.workdir / f"muster-{trial}.log",
                self.muster_cwds[ref_of(mode)],
                self.muster_cpus,
            )
        try:
            profiler = (
                py_spy(muster.pid, profile)
                if profile is not None and muster is not None
                else contextlib.nullcontext()
            )
            with profiler:
                api_before = apiserver_counters(self.rest)
                pids = self.pids(muster)
                if watcher is not None:
                    pids["watcher"] = watcher.pid
                meter = CpuMeter(pids)
                started = time.monotonic()
                self.cp.restart_scheduler(self.extender(mode, muster))
                meter.add("kube-scheduler", self.cp.pids["kube-scheduler"])
                records = self.watch.wait(
                    keys,
                    is_bound,
                    timeout=max(300.0, self.options.pods / 5),
                    what=f"{trial} {mode} bindings",
                )
                cpu = meter.read()
                others = meter.others_top()
                api = counter_delta(api_before, apiserver_counters(self.rest))
            stats = muster.metrics() if muster is not None else {}
        finally:
            if muster is not None:
                muster.stop()
            if watcher is not None:
                watcher.terminate()
                watcher.wait(10)
        bound = sorted(r.bound_at for r in records if r.bound_at is not None)
        span = bound[-1] - bound[0]
        result = Trial(
            mode=mode,
            round=round_,
            pods=len(keys),
            create_s=round(create_s, 2),
            first_to_last_s=round(span, 2),
            start_to_last_s=round(bound[-1] - started, 2),
            pods_per_s=round((len(bound) - 1) / span, 1) if span > 0 else float("inf"),
            cpu=cpu,
            others_top=others,
            muster=stats,
            api=api,
        )
        log(
            f"{trial} {mode}: {result.pods_per_s} pods/s (first to last binding "
            f"{result.first_to_last_s} s; scheduler start to last {result.start_to_last_s} s); "
            f"cpu {cpu}; others {others}; muster {stats}"
        )
        log(f"{trial} {mode}: kube-apiserver in the window: {api}")
        self.delete_and_wait(self.namespaces, f"{TRIAL_LABEL}={trial}", keys)
        return result

    def pod_watcher(self) -> subprocess.Popen[bytes]:
        """What an extender that keeps a cluster view costs kube-apiserver, without the
        extender: a watch on every pod, in JSON, from the current version (as Muster's
        informer watches after its list), read by ``curl`` and thrown away."""
        listed = self.rest.request("GET", "/api/v1/pods", query={"limit": 1})
        version = listed["metadata"]["resourceVersion"]
        url = (
            f"{self.cp.server}/api/v1/pods?watch=true&allowWatchBookmarks=true"
            f"&resourceVersion={version}"
        )
        process = subprocess.Popen(
            [
                "curl",
                "-sSN",
                "--cacert",
                str(self.cp.ca_file),
                "-H",
                f"Authorization: Bearer {self.cp.admin_token}",
                "-H",
                "Accept: application/json",
                "-o",
                "/dev/null",
                url,
            ]
        )
        time.sleep(1.0)  # connected and idle before the window
        return process

    def delete_and_wait(
        self, namespaces: Iterable[str], selector: str, keys: Sequence[str]
    ) -> None:
        start = time.monotonic()
        delete_pods(self.rest, namespaces, selector)
        self.watch.wait(keys, is_gone, timeout=300, what="pods to be deleted")
        log(f"{len(keys)} pods deleted in {time.monotonic() - start:.1f} s")

    # -- gang preemption

    def gang_phase(self) -> list[GangRound]:
        options = self.options
        muster = MusterServer(
            self.cp.kubeconfig,
            self.cp.workdir / "muster-gang.log",
            self.muster_cwd,
            self.muster_cpus,
        )
        evictor = Evictor(self.cp.kubeconfig, self.cp.workdir / "evictor.log", self.muster_cwd)
        rounds: list[GangRound] = []
        try:
            self.cp.restart_scheduler(self.extender(self.options.gang_mode, muster))
            filler = 0

            def fill(count: int) -> list[str]:
                nonlocal filler
                bodies = []
                for _ in range(count):
                    labels = {PREEMPTIBLE: "true", TRIAL_LABEL: "filler"}
                    name = f"filler-{filler}"
                    filler += 1
                    requests = {"cpu": "1", GPU: "8"}
                    bodies.append(("team-b", pod_body(name, requests, labels, grace_seconds=1)))
                keys, _ = create_pods(self.rest, bodies, options.threads)
                self.watch.wait(keys, is_running, timeout=600, what="team B's fillers running")
                return keys

            start = time.monotonic()
            fillers = fill(options.nodes)
            log(
                f"team B borrows every GPU: {len(fillers)} pods running in "
                f"{time.monotonic() - start:.1f} s"
            )
            time.sleep(1.0)  # start times have a resolution of one second
            for round_ in range(1, options.gang_repeat + 1):
                name = f"gang-{round_}"
                labels = {
                    POD_GROUP: name,
                    PREEMPTIBLE: "false",
                    CAN_PREEMPT: "true",
                    TRIAL_LABEL: name,
                }
                bodies = [
                    ("team-a", pod_body(f"{name}-{i}", {"cpu": "1", GPU: "8"}, labels))
                    for i in range(options.gang)
                ]
                for _namespace, body in bodies:  # its size declared, as a PodGroup would
                    body["metadata"]["annotations"] = {MIN_AVAILABLE: str(options.gang)}
                t0 = time.monotonic()
                keys, _ = create_pods(self.rest, bodies, options.threads)
                try:
                    records = self.watch.wait(
                        keys, is_bound, timeout=300, what=f"{name}: every gang pod bound"
                    )
                except TimeoutError:
                    log(json.dumps(muster.debug(f"pods/team-a/{name}-0"))[:3000])
                    raise
                with self.watch.cond:
                    victims = [
                        (k, r)
                        for k, r in self.watch.records.items()
                        if k.startswith("team-b/") and r.marked_at is not None and r.marked_at >= t0
                    ]
                victim_keys = [k for k, _ in victims]
                gone = self.watch.wait(victim_keys, is_gone, timeout=60, what="victims gone")
                last_bound = max(r.bound_at for r in records if r.bound_at is not None)
                first_mark = min(r.marked_at for _, r in victims if r.marked_at is not None)
                last_gone = max(r.deleted_at for r in gone if r.deleted_at is not None)
                result = GangRound(
                    round=round_,
                    gang=options.gang,
                    victims=len(victims),
                    total_s=round(last_bound - t0, 2),
                    to_first_mark_s=round(first_mark - t0, 2),
                    termination_s=round(last_gone - first_mark, 2),
                    rebind_s=round(last_bound - last_gone, 2),
                )
                rounds.append(result)
                log(f"{name}: {dataclasses.asdict(result)}")
                self.delete_and_wait(["team-a"], f"{TRIAL_LABEL}={name}", keys)
                fill(len(victims))
                time.sleep(1.0)
            self.delete_and_wait(
                ["team-b"],
                f"{TRIAL_LABEL}=filler",
                self.watch.keys(lambda key, r: key.startswith("team-b/") and not is_gone(r)),
            )
        finally:
            evictor.stop()
            muster.stop()
        return rounds


# --------------------------------------------------------------------------- report


def parse_cpus(text: str) -> set[int]:
    """``"1"``, ``"2,3"`` or ``"2-3"`` → a set of CPU numbers."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def base_mode(mode: str) -> str:
    """``muster-filter@REF`` → ``muster-filter``."""
    return mode.partition("@")[0]


def ref_of(mode: str) -> str:
    """``muster-filter@REF`` → ``REF``; ``""`` for a mode without one."""
    return mode.partition("@")[2]


def median(values: Iterable[float]) -> float:
    return round(statistics.median(list(values)), 2)


def machine_notes() -> dict[str, Any]:
    load1, load5, load15 = os.getloadavg()
    meminfo = Path("/proc/meminfo").read_text().splitlines()[0].split()
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(int(meminfo[1]) / 1024 / 1024, 1),
        "python": platform.python_version(),
        "loadavg": [round(load1, 2), round(load5, 2), round(load15, 2)],
    }


def report(trials: list[Trial], gangs: list[GangRound], notes: dict[str, Any]) -> Json:
    modes = list(dict.fromkeys(t.mode for t in trials))
    summary: Json = {"machine": notes, "throughput": {}, "gang": {}}
    print(f"Machine and code: {json.dumps(notes)}")
    print("\nThroughput (pods/s = (pods - 1) / (first to last binding))")
    print(f"{'mode':<20} {'round':>5} {'pods/s':>8} {'1st→last s':>11} {'start→last s':>13}  cpu s")
    for t in trials:
        print(
            f"{t.mode:<20} {t.round:>5} {t.pods_per_s:>8} {t.first_to_last_s:>11} "
            f"{t.start_to_last_s:>13}  {t.cpu}"
        )
    alone = [t for t in trials if t.mode == ALONE]
    for mode in modes:
        rows = [t for t in trials if t.mode == mode]
        entry: Json = {
            "median_pods_per_s": median(t.pods_per_s for t in rows),
            "median_start_to_last_s": median(t.start_to_last_s for t in rows),
            "runs": [t.pods_per_s for t in rows],
            "median_cpu_s": {
                name: median(t.cpu.get(name, 0.0) for t in rows) for name in rows[0].cpu
            },
        }
        if rows[0].muster:
            entry["median_muster"] = {
                key: median(t.muster.get(key, 0.0) for t in rows) for key in rows[0].muster
            }
        if mode != ALONE and alone:
            entry["ratio_of_medians"] = round(
                entry["median_pods_per_s"] / median(t.pods_per_s for t in alone), 3
            )
            paired = [
                t.pods_per_s / a.pods_per_s
                for t in rows
                for a in alone
                if a.round == t.round and a.pods_per_s > 0
            ]
            if paired:
                entry["median_paired_ratio"] = round(statistics.median(paired), 3)
        summary["throughput"][mode] = entry
        print(f"{mode}: {json.dumps(entry)}")
    if gangs:
        print("\nGang preemption (seconds)")
        for g in gangs:
            print(json.dumps(dataclasses.asdict(g)))
        summary["gang"] = {
            "rounds": [dataclasses.asdict(g) for g in gangs],
            "median_total_s": median(g.total_s for g in gangs),
            "median_to_first_mark_s": median(g.to_first_mark_s for g in gangs),
            "median_termination_s": median(g.termination_s for g in gangs),
            "median_rebind_s": median(g.rebind_s for g in gangs),
        }
        print(json.dumps(summary["gang"]))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of alone/Muster trials")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="throughput trials per round, in this order (default: %(default)s): "
        f"{ALONE}: no extender; {NOOP_FILTER}: a no-op extender in Go (filter only, "
        f"passes every node: the floor for any extender); {NOOP_WATCH}: the same and a "
        f"watch on every pod (curl; what a cluster view costs kube-apiserver); "
        f"{MUSTER_FILTER}: filter and preempt verbs; {MUSTER}: also prioritize; "
        f"{MUSTER_BIND}: also bind. A Muster mode may name a commit to run, "
        f"e.g. {MUSTER_FILTER}@HEAD~2, beside the default code in the same run",
    )
    parser.add_argument(
        "--packing",
        choices=("most-allocated", "default"),
        default="most-allocated",
        help="kube-scheduler's profile in every trial: NodeResourcesFit MostAllocated, as "
        "manifests/scheduler-config.yaml sets it (default), or kube-scheduler's defaults",
    )
    parser.add_argument(
        "--gang-mode",
        choices=(MUSTER_FILTER, MUSTER),
        default=MUSTER_FILTER,
        help="Muster's verbs in the gang phase (default: %(default)s)",
    )
    parser.add_argument("--gang", type=int, default=8, help="pods in the preempting gang")
    parser.add_argument("--gang-repeat", type=int, default=3, help="gang rounds (0: none)")
    parser.add_argument("--threads", type=int, default=8, help="client threads creating pods")
    parser.add_argument(
        "--scheduler-qps",
        type=int,
        default=1000,
        metavar="QPS",
        help="kube-scheduler's clientConnection qps, burst twice that (default: %(default)s, "
        "so the client's rate limiter does not bound bindings; 0 keeps the harness's 200, "
        "burst 400, which caps kube-scheduler alone near 250 pods/s here; kube-scheduler's "
        "own default is 50, burst 100)",
    )
    parser.add_argument(
        "--kubelet",
        action="store_true",
        help="keep the harness's kubelet emulator running during the throughput trials "
        "(bound pods turn Running: one status write per pod, in one thread of this process)",
    )
    parser.add_argument("--profile", metavar="PREFIX", help="one extra Muster trial under py-spy")
    parser.add_argument(
        "--muster-ref",
        metavar="REF",
        help="run Muster's code at this commit (exported with git archive) instead of the "
        "working tree",
    )
    parser.add_argument(
        "--muster-cpus",
        metavar="CPUS",
        help="run muster serve on these CPUs (e.g. 1 or 2-3) and everything else "
        "(etcd, kube-apiserver, kube-scheduler, this process) on the others, in every trial, "
        "as when Muster runs on a node of its own; default: all share all CPUs",
    )
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    parser.add_argument("--workdir", metavar="DIR", help="control-plane workdir (kept)")
    options = parser.parse_args(argv)
    modes = options.modes.split(",")
    if unknown := sorted({base_mode(m) for m in modes} - set(MODES)):
        parser.error(f"--modes: unknown {', '.join(unknown)}; choose from {', '.join(MODES)}")

    notes = machine_notes()
    if options.muster_cpus:
        try:
            muster_cpus = parse_cpus(options.muster_cpus)
        except ValueError:
            parser.error(f"--muster-cpus: expected e.g. 1, 2,3 or 2-3, not {options.muster_cpus}")
        rest = os.sched_getaffinity(0) - muster_cpus
        if not rest or not muster_cpus <= os.sched_getaffinity(0):
            parser.error(
                f"--muster-cpus {options.muster_cpus}: must be some, not all, of "
                f"this machine's CPUs {sorted(os.sched_getaffinity(0))}"
            )
        # Children started from this thread (the control plane) and later threads inherit it.
        os.sched_setaffinity(0, rest)
        notes["cpu_split"] = {"muster": sorted(muster_cpus), "others": sorted(rest)}
    bin_dir = lc.ensure_binaries()
    notes["kubernetes"] = bin_dir.parent.name
    log(f"machine: {notes}")
    workdir = Path(options.workdir or tempfile.mkdtemp(prefix="muster-bench-e2e-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"workdir (logs): {workdir}")
    if options.muster_ref:
        commit, muster_cwd = export_muster(options.muster_ref, workdir)
        notes["muster"] = f"{commit[:12]} (exported)"
    else:
        muster_cwd = ROOT
        notes["muster"] = muster_tree_state()
    log(f"Muster's code: {notes['muster']}")
    muster_cwds = {"": muster_cwd}
    for ref in sorted({ref_of(m) for m in modes} - {""}):
        commit, muster_cwds[ref] = export_muster(ref, workdir)
        notes[f"muster@{ref}"] = f"{commit[:12]} (exported)"
        log(f"Muster's code for @{ref}: {commit[:12]}")
    trials: list[Trial] = []
    gangs: list[GangRound] = []
    began = time.monotonic()
    with lc.ControlPlane(bin_dir=bin_dir, workdir=workdir, keep_workdir=True) as cp:
        bench = Bench(cp, options, muster_cwds)
        try:
            bench.create_nodes()
            bench.create_quotas()
            if not options.kubelet and cp.kubelet is not None:
                cp.kubelet.stop()  # restarted for the gang phase: victims must terminate
            for round_ in range(1, options.repeat + 1):
                for mode in modes:
                    trials.append(bench.throughput_trial(mode, round_))
            if options.profile:
                profiled = next(
                    (m for m in modes if base_mode(m) not in (ALONE, NOOP_FILTER, NOOP_WATCH)),
                    MUSTER,
                )
                extra = bench.throughput_trial(profiled, 0, profile=options.profile)
                log(f"profiled trial (not in the medians): {extra.pods_per_s} pods/s")
            if options.gang_repeat > 0:
                if cp.kubelet is not None and not cp.kubelet.running:
                    cp.kubelet.start()
                gangs = bench.gang_phase()
        finally:
            bench.watch.stop()
    notes["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    notes["wall_s"] = round(time.monotonic() - began, 1)
    if not options.muster_ref and muster_tree_state() != notes["muster"]:
        notes["muster_changed_during_run"] = muster_tree_state()
        log(f"WARNING: Muster's code changed during the run: now {muster_tree_state()}")
    summary = report(trials, gangs, notes)
    summary["options"] = vars(options)
    summary["trials"] = [dataclasses.asdict(t) for t in trials]
    if options.profile:
        path = Path(f"{options.profile}.txt")
        if path.exists():
            print(f"\nMuster under py-spy ({path})")
            print("\n".join(summarize_profile(path)))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
