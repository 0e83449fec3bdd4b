"""Prometheus gauges read from the state at scrape time: quota min, max and usage."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from base.resources import MILLI
from extender.http.explain import waiting_pods
from extender.service import ClusterSource


class QuotaCollector(Collector):
    def __init__(self, source: ClusterSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        families = {
            name: GaugeMetricFamily(f"muster_quota_{name}", help_text, labels=["quota", "resource"])
            for name, help_text in (
                ("min", "The quota's guaranteed amount (spec.min)."),
                ("max", "The quota's ceiling (spec.max)."),
                (
                    "used",
                    "Requests of the quota's pods that are bound or reserved, subtree included.",
                ),
                ("nonpreemptible_used", "The non-preemptible part of used."),
            )
        }
        waiting = GaugeMetricFamily(
            "muster_jobs_waiting",
            "Jobs with pods pending that no reservation or admission hold covers, by quota.",
            labels=["quota"],
        )
        with self.source.exclusive() as state:
            jobs: dict[str, set[str]] = {}
            for pod in waiting_pods(state):
                jobs.setdefault(state.quota_name(pod) or "", set()).add(pod.job)
            for quota in sorted(state.tree.specs):
                waiting.add_metric([quota], len(jobs.get(quota, ())))
            for quota, spec in sorted(state.tree.specs.items()):
                usage = state.ledger[quota]
                lists: Mapping[str, Mapping[str, int]] = {
                    "min": spec.min,
                    "max": spec.max,
                    "used": usage.subtree_used,
                    "nonpreemptible_used": usage.np_used,
                }
                for name, values in lists.items():
                    for resource, amount in sorted(values.items()):
                        families[name].add_metric([quota, resource], amount / MILLI)
        yield from families.values()
        yield waiting
