"""The FastAPI app kube-scheduler calls: ``POST /filter``, ``/prioritize``, ``/preempt``, ``/bind``.

Also ``GET /healthz``, ``/readyz``, ``/metrics`` (Prometheus) and, when enabled
(``debug_endpoints``: ``muster serve --enable-debug-endpoints``), read-only explain
endpoints under ``/debug/`` (off, each is a 404 saying so).  Requests are read as raw
bytes and validated with the wire models, so that every client mistake becomes a 400
(or 413 for a body over the limit) with a JSON ``{"error": ...}`` naming the
field (a bug in Muster is a logged JSON 500, and the service keeps serving); the
decisions themselves are :class:`extender.service.Extender`'s, and the verbs' handlers
(wire JSON to those calls and back) :class:`extender.http.verbs.VerbHandlers`'.  The four
verbs are served by a small ASGI layer ahead of FastAPI (:mod:`extender.http.asgi`), since
they sit on kube-scheduler's scheduling cycle: filter and prioritize on the event loop
while the state is free, in a worker thread when it is busy.  FastAPI serves the rest.
Under ``muster serve``, filter and prioritize are answered before ASGI, by the HTTP protocol
itself (:mod:`extender.http.protocol`), with the same handlers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from extender.http import explain
from extender.http.asgi import MusterApp
from extender.http.metrics import QuotaCollector
from extender.http.verbs import VerbHandlers
from extender.service import Extender

log = logging.getLogger(__name__)

#: Default request-size limit: a 5,000-node NodeList is a few MiB.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024

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
    metrics = _Metrics.registered(extender, collectors)
    verbs = VerbHandlers(extender, metrics.decisions).routes()
    _serve_probes(app, extender, metrics.registry)
    if debug_endpoints:
        _serve_debug(app, extender)
    else:
        _refuse_debug(app)
    return MusterApp(
        app, verbs, max_bytes=max_body_bytes, latency=metrics.latency, requests=metrics.requests
    )


@dataclass(frozen=True)
class _Metrics:
    """What ``/metrics`` serves: the verbs' requests, latency and decisions, the quotas,
    and the adapters' own collectors, in one registry of the app's own."""

    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    decisions: Counter

    @classmethod
    def registered(cls, extender: Extender, collectors: Sequence[Collector]) -> _Metrics:
        registry = CollectorRegistry()
        requests = Counter(
            "muster_extender_requests",
            "Extender requests by verb and HTTP status.",
            ["verb", "code"],
            registry=registry,
        )
        latency = Histogram(
            "muster_extender_request_duration_seconds",
            "Time to answer an extender request, from its body read (waits for the state "
            "included).",
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
        return cls(registry, requests, latency, decisions)


def _serve_probes(app: FastAPI, extender: Extender, registry: CollectorRegistry) -> None:
    """``/healthz`` (lasting problems), ``/readyz`` (synced, no problems now) and
    ``/metrics`` (``registry``)."""

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


def _serve_debug(app: FastAPI, extender: Extender) -> None:
    """The read-only explain endpoints under ``/debug/``."""

    @app.get("/debug/quotas", summary="every quota: min, max, used, non-preemptible used")
    def debug_quotas() -> dict[str, Any]:
        with extender.source.exclusive() as state:
            return explain.quotas(state)

    @app.get("/debug/budgets", summary="PodDisruptionBudgets: disruptions allowed, pods")
    def debug_budgets() -> dict[str, Any]:
        with extender.source.exclusive() as state:
            return explain.budgets(state)

    @app.get("/debug/jobs", summary="jobs with pending pods or reservations")
    def debug_jobs() -> dict[str, Any]:
        with extender.source.exclusive() as state:
            return explain.jobs(state, extender.clock())

    @app.get("/debug/pods/{namespace}/{name}", summary="why is this pod pending?")
    def debug_pod(namespace: str, name: str) -> Response:
        with extender.source.exclusive() as state:
            found = explain.pod(state, extender.log, f"{namespace}/{name}", extender.clock())
        if found is None:
            return JSONResponse({"error": f"pod {namespace}/{name} is not known"}, 404)
        return JSONResponse(found)


def _refuse_debug(app: FastAPI) -> None:
    """Every ``/debug/`` path (any method) a 404 saying the endpoints are off."""

    @app.api_route("/debug/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE"])
    def debug_off(rest: str) -> Response:
        return JSONResponse({"error": DEBUG_OFF_ERROR.format(path=f"/debug/{rest}")}, 404)
