"""The live initial list: ``muster serve --kubeconfig`` against a kube-apiserver holding many
pods, from process start to ``/readyz``, and its memory.

    python -m bench.live_list [--nodes 5000] [--pods 50000] [--threads 8] [--repeat 2]
                              [--refs REF,...] [--json PATH] [--keep | --kubeconfig PATH]
                              [--profile PREFIX]

One local control plane (``localcluster``), kube-scheduler and the kubelet emulator
stopped.  ``--nodes`` nodes (8 GPUs, 64 CPUs) are registered, then ``--pods`` pods of
``bench.memory``'s shape (its quotas and priority classes too) are created already bound
(``spec.nodeName`` set: no scheduling), concurrently from ``--threads`` client threads;
the creation rates are printed as they go.  Then, ``--repeat`` times: ``muster serve
--kubeconfig <admin> --no-leader-elect`` is started and ``/readyz`` polled every 50 ms
(Muster is ready once its informers have listed nodes, pods, quotas and the rest);
*ready* is process start to the first 200 (Muster may take ``READY_TIMEOUT``), with
Muster's CPU seconds (user + system, all threads) to then; ``VmRSS`` and ``VmHWM`` are
read one second later.  With ``--refs``, each round runs Muster's code at each commit in
turn (exported with ``git archive``), on the same cluster.  Each round first lists the
pods alone (:func:`list_floor`: the API server's part and the decoding, the floor of any
informer's list on this machine).

``--profile PREFIX`` adds, after the rounds, one start of each tree's Muster (not counted in
the medians) with ``py-spy record`` attached from the moment its process appears to ready:
collapsed stacks in ``PREFIX-TREE.txt``, a flame graph of the GIL holder's stacks in
``PREFIX-TREE.svg`` (:func:`bench.support.profiling.py_spy`), and its hottest functions
printed.

``--keep`` keeps the plane up after the runs (creating 150,000 pods takes ten minutes
here) and prints its kubeconfig; ``--kubeconfig`` measures against such a plane, without
setting anything up.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import localcluster as lc
from bench.memory import PRIORITIES, TEAMS, pod_object, proc_status, ready_figures
from bench.support.cluster_setup import GPU, create_pods, create_quota, with_retries
from bench.support.meters import process_cpu_seconds
from bench.support.processes import MusterServer
from bench.support.profiling import py_spy, summarize_profile
from bench.support.run_notes import ROOT, export_muster, log, machine_notes, muster_tree_state
from extender.kube.client import KubeClient
from extender.kube.informer import Informer

Json = dict[str, Any]
#: Muster's informers' page size (``Informer.page_size``), which the floor list uses too.
PAGE_SIZE = Informer.page_size
#: How long Muster may take to ready (at 150,000 pods on 2 shared cores: minutes).
READY_TIMEOUT = 900.0


def setup(cp: lc.ControlPlane, nodes: int, threads: int) -> None:
    rest = cp.rest
    for name, value in PRIORITIES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        with_retries(
            lambda body=body: rest.request(
                "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body
            )
        )
    gpus = nodes * 8
    for team in range(TEAMS):
        namespace = f"team-{team}"
        cp.create_namespace(namespace)
        share = gpus // 2 if team == 0 else gpus // (2 * TEAMS)
        create_quota(rest, namespace, {"min": {GPU: str(share)}, "max": {GPU: str(gpus)}})
    started = time.monotonic()
    capacity: dict[str, str | int] = {"cpu": "64", "memory": "512Gi", GPU: 8}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(
            pool.map(
                lambda i: cp.create_node(f"node-{i:05d}", capacity, labels={"pool": "gpu"}),
                range(nodes),
            )
        )
    log(f"{nodes} nodes in {time.monotonic() - started:.1f} s")


def create_bound_pods(cp: lc.ControlPlane, nodes: int, pods: int, threads: int) -> float:
    """Create the pods in batches, printing the rate; returns pods per second overall."""
    rng = random.Random(1)
    gang = [0]
    started = time.monotonic()
    batch = 5000
    for first in range(0, pods, batch):
        bodies = []
        for index in range(first, min(pods, first + batch)):
            obj = pod_object(rng, index, index % nodes, index // nodes, gang)
            metadata = obj["metadata"]
            for field in ("uid", "resourceVersion", "creationTimestamp", "generateName"):
                metadata.pop(field, None)
            metadata["labels"]["muster-bench"] = "live"
            obj.pop("status")
            bodies.append((metadata["namespace"], obj))
        t0 = time.monotonic()
        create_pods(cp.rest, bodies, threads)
        elapsed = time.monotonic() - t0
        log(f"pods {first + len(bodies)}/{pods}: {len(bodies) / elapsed:.0f} pods/s")
    return pods / (time.monotonic() - started)


def list_floor(kubeconfig: Path, page_size: int = PAGE_SIZE) -> dict[str, float]:
    """The API server's part of the list, alone: every pod listed in pages of
    ``page_size`` (Muster's) with Muster's API client, each page decoded, nothing parsed
    or kept; seconds, and pods listed."""
    client = KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        started = time.monotonic()
        count = 0
        params = {"limit": str(page_size)}
        while True:
            page = client.request("GET", "/api/v1/pods", params=params)
            count += len(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            params = {"limit": str(page_size), "continue": token}
        return {"list_s": round(time.monotonic() - started, 2), "listed": count}
    finally:
        client.close()


def _muster_child() -> int | None:
    """The pid of this process's ``muster serve`` child, if it has started."""
    me = str(os.getpid())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] != me:
                continue
            if b"extender.cli.main" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, IndexError):
            continue
    return None


