"""What a benchmark puts on the local control plane: pods and ElasticQuotas.

:func:`pod_body` builds a pod labelled ``muster-bench`` (what
:class:`bench.support.pod_watch.PodWatch` watches) with the benchmark's own labels (a
trial's ``muster-bench/trial``, by which it is deleted); :func:`create_pods` creates many
from client threads and :func:`delete_pods` deletes a selection (grace period 0), both
retrying throttling, server errors and dropped connections (:func:`with_retries`);
:func:`create_quota` creates a namespace's ElasticQuota.  Also the keys Muster reads on
pods (preemptible, can-preempt, gang) and ``MOST_ALLOCATED_PROFILE``, kube-scheduler's
bin packing as the sample configuration sets it, and ``IGNORE_DISRUPTIONS``, the Job
failure policy the docs recommend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3

import localcluster as lc

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
#: The Job failure policy docs/gangs.md recommends: an eviction (``DisruptionTarget``) is
#: not a failure; the pod is replaced.
IGNORE_DISRUPTIONS: Json = {
    "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
}


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
