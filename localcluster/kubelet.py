"""The kubelet's part, emulated: there are no kubelets in the local cluster.

``KubeletEmulator`` watches all pods through a ``RestClient`` (with the harness's
``Watcher``), marks pods bound to a node ``Running``, ``Succeeded`` once the run time
they ask for (``RUN_SECONDS``) has passed, and finishes graceful deletions;
``ControlPlane`` starts one by default.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import quote

from .common import Json, parse_time, timestamp
from .rest import ApiError, RestClient
from .watch import Watcher

# A pod (or a Job's pod template) carrying this annotation runs for that many seconds and
# then succeeds, so Jobs complete; without it a pod runs until it is deleted.
RUN_SECONDS = "kubelet.muster.dev/run-seconds"
# A pod carrying this annotation plays a job that answers a preemption notice: once
# marked for soft eviction, or deleted gracefully (the notice kube-scheduler's own
# preemption gives), it saves its work (writes ``muster.dev/checkpointed`` with the time)
# and exits: ``Succeeded`` for "true", ``Failed`` for "fail" (a Job's pod, whose Job must
# replace it rather than count it done).
ANSWERS_NOTICE = "kubelet.muster.dev/answers-notice"
_ANSWERS = ("true", "fail")
SOFT_EVICTION = "scheduling.koordinator.sh/soft-eviction"
CHECKPOINTED = "muster.dev/checkpointed"


@dataclass
class _Task:
    kind: str  # "start", "finish", "answer" or "delete"
    namespace: str
    name: str
    uid: str
    when: float  # time.time() at which to act
    pod: Json = field(default_factory=dict)


class KubeletEmulator:
    """Plays the kubelet's part for every node (there is no kubelet).

    A ``Watcher`` thread lists and then watches all pods (resuming from the last
    resourceVersion, relisting after "410 Gone" or a lost connection, e.g. while
    kube-apiserver restarts); a second thread acts on them:

    * a pod bound to an existing node (``spec.nodeName`` set) and still ``Pending``
      becomes ``Running``: its status subresource gets ``startTime``, pod/host IPs,
      the Initialized, PodReadyToStartContainers, ContainersReady, Ready (and
      PodScheduled) conditions and running ``containerStatuses``;
    * a running pod annotated ``RUN_SECONDS`` becomes ``Succeeded`` (containers
      terminated with exit code 0, not Ready) that many seconds after its ``startTime``;
    * a pod with a ``deletionTimestamp`` (kube-apiserver deletes a pod bound to a node
      gracefully: it only sets ``deletionTimestamp`` = now + grace period) is, once
      ``deletionTimestamp`` has passed (or after ``max_grace_seconds`` if that is set and
      shorter), first given a terminal phase as the kubelet does (``Failed``, containers
      killed with exit code 137, unless it already ended), so a Job's pod failure policy
      can judge it, and then deleted with grace period 0 (and a UID precondition).

    * a running pod annotated ``ANSWERS_NOTICE`` that is marked for soft eviction, or
      deleted gracefully, exits and writes ``muster.dev/checkpointed`` (a job saving its
      work on notice); deleted, it is then deleted at once;

    A node in ``lost_nodes`` has lost its kubelet: its pods are neither started, ended nor
    deleted (a pod deleted there stays terminating, as on a node that stopped answering).
    """

    def __init__(self, rest: RestClient, *, max_grace_seconds: float | None = None) -> None:
        self._rest = rest
        self.max_grace_seconds = max_grace_seconds
        #: Nodes whose kubelet is gone: nothing happens to their pods.
        self.lost_nodes: set[str] = set()
        self._events: queue.Queue[tuple[str, Json]] = queue.Queue()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._watcher = Watcher(
            rest,
            "/api/v1/pods",
            lambda kind, pod: self._events.put((kind, pod)),
            on_error=lambda message: self._note_error(f"watch: {message}"),
            name="kubelet-watch",
        )
        self._tasks: dict[str, _Task] = {}
        self._started: set[str] = set()
        self._node_ips: dict[str, str] = {}
        self._next_pod_ip = 1
        self.pods_started = 0
        self.pods_deleted = 0
        self.pods_ended = 0
        self.errors: list[str] = []

    @property
    def synced(self) -> threading.Event:
        """Set once the first list of all pods has been queued."""
        return self._watcher.synced

    def start(self) -> None:
        if self._worker is not None:
            return
        self._stop.clear()
        self._worker = threading.Thread(target=self._work_loop, name="kubelet-work", daemon=True)
        self._watcher.start()
        self._worker.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._watcher.stop(timeout)
        if self._worker is not None:
            self._worker.join(timeout)
        self._worker = None

    @property
    def running(self) -> bool:
        alive = self._worker is not None and self._worker.is_alive()
        return alive or self._watcher.running

    def remember_node_ip(self, node: str, ip: str) -> None:
        self._node_ips[node] = ip

    def _note_error(self, message: str) -> None:
        self.errors.append(f"{timestamp()} {message}")
        del self.errors[:-50]

    # -- acting

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            due = [t for t in self._tasks.values() if t.when <= now]
            for task in due:
                self._run(task)
            waits = [t.when - time.time() for t in self._tasks.values()]
            timeout = min([0.5, *waits])
            try:
                kind, pod = self._events.get(timeout=max(0.01, timeout))
            except queue.Empty:
                continue
            try:
                self._on_pod(kind, pod)
            except Exception as exc:
                self._note_error(f"pod {kind}: {exc!r}")

    def _on_pod(self, kind: str, pod: Json) -> None:
        meta = pod.get("metadata", {})
        uid = str(meta.get("uid", ""))
        if kind == "DELETED":
            self._tasks.pop(uid, None)
            self._started.discard(uid)
            return
        node = pod.get("spec", {}).get("nodeName")
        if not node or node in self.lost_nodes:
            return
        namespace, name = str(meta["namespace"]), str(meta["name"])
        deletion = meta.get("deletionTimestamp")
        if deletion:
            when = parse_time(str(deletion))
            if self.max_grace_seconds is not None:
                when = min(when, time.time() + self.max_grace_seconds)
            if _answers_notice(meta):
                when = 0.0
            existing = self._tasks.get(uid)
            if existing is None or existing.kind != "delete":
                self._tasks[uid] = _Task("delete", namespace, name, uid, when, pod)
            return
        phase = pod.get("status", {}).get("phase", "Pending")
        if (
            phase == "Running"
            and _answers_notice(meta)
            and SOFT_EVICTION in (meta.get("labels") or {})
        ):
            existing = self._tasks.get(uid)
            if existing is None or existing.kind != "answer":
                self._tasks[uid] = _Task("answer", namespace, name, uid, 0.0, pod)
            return
        if phase == "Pending" and uid not in self._started and uid not in self._tasks:
            self._tasks[uid] = _Task("start", namespace, name, uid, 0.0, pod)
        elif phase == "Running" and uid not in self._tasks:
            self._schedule_finish(pod)

    def _schedule_finish(self, pod: Json) -> None:
        """Plan the end of a running pod that asks for a run time (``RUN_SECONDS``)."""
        meta = pod["metadata"]
        run = (meta.get("annotations") or {}).get(RUN_SECONDS)
        started = pod.get("status", {}).get("startTime")
        if run is None or not started:
            return
        try:
            seconds = float(run)
        except ValueError:
            self._note_error(f"pod {meta['namespace']}/{meta['name']}: bad {RUN_SECONDS} {run!r}")
            return
        uid = str(meta["uid"])
        when = parse_time(str(started)) + max(0.0, seconds)
        self._tasks[uid] = _Task("finish", meta["namespace"], meta["name"], uid, when, pod)

    def _run(self, task: _Task) -> None:
        if task.pod.get("spec", {}).get("nodeName") in self.lost_nodes:
            self._tasks.pop(task.uid, None)
            return
        try:
            if task.kind == "start":
                self._start_pod(task)
            elif task.kind == "finish":
                self._end_pod(task, succeeded=True)
            elif task.kind == "answer":
                self._answer_notice(task)
            else:
                running = task.pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                if running and _answers_notice(task.pod["metadata"]):
                    self._answer_notice(task)
                elif running:
                    self._end_pod(task, succeeded=False)
                self._delete_pod(task)
        except ApiError as exc:
            if exc.status in (404, 409):  # gone, or replaced by another pod of that name
                self._tasks.pop(task.uid, None)
                return
            self._note_error(f"{task.kind} {task.namespace}/{task.name}: {exc}")
            task.when = time.time() + 0.5
        except Exception as exc:  # connection refused while kube-apiserver restarts, ...
            self._note_error(f"{task.kind} {task.namespace}/{task.name}: {exc!r}")
            task.when = time.time() + 0.5
        else:
            if self._tasks.get(task.uid) is task:
                del self._tasks[task.uid]

    def _node_ip(self, node: str) -> str | None:
        if node not in self._node_ips:
            try:
                obj = self._rest.request("GET", f"/api/v1/nodes/{quote(node)}")
            except ApiError as exc:
                if exc.status == 404:
                    return None
                raise
            addresses = obj.get("status", {}).get("addresses", [])
            ips = [a["address"] for a in addresses if a.get("type") == "InternalIP"]
            self._node_ips[node] = ips[0] if ips else ""
        return self._node_ips[node]

    def _start_pod(self, task: _Task) -> None:
        pod = task.pod
        node = str(pod["spec"]["nodeName"])
        host_ip = self._node_ip(node)
        if host_ip is None:  # bound to a node that does not exist: no kubelet would run it
            self._note_error(f"pod {task.namespace}/{task.name} is bound to unknown node {node}")
            return
        now = timestamp()
        serial = self._next_pod_ip
        self._next_pod_ip += 1
        pod_ip = f"10.244.{(serial >> 8) & 255}.{serial & 255}"
        spec = pod.get("spec", {})
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
        ]
        existing = {c.get("type"): c for c in pod.get("status", {}).get("conditions", [])}
        if existing.get("PodScheduled", {}).get("status") != "True":
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now})

        def container_status(container: Json, running: bool) -> Json:
            state: Json
            if running:
                state = {"running": {"startedAt": now}}
            else:
                state = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                }
            return {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "containerID": f"emulated://{task.uid}/{container['name']}",
                "ready": running,
                "started": running,
                "restartCount": 0,
                "state": state,
            }

        status: Json = {
            "phase": "Running",
            "startTime": now,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "conditions": conditions,
            "containerStatuses": [container_status(c, True) for c in spec.get("containers", [])],
        }
        if host_ip:
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": host_ip}]
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                container_status(c, c.get("restartPolicy") == "Always")
                for c in spec["initContainers"]
            ]
        path = f"/api/v1/namespaces/{quote(task.namespace)}/pods/{quote(task.name)}/status"
        patch = {"metadata": {"uid": task.uid}, "status": status}
        self._rest.request(
            "PATCH", path, patch, content_type="application/strategic-merge-patch+json"
        )
        self._started.add(task.uid)
        self.pods_started += 1

    def _end_pod(self, task: _Task, *, succeeded: bool) -> None:
        """Give a pod its terminal phase: ``Succeeded`` (every container exited 0) or
        ``Failed`` (its containers were killed), not ready; other conditions are kept
        (the status patch merges conditions by type)."""
        now = timestamp()
        started = task.pod.get("status", {}).get("startTime", now)
        terminated = (
            {"exitCode": 0, "reason": "Completed"}
            if succeeded
            else {"exitCode": 137, "reason": "Error"}
        )
        statuses = [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "containerID": f"emulated://{task.uid}/{container['name']}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": {**terminated, "startedAt": started, "finishedAt": now}},
            }
            for container in task.pod.get("spec", {}).get("containers", [])
        ]
        status: Json = {
            "phase": "Succeeded" if succeeded else "Failed",
            "conditions": [
                {"type": t, "status": "False", "lastTransitionTime": now, "reason": "PodCompleted"}
                for t in ("ContainersReady", "Ready")
            ],
            "containerStatuses": statuses,
        }
        path = f"/api/v1/namespaces/{quote(task.namespace)}/pods/{quote(task.name)}/status"
        patch = {"metadata": {"uid": task.uid}, "status": status}
        self._rest.request(
            "PATCH", path, patch, content_type="application/strategic-merge-patch+json"
        )
        self.pods_ended += 1

    def _answer_notice(self, task: _Task) -> None:
        """Save the work and exit, as a job given notice of its eviction would, then say
        when it saved (``muster.dev/checkpointed``).  The exit comes first: a pod that
        has said it saved is evicted at once, and this one plays a job that leaves by
        itself."""
        saved = timestamp()
        answer = (task.pod["metadata"].get("annotations") or {}).get(ANSWERS_NOTICE)
        self._end_pod(task, succeeded=answer == "true")
        path = f"/api/v1/namespaces/{quote(task.namespace)}/pods/{quote(task.name)}"
        patch = {"metadata": {"uid": task.uid, "annotations": {CHECKPOINTED: saved}}}
        self._rest.request(
            "PATCH", path, patch, content_type="application/strategic-merge-patch+json"
        )

    def _delete_pod(self, task: _Task) -> None:
        path = f"/api/v1/namespaces/{quote(task.namespace)}/pods/{quote(task.name)}"
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": task.uid},
        }
        self._rest.request("DELETE", path, options)
        self.pods_deleted += 1


def _answers_notice(meta: Json) -> bool:
    """Does the pod play a job that saves and exits on notice, and has it not yet?"""
    annotations = meta.get("annotations") or {}
    return annotations.get(ANSWERS_NOTICE) in _ANSWERS and CHECKPOINTED not in annotations
