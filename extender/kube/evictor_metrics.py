"""The evictor's Prometheus metrics: evictions by outcome, the longest-refused eviction,
pods on notice, Jobs being restarted.  :class:`~extender.kube.evictor.Evictor` registers
them on its own registry, which ``muster evictor`` serves.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


def register_evictor_metrics(
    registry: CollectorRegistry,
    *,
    oldest_refused_age: Callable[[], float],
    on_notice: Callable[[], float],
    restarting: Callable[[], float],
) -> Counter:
    """Register the evictor's metrics on ``registry``, the gauges reading the given
    callables when scraped; return the evictions counter (labelled by ``outcome``)."""
    evictions = Counter(
        "muster_evictor_evictions",
        "Eviction attempts of soft-evicted pods, by outcome.",
        ["outcome"],
        registry=registry,
    )
    oldest = Gauge(
        "muster_evictor_oldest_refused_eviction_age_seconds",
        "How long the longest-refused marked pod has been waiting for its eviction "
        "(0: none waits). A PodDisruptionBudget that never allows it shows here.",
        registry=registry,
    )
    oldest.set_function(oldest_refused_age)
    noticed = Gauge(
        "muster_evictor_pods_on_notice",
        "Marked pods given notice to save their work, not evicted yet.",
        registry=registry,
    )
    noticed.set_function(on_notice)
    jobs = Gauge(
        "muster_evictor_jobs_restarting",
        "Jobs the evictor suspended to restart them (their pods all victims) and has not "
        "resumed yet. One that stays here is a Job left suspended.",
        registry=registry,
    )
    jobs.set_function(restarting)
    return evictions
