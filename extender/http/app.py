"""The FastAPI app kube-scheduler calls: ``POST /filter``, ``/prioritize``, ``/preempt``, ``/bind``.

Also ``GET /healthz``, ``/readyz``, ``/metrics`` (Prometheus) and, when enabled
(``debug_endpoints``: ``muster serve --enable-debug-endpoints``), read-only explain
endpoints under ``/debug/`` (off, each is a 404 saying so).  Requests are read as raw
bytes and validated with the wire models, so that every client mistake becomes a 400
(or 413 for a body over the limit) with a JSON ``{"error": ...}`` naming the
field (a bug in Muster is a logged JSON 500, and the service keeps serving); the
decisions themselves are :class:`extender.service.Extender`'s.  The four verbs are
served by a small ASGI layer ahead of FastAPI (:mod:`extender.http.asgi`), since they sit on
kube-scheduler's scheduling cycle: filter and prioritize on the event loop while the
snapshot is free, in a worker thread when it is busy.  FastAPI serves the rest.  Under
``muster serve``, filter and prioritize are answered before ASGI, by the HTTP protocol
itself (:mod:`extender.http.protocol`), with the same handlers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from base.errors import ManifestError
from extender.core.objects import PodInfo, parse_pod
from extender.http import explain, wire
from extender.http.asgi import ClientError, MusterApp, Verb
from extender.http.metrics import QuotaCollector
from extender.service import Extender

log = logging.getLogger(__name__)

#: Default request-size limit: a 5,000-node NodeList is a few MiB.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

_Model = TypeVar("_Model", bound=BaseModel)

#: The 404 of a ``/debug/`` path when the debug endpoints are off.
DEBUG_OFF_ERROR = (
    "{path}: the debug endpoints are off (muster serve --enable-debug-endpoints serves them)"
)


def create_app(
    extender: Extender,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    debug_endpoints: bool = False,
    collectors: Sequence[Collector] = (),
    on_shutdown: Sequence[Callable[[], object]] = (),
) -> MusterApp:
    """The ASGI app: the extender verbs, then FastAPI for everything else; ``/metrics``
    also serves ``collectors`` (the adapters' own metrics); ``/debug/`` only with
    ``debug_endpoints`` (whoever reaches it reads every quota, job and pod).
    ``on_shutdown`` runs, in order and in a worker thread, when the server stops
    gracefully (SIGTERM)."""

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        # The loop kube-scheduler's calls are served on: the probe port checks it answers.
        api.state.event_loop = asyncio.get_running_loop()
        yield
        for hook in on_shutdown:
            await asyncio.to_thread(hook)

    app = FastAPI(
        title="Muster extender",
        description="Elastic quotas and job-level preemption for kube-scheduler.",
        version="0.1.0",
        lifespan=lifespan,
    )
    registry = CollectorRegistry()
    requests = Counter(
        "muster_extender_requests",
        "Extender requests by verb and HTTP status.",
        ["verb", "code"],
        registry=registry,
    )
    latency = Histogram(
        "muster_extender_request_duration_seconds",
        "Time to answer an extender request, from its body read (waits for the state included).",
        ["verb"],
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        registry=registry,
    )
    decisions = Counter(
        "muster_decisions",
        "Decisions by verb and outcome.",
        ["verb", "outcome"],
        registry=registry,
    )
    registry.register(QuotaCollector(extender.source))
    for collector in collectors:
        registry.register(collector)

    def filter_verb(body: bytes, wait: bool) -> bytes:
        args, pod, names = _extender_args(body, extender, wait)
        result = extender.filter(pod, names, wait=wait)
        decisions.labels("filter", result.outcome.value).inc()
        nodes = None
        if args.NodeNames is None and args.Nodes is not None:
            passed = set(result.passed)
            items = zip(args.Nodes.items, names, strict=True)
            nodes = wire.NodeList(items=[node for node, name in items if name in passed])
        # Built from checked parts: model_construct skips re-validating every node name.
        answer_model = wire.ExtenderFilterResult.model_construct(
            NodeNames=result.passed if args.NodeNames is not None else None,
            Nodes=nodes,
            FailedNodes=result.failed,
            FailedAndUnresolvableNodes=result.unresolvable,
            Error="",
        )
        return to_json(answer_model)

    def prioritize_verb(body: bytes, wait: bool) -> bytes:
        _args, pod, names = _extender_args(body, extender, wait)
        scores = extender.prioritize(pod, names, wait=wait)
        return to_json([{"Host": name, "Score": scores[name]} for name in names])

    def preempt_verb(body: bytes, wait: bool) -> bytes:
        args = _decode(wire.ExtenderPreemptionArgs, body)
        pod = _pod(args.Pod, extender, wait)
        proposed: dict[str, list[str]] = {}
        pdb: dict[str, int] = {}  # kube-scheduler's count, for its own proposal
        if args.NodeNameToMetaVictims is not None:
            for node, meta in args.NodeNameToMetaVictims.items():
                proposed[node] = [p.UID for p in meta.Pods] if meta else []
                pdb[node] = meta.NumPDBViolations if meta else 0
        elif args.NodeNameToVictims is not None:
            for node, victims in args.NodeNameToVictims.items():
                pods = victims.Pods if victims else []
                proposed[node] = [
                    _victim_uid(victim, f"NodeNameToVictims.{node}.Pods[{i}]")
                    for i, victim in enumerate(pods)
                ]
                pdb[node] = victims.NumPDBViolations if victims else 0
        result = extender.preempt(pod, proposed)
        # A node's victims unchanged: kube-scheduler's count stands (it reads every
        # budget); changed: Muster's count for the victims it kept.
        violations = {
            node: pdb.get(node, 0) if uids == proposed.get(node) else result.pdb_violations[node]
            for node, uids in result.victims.items()
        }
        kept = sum(len(uids) for uids in result.victims.values())
        decisions.labels("preempt", "kept" if kept else "vetoed").inc()
        answer_model = wire.ExtenderPreemptionResult(
            NodeNameToMetaVictims={
                node: wire.MetaVictims(
                    Pods=[wire.MetaPod(UID=uid) for uid in uids],
                    NumPDBViolations=violations[node],
                )
                for node, uids in result.victims.items()
            }
        )
        return to_json(answer_model)

    def bind_verb(body: bytes, wait: bool) -> bytes:
        args = _decode(wire.ExtenderBindingArgs, body)
        bound = extender.bind(args.PodNamespace, args.PodName, args.PodUID, args.Node)
        decisions.labels("bind", bound.outcome).inc()
        return to_json(wire.ExtenderBindingResult(Error=bound.error))

    # Filter and prioritize answer on the event loop: they are short (tens to hundreds of
    # microseconds), and kube-scheduler waits for each on its serial scheduling cycle, so
    # a thread hand-off would only add latency.  Preempt may plan and bind calls the API:
    # those go to a worker thread.
    verbs = {
        "/filter": Verb("filter", filter_verb, inline=True),
        "/prioritize": Verb("prioritize", prioritize_verb, inline=True),
        "/preempt": Verb("preempt", preempt_verb, inline=False),
        "/bind": Verb("bind", bind_verb, inline=False),
    }

    @app.get("/healthz")
    async def healthz() -> Response:
        lasting = extender.source.lasting_problems()
        if lasting:
            return JSONResponse({"status": "unhealthy", "problems": lasting}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        if not extender.source.ready():
            return JSONResponse({"status": "waiting for the first full sync"}, status_code=503)
        problems = extender.source.problems()
        if problems:
            return JSONResponse({"status": "not ready", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    if debug_endpoints:
        _serve_debug(app, extender)
    else:
        _refuse_debug(app)
    return MusterApp(app, verbs, max_bytes=max_body_bytes, latency=latency, requests=requests)


def _serve_debug(app: FastAPI, extender: Extender) -> None:
    """The read-only explain endpoints under ``/debug/``."""

    @app.get("/debug/quotas", summary="every quota: min, max, used, non-preemptible used")
    def debug_quotas() -> dict[str, Any]:
        with extender.source.exclusive() as snapshot:
            return explain.quotas(snapshot)

    @app.get("/debug/budgets", summary="PodDisruptionBudgets: disruptions allowed, pods")
    def debug_budgets() -> dict[str, Any]:
        with extender.source.exclusive() as snapshot:
            return explain.budgets(snapshot)

    @app.get("/debug/jobs", summary="jobs with pending pods or reservations")
    def debug_jobs() -> dict[str, Any]:
        with extender.source.exclusive() as snapshot:
            return explain.jobs(snapshot, extender.clock())

    @app.get("/debug/pods/{namespace}/{name}", summary="why is this pod pending?")
    def debug_pod(namespace: str, name: str) -> Response:
        with extender.source.exclusive() as snapshot:
            found = explain.pod(snapshot, extender.log, f"{namespace}/{name}")
        if found is None:
            return JSONResponse({"error": f"pod {namespace}/{name} is not known"}, 404)
        return JSONResponse(found)


def _refuse_debug(app: FastAPI) -> None:
    """Every ``/debug/`` path (any method) a 404 saying the endpoints are off."""

    @app.api_route("/debug/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE"])
    def debug_off(rest: str) -> Response:
        return JSONResponse({"error": DEBUG_OFF_ERROR.format(path=f"/debug/{rest}")}, 404)


def _extender_args(
    body: bytes, extender: Extender, wait: bool
) -> tuple[wire.ExtenderArgs, PodInfo, list[str]]:
    """Decode ``ExtenderArgs``: the args, the pod, and the node names in either mode."""
    args = _decode(wire.ExtenderArgs, body)
    pod = _pod(args.Pod, extender, wait)
    if args.NodeNames is not None:
        names = args.NodeNames
    elif args.Nodes is not None:
        names = [_node_name(node, index) for index, node in enumerate(args.Nodes.items)]
    else:
        names = []
    return args, pod, names


def _decode(model: type[_Model], body: bytes) -> _Model:
    if not body.strip():
        raise ClientError(400, "empty request body: expected a JSON object")
    try:
        return model.model_validate_json(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(body)"
        if first["type"] == "json_invalid":
            raise ClientError(400, f"malformed JSON: {first['msg']}") from None
        raise ClientError(400, f"{where}: {first['msg']}") from None


def _pod(obj: dict[str, Any] | None, extender: Extender, wait: bool) -> PodInfo:
    if obj is None:
        raise ClientError(400, "Pod: required")
    known = _known_pod(obj, extender, wait)
    if known is not None:
        return known
    try:
        return parse_pod(obj)
    except ManifestError as error:
        raise ClientError(400, f"Pod.{error.field}: {error.message}") from None


def _known_pod(obj: dict[str, Any], extender: Extender, wait: bool) -> PodInfo | None:
    """The informers' reading of this exact pod version, when Muster has one."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    uid, version, name = metadata.get("uid"), metadata.get("resourceVersion"), metadata.get("name")
    namespace = metadata.get("namespace") or "default"
    if not (
        isinstance(uid, str)
        and isinstance(version, str)
        and isinstance(name, str)
        and isinstance(namespace, str)
    ):
        return None
    return extender.known_pending_pod(f"{namespace}/{name}", uid, version, wait=wait)


def _node_name(node: dict[str, Any], index: int) -> str:
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise ClientError(400, f"Nodes.items[{index}].metadata.name: required")
    return name


def _victim_uid(victim: dict[str, Any], where: str) -> str:
    metadata = victim.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, dict) else None
    if not isinstance(uid, str) or not uid:
        raise ClientError(400, f"{where}.metadata.uid: required")
    return uid
