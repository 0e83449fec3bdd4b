"""Helpers for the e2e tests: pod manifests, conditions, ``Cluster``, and a tenant's
client (its namespace-scoped token: :func:`tenant_client`).

``Cluster`` wraps the session's ``localcluster.ControlPlane`` for one test and one
namespace (the ``cluster`` fixture in conftest.py builds it). Import from here in test
modules (``from e2e_support import Cluster, condition, make_pod``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

import localcluster as lc

Json = dict[str, Any]
NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def condition(obj: Json, kind: str) -> Json | None:
    """The status condition of type ``kind`` of a pod/node dict, if present."""
    for cond in obj.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def make_pod(
    name: str,
    *,
    requests: Mapping[str, str | int] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    priority_class: str | None = None,
    priority: int | None = None,
    scheduler_name: str | None = None,
    grace_seconds: int = 1,
    containers: int = 1,
    scheduling_gates: Sequence[str] = (),
) -> Json:
    """A pod dict with ``containers`` identical containers, each with ``requests``
    (and limits equal to the requests for extended resources)."""
    resources: Json = {"requests": {k: str(v) for k, v in (requests or {}).items()}}
    # Extended resources (nvidia.com/gpu, ...) cannot be overcommitted: the API server
    # requires their limits to equal their requests.
    extended = {
        k: v
        for k, v in resources["requests"].items()
        if k not in NATIVE_RESOURCES and not k.startswith("hugepages-")
    }
    if extended:
        resources["limits"] = extended
    spec: Json = {
        "terminationGracePeriodSeconds": grace_seconds,
        "containers": [
            {"name": f"c{i}", "image": "registry.k8s.io/pause:3.10", "resources": resources}
            for i in range(containers)
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if priority_class:
        spec["priorityClassName"] = priority_class
    if priority is not None:
        spec["priority"] = priority
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if scheduling_gates:
        spec["schedulingGates"] = [{"name": gate} for gate in scheduling_gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }


def make_job(
    name: str,
    template: Json,
    *,
    parallelism: int = 1,
    completions: int | None = None,
    run_seconds: float | None = None,
    **spec: Any,
) -> Json:
    """A batch/v1 Job whose pods are ``template`` (a pod from ``make_pod``; its name is
    dropped, the Job controller names them), ``restartPolicy: Never``; ``run_seconds``:
    each pod runs that long on the kubelet stand-in, then succeeds. ``spec``: more Job
    spec fields (``backoffLimit``, ``podFailurePolicy``, ...)."""
    metadata = {k: v for k, v in template["metadata"].items() if k != "name"}
    if run_seconds is not None:
        annotations = {**metadata.get("annotations", {}), lc.RUN_SECONDS: str(run_seconds)}
        metadata["annotations"] = annotations
    job_spec: Json = {
        "parallelism": parallelism,
        "completions": parallelism if completions is None else completions,
        "template": {
            "metadata": metadata,
            "spec": {**template["spec"], "restartPolicy": "Never"},
        },
        **spec,
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": job_spec}


class Cluster:
    """Test helpers on the shared control plane, bound to one namespace."""

    def __init__(self, plane: lc.ControlPlane, namespace: str) -> None:
        self.plane = plane
        self.namespace = namespace
        self.rest = plane.rest
        self.nodes: list[str] = []

    # -- nodes

    def create_node(
        self,
        name: str,
        capacity: Mapping[str, str | int],
        **kwargs: Any,
    ) -> str:
        """Register a Ready node named ``<namespace>-<name>`` (deleted at teardown)."""
        full = f"{self.namespace}-{name}"[:63].rstrip("-")
        self.plane.create_node(full, capacity, **kwargs)
        self.nodes.append(full)
        return full

    # -- pods

    def pods_path(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        return f"{base}/{name}" if name else base

    def create_pod(self, name: str, **kwargs: Any) -> Json:
        """Create ``make_pod(name, **kwargs)`` in this namespace; return the stored pod."""
        return self.rest.request("POST", self.pods_path(), make_pod(name, **kwargs))

    def job_pods(self, namespace: str, job: str) -> list[Json]:
        """The pods of the batch/v1 Job ``job`` in ``namespace`` (the Job controller labels
        them ``job-name``), as the API lists them."""
        items: list[Json] = self.rest.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods",
            query={"labelSelector": f"job-name={job}"},
        )["items"]
        return items

    def get_pod(self, name: str) -> Json | None:
        try:
            return self.rest.request("GET", self.pods_path(name))
        except lc.ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def delete_pod(self, name: str, grace_seconds: int | None = None) -> Json:
        query = {} if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        return self.rest.request("DELETE", self.pods_path(name), query=query)

    def wait_pod(
        self,
        name: str,
        predicate: Callable[[Json], bool],
        *,
        timeout: float = 30.0,
        what: str = "pod condition",
    ) -> Json:
        """Poll the pod until ``predicate(pod)`` holds; return the pod."""
        last: list[Json | None] = [None]

        def check() -> Json | None:
            pod = last[0] = self.get_pod(name)
            return pod if pod is not None and predicate(pod) else None

        return lc.wait_until(
            check,
            timeout=timeout,
            what=f"{what} of pod {self.namespace}/{name}",
            on_timeout=lambda: f"last seen: {_short(last[0])}",
        )

    def wait_running(self, name: str, timeout: float = 30.0) -> Json:
        return self.wait_pod(
            name,
            lambda p: p.get("status", {}).get("phase") == "Running",
            timeout=timeout,
            what="phase Running",
        )

    def wait_unschedulable(self, name: str, timeout: float = 30.0) -> Json:
        def unschedulable(pod: Json) -> bool:
            cond = condition(pod, "PodScheduled")
            return bool(cond and cond["status"] == "False" and cond["reason"] == "Unschedulable")

        return self.wait_pod(
            name, unschedulable, timeout=timeout, what="PodScheduled=False/Unschedulable"
        )

    def wait_gone(self, name: str, timeout: float = 30.0) -> None:
        lc.wait_until(
            lambda: self.get_pod(name) is None,
            timeout=timeout,
            what=f"pod {self.namespace}/{name} to disappear",
        )

    # -- teardown

    def cleanup(self) -> None:
        """Force-delete this namespace's pods and quotas, and delete this test's nodes."""
        delete_namespaced(self.rest, self.namespace)
        for node in self.nodes:
            with contextlib.suppress(lc.ApiError):
                self.plane.delete_node(node)


QUOTA_GROUPS = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")


def delete_namespaced(rest: lc.RestClient, namespace: str) -> None:
    """Delete a namespace's Jobs (their pods with them), force-delete its pods, and delete
    its ElasticQuotas and PodGroups, so later tests do not see them.  The namespace itself
    stays (a test may use its name again)."""
    with contextlib.suppress(lc.ApiError):
        rest.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            query={"propagationPolicy": "Background"},
        )
    with contextlib.suppress(lc.ApiError):
        rest.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods", query={"gracePeriodSeconds": 0}
        )
    for group in QUOTA_GROUPS:
        for kind in ("elasticquotas", "podgroups"):
            with contextlib.suppress(lc.ApiError):
                rest.request("DELETE", f"/apis/{group}/v1alpha1/namespaces/{namespace}/{kind}")


SAMPLE_SCHEDULER_CONFIG = Path(__file__).resolve().parents[2] / "manifests/scheduler-config.yaml"


def tenant_client(cluster: Cluster, namespace: str) -> lc.RestClient:
    """A client with the token of a ServiceAccount that may write pods, Jobs and
    PodGroups in ``namespace`` and nothing else."""
    rest = cluster.rest
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tenant", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]},
            {
                "apiGroups": ["scheduling.x-k8s.io", "scheduling.sigs.k8s.io"],
                "resources": ["podgroups"],
                "verbs": ["*"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tenant", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces"
    rest.request("POST", f"{rbac}/{namespace}/roles", role)
    rest.request("POST", f"{rbac}/{namespace}/rolebindings", binding)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}}
    rest.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)
    answer = rest.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/tenant/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    client = lc.RestClient(cluster.plane.server, answer["status"]["token"], cluster.plane.ca_file)

    def may_write_pods() -> bool | None:  # RBAC caches take a moment to see the binding
        try:
            client.request("GET", f"/api/v1/namespaces/{namespace}/pods")
            return True
        except lc.ApiError as error:
            if error.status == 403:
                return None
            raise

    lc.wait_until(may_write_pods, timeout=30, what="the tenant's Role to take effect")
    return client


def sample_scheduler_config(url_prefix: str) -> tuple[lc.ExtenderConfig, Json]:
    """manifests/scheduler-config.yaml, as the harness runs it: its Muster ``extenders``
    entry pointed at ``url_prefix``, and the rest of what it sets (its profiles)."""
    config = yaml.safe_load(SAMPLE_SCHEDULER_CONFIG.read_text())
    (entry,) = config["extenders"]
    extender = lc.ExtenderConfig(
        url_prefix,
        bind="bindVerb" in entry,
        filter_verb=entry.get("filterVerb"),
        prioritize_verb=entry.get("prioritizeVerb"),
        preempt_verb=entry.get("preemptVerb"),
        weight=entry.get("weight", 1),
        node_cache_capable=entry["nodeCacheCapable"],
        http_timeout=entry["httpTimeout"],
        ignorable=entry["ignorable"],
    )
    return extender, {"profiles": config["profiles"]}


def _short(pod: Json | None) -> str:
    if pod is None:
        return "(no such pod)"
    status = pod.get("status", {})
    return str(
        {
            "nodeName": pod.get("spec", {}).get("nodeName"),
            "phase": status.get("phase"),
            "conditions": status.get("conditions"),
            "deletionTimestamp": pod.get("metadata", {}).get("deletionTimestamp"),
        }
    )
