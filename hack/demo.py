"""``make demo``: Muster on a real, local control plane, told as a timeline.

Starts etcd, kube-apiserver, kube-scheduler and kube-controller-manager
(``localcluster/``), Muster as the scheduler's extender (``muster serve
--kubeconfig``) and the reference evictor (``muster evictor``); the harness plays the
kubelet.  Then the showcase, submitting the kubectl-style YAML in ``examples/``:

1. four 8-GPU nodes; team A is guaranteed 16 GPUs, team B none, both may
   borrow up to the whole cluster (``examples/quotas.yaml``);
2. team B's preemptible filler Job borrows every GPU (``examples/filler-job.yaml``);
3. ``muster simulate`` predicts what will happen when team A submits its two-pod
   training Job (same core as the live decision);
4. team A submits it (``examples/training-job.yaml``); Muster's PostFilter picks the
   victims, marks them for soft eviction and holds their room; the evictor evicts
   them; the Job controller replaces them, and the replacements wait; the gang binds
   to the held room;
5. the training Job completes and the filler's replacements run on the room it gave
   back.

It prints every change it observes, with the time since the gang was
submitted and the reason Muster gave.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

import localcluster as lc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GPU = "nvidia.com/gpu"
SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"


def example(name: str) -> list[dict[str, Any]]:
    """The objects of ``examples/<name>``, as ``kubectl apply -f`` would read them."""
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc]


def apply(rest: lc.RestClient, obj: dict[str, Any]) -> None:
    """Create one object of ``examples/`` (a Job or an ElasticQuota)."""
    namespace = obj["metadata"]["namespace"]
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"Job": "jobs", "ElasticQuota": "elasticquotas"}[obj["kind"]]
    rest.request("POST", f"/apis/{group}/{version}/namespaces/{namespace}/{plural}", obj)


def phases(pods: dict[str, dict[str, Any]], prefix: str) -> list[str]:
    """The phases of the pods whose key starts with ``prefix``."""
    return [p.get("status", {}).get("phase", "") for k, p in pods.items() if k.startswith(prefix)]


class Timeline:
    """Polls the pods of the demo and prints what changed, and why."""

    def __init__(self, rest: lc.RestClient, namespaces: list[str]) -> None:
        self.rest = rest
        self.namespaces = namespaces
        self.seen: dict[str, tuple[str, ...]] = {}
        self.start = time.monotonic()

    def say(self, text: str) -> None:
        print(f"  [{time.monotonic() - self.start:6.1f}s] {text}", flush=True)

    def poll(self) -> dict[str, dict[str, Any]]:
        pods = {}
        for namespace in self.namespaces:
            items = self.rest.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
            for item in items:
                pods[f"{namespace}/{item['metadata']['name']}"] = item
        for key, item in sorted(pods.items()):
            state = self._state(item)
            if self.seen.get(key) != state:
                self._describe(key, item, self.seen.get(key), state)
                self.seen[key] = state
        for key in sorted(set(self.seen) - set(pods)):
            self.say(f"{key}: deleted")
            del self.seen[key]
        return pods

    @staticmethod
    def _state(item: dict[str, Any]) -> tuple[str, ...]:
        metadata, status = item["metadata"], item.get("status", {})
        return (
            status.get("phase", ""),
            item["spec"].get("nodeName") or "",
            "marked" if SOFT_EVICTION in metadata.get("labels", {}) else "",
            "terminating" if metadata.get("deletionTimestamp") else "",
            status.get("nominatedNodeName") or "",
        )

    def _describe(
        self, key: str, item: dict[str, Any], before: tuple[str, ...] | None, now: tuple[str, ...]
    ) -> None:
        phase, node, marked, terminating, nominated = now
        if before is None:
            self.say(f"{key}: created ({phase})")
        if node and (before is None or before[1] != node):
            self.say(f"{key}: bound to {node}")
        if phase and before is not None and before[0] != phase:
            self.say(f"{key}: {phase}")
        if marked and (before is None or not before[2]):
            mark = json.loads(item["metadata"]["annotations"].get(SOFT_EVICTION, "{}"))
            self.say(f"{key}: marked for soft eviction by {mark.get('preemptor')}")
            self.say(f"{' ' * len(key)}  because: {mark.get('reason')}")
        if terminating and (before is None or not before[3]):
            self.say(f"{key}: evicted by the evictor, terminating")
        if nominated and (before is None or before[4] != nominated):
            self.say(f"{key}: room held on {nominated} (reservation)")


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="muster-demo-"))
    print("Building or reusing the pinned Kubernetes binaries ...", flush=True)
    bin_dir = lc.ensure_binaries()
    with lc.ControlPlane(bin_dir=bin_dir, workdir=workdir / "k8s") as plane:
        print(f"Control plane up: {plane.server} (logs in {plane.logs_dir})\n", flush=True)
        plane.create_namespace("muster-system")  # where Muster's leader-election Lease lives
        port = lc.free_port()
        records_keys = str(lc.records_key_dir(workdir))  # the chart's Secret, as files
        logs = (workdir / "muster.log").open("wb")
        muster = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "extender.cli.main",
                "serve",
                "--kubeconfig",
                str(plane.kubeconfig),
                "--port",
                str(port),
                "--enable-debug-endpoints",  # steps 5 and 6 read /debug (on 127.0.0.1)
                "--records-key-dir",
                records_keys,
            ],
            cwd=ROOT,
            stdout=logs,
            stderr=subprocess.STDOUT,
        )
        evictor = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "extender.cli.main",
                "evictor",
                "--kubeconfig",
                str(plane.kubeconfig),
                "--records-key-dir",
                records_keys,
            ],
            cwd=ROOT,
            stdout=logs,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            lc.wait_until(lambda: _ready(url), timeout=60, what="Muster to be ready")
            with plane.using_extender(lc.ExtenderConfig(url, bind=True)):
                return showcase(plane, url)
        finally:
            for process in (evictor, muster):
                process.terminate()
                process.wait(10)
            logs.close()
            print(f"\nMuster's and the evictor's log: {workdir / 'muster.log'}")


def showcase(plane: lc.ControlPlane, url: str) -> int:
    rest = plane.rest
    print("1. Four nodes with 8 GPUs each; team-a is guaranteed 16 GPUs, team-b none.")
    for i in range(4):
        plane.create_node(f"gpu-{i}", {"cpu": "32", "memory": "128Gi", GPU: 8})
    for name in ("team-a", "team-b"):
        plane.create_namespace(name)
    for obj in example("quotas.yaml"):
        apply(rest, obj)
    timeline = Timeline(rest, ["team-a", "team-b"])

    print(
        "\n2. team-b's preemptible filler Job borrows the whole cluster (examples/filler-job.yaml)."
    )
    for obj in example("filler-job.yaml"):
        apply(rest, obj)
    lc.wait_until(
        lambda: phases(timeline.poll(), "team-b/filler-").count("Running") == 4 or None,
        timeout=60,
        what="the filler's four pods running",
    )

    (training,) = example("training-job.yaml")
    print("\n3. What does Muster predict for team-a's two-pod training Job? (muster simulate)")
    print_prediction(rest, training)

    print("\n4. team-a submits it (examples/training-job.yaml). What happens, live:")
    timeline.start = time.monotonic()
    apply(rest, training)
    lc.wait_until(
        lambda: phases(timeline.poll(), "team-a/train-").count("Running") == 2 or None,
        timeout=120,
        interval=0.2,
        what="the gang to run",
    )
    timeline.poll()
    train_0 = sorted(k for k in timeline.seen if k.startswith("team-a/train-"))[0]
    explained = _get_json(f"{url}/debug/pods/{train_0}")
    print(f"\n5. Why, in Muster's words (GET /debug/pods/{train_0}):")
    for decision in explained.get("decisions", []):
        print(f"  {decision['verb']}: {decision['outcome']}")
        for reason in decision["reasons"][:4]:
            print(f"      {reason}")
    quotas = _get_json(f"{url}/debug/quotas")
    print("\n6. Quota usage now (GET /debug/quotas):")
    for name in ("team-a", "team-b"):
        q = quotas[name]
        print(
            f"  {name}: uses {q['used'].get(GPU, '0')} GPUs (min {q['min'][GPU]}, "
            f"max {q['max'][GPU]})"
        )
    print(
        "\n7. The training Job completes; the filler's replacements run on the room it gave back:"
    )

    def filler_runs_again() -> bool | None:
        pods = timeline.poll()
        trained = phases(pods, "team-a/train-").count("Succeeded") == 2
        filler = phases(pods, "team-b/filler-")  # the evicted pods are gone
        return (trained and len(filler) == 4 and "Pending" not in filler) or None

    lc.wait_until(filler_runs_again, timeout=180, interval=0.5, what="the filler running again")
    return 0


def print_prediction(rest: lc.RestClient, training: dict[str, Any]) -> None:
    """Dump the cluster as `kubectl get -o yaml` would, add the training Job and the pods
    its controller will create, and simulate."""
    items: list[dict[str, Any]] = []

    def listed(path: str, kind: str, api_version: str) -> None:
        for item in rest.request("GET", path)["items"]:
            items.append({"kind": kind, "apiVersion": api_version, **item})

    listed("/api/v1/nodes", "Node", "v1")
    for namespace in ("team-a", "team-b"):
        listed(f"/api/v1/namespaces/{namespace}/pods", "Pod", "v1")
        listed(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas",
            "ElasticQuota",
            "scheduling.x-k8s.io/v1alpha1",
        )
    items.append(training)
    template = training["spec"]["template"]
    for i in range(training["spec"]["parallelism"]):
        metadata = json.loads(json.dumps(template["metadata"]))
        metadata.update(name=f"train-{i}", namespace="team-a")
        items.append(
            {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, **{"spec": template["spec"]}}
        )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, handle)
    completed = subprocess.run(
        [sys.executable, "-m", "extender.cli.main", "simulate", handle.name, "--output", "table"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in completed.stdout.split("\nQuotas")[0].splitlines():
        print(f"  {line}")
    if completed.returncode != 0:
        print(f"  (simulate failed: {completed.stderr.strip()})")


def _ready(url: str) -> bool | None:
    try:
        return _get_json(f"{url}/readyz").get("status") == "ready" or None
    except OSError:
        return None


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


if __name__ == "__main__":
    sys.exit(main())