@contextlib.contextmanager
def profiling_muster(prefix: str | None) -> Iterator[None]:
    """py-spy on the ``muster serve`` this block starts, from when its process appears
    until the block ends (nothing without a prefix)."""
    if prefix is None:
        yield
        return
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            pid = _muster_child()
            if pid is not None:
                with py_spy(pid, prefix):
                    stop.wait()
                return
            time.sleep(0.01)

    thread = threading.Thread(target=run, name="py-spy attacher", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(90)


def measure(
    kubeconfig: Path, workdir: Path, cwd: Path, profile: str | None = None
) -> dict[str, float]:
    started = time.monotonic()
    with profiling_muster(profile):
        muster = MusterServer(
            kubeconfig, workdir / "muster-live.log", cwd, ready_timeout=READY_TIMEOUT
        )
        ready = time.monotonic() - started
    try:
        cpu = process_cpu_seconds(muster.pid)  # Muster's own work, whatever else runs
        time.sleep(1.0)
        memory = proc_status(muster.pid)
    finally:
        muster.stop()
    return {**ready_figures(ready, memory), "cpu_s": round(cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--refs", help="commits to compare (default: the working tree)")
    parser.add_argument("--json", metavar="PATH", help="write the summary here")
    parser.add_argument(
        "--profile", metavar="PREFIX", help="one more start of each tree's Muster under py-spy"
    )
    parser.add_argument(
        "--keep", action="store_true", help="after the runs, keep the plane up (SIGTERM stops it)"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="measure against a plane already holding the pods (a --keep run's): no setup",
    )
    options = parser.parse_args(argv)
    notes = machine_notes()
    workdir = Path(tempfile.mkdtemp(prefix="muster-bench-live-"))
    trees = {"tree": ROOT}
    notes["muster"] = {"tree": muster_tree_state()}
    if options.refs:
        trees, notes["muster"] = {}, {}
        for ref in options.refs.split(","):
            commit, trees[ref] = export_muster(ref, workdir)
            notes["muster"][ref] = commit[:12]
    log(f"machine: {notes}; workdir: {workdir}")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    floors: list[dict[str, float]] = []
    rate = 0.0

    def rounds(kubeconfig: Path) -> None:
        for attempt in range(options.repeat):
            floors.append(list_floor(kubeconfig))
            log(f"run {attempt + 1}, the list alone: {floors[-1]}")
            for name, cwd in trees.items():
                runs[name].append(measure(kubeconfig, workdir, cwd))
                log(f"run {attempt + 1}, {name}: {runs[name][-1]}")
        if options.profile:
            for name, cwd in trees.items():
                prefix = f"{options.profile}-{name}"
                profiled = measure(kubeconfig, workdir, cwd, profile=prefix)
                log(f"profiled (not in the medians), {name}: {profiled}")
                if Path(f"{prefix}.txt").exists():
                    print("\n".join(summarize_profile(Path(f"{prefix}.txt"))), flush=True)

    if options.kubeconfig:
        rounds(Path(options.kubeconfig))
    else:
        binaries = lc.ensure_binaries()
        with lc.ControlPlane(bin_dir=binaries, workdir=workdir, keep_workdir=True) as cp:
            cp.stop_scheduler()
            if cp.kubelet is not None:
                cp.kubelet.stop()
            setup(cp, options.nodes, options.threads)
            rate = create_bound_pods(cp, options.nodes, options.pods, options.threads)
            log(f"{options.pods} pods created, {rate:.0f} pods/s overall")
            rounds(cp.kubeconfig)
            if options.keep:
                log(f"kept: --kubeconfig {cp.kubeconfig}; SIGTERM or SIGINT stops the plane")
                stop = threading.Event()
                # A job started in the background ignores SIGINT: SIGTERM stops it too.
                for number in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(number, lambda *_: stop.set())
                while not stop.wait(1.0):
                    pass
    summary = {
        "machine": notes,
        "options": vars(options),
        "create_pods_per_s": round(rate, 1),
        "runs": runs,
        "list_alone": floors,
        "list_alone_median_s": round(statistics.median(f["list_s"] for f in floors), 2)
        if floors
        else None,
        "medians": {
            tree: {
                name: round(statistics.median(r[name] for r in results), 2)
                for name in ("ready_s", "cpu_s", "rss_mib", "peak_mib")
            }
            for tree, results in runs.items()
            if results
        },
    }
    print(json.dumps(summary, indent=1))
    if options.json:
        Path(options.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
