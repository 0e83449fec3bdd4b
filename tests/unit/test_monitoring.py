"""The Grafana dashboard and Prometheus rules in charts/muster/files/monitoring name only metrics
Muster and its evictor export (a renamed metric breaks this test, not an admin's
dashboard), and every rule is well formed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import cast

import yaml
from fastapi.testclient import TestClient
from prometheus_client.exposition import generate_latest

from extender.core.config import MusterArgs
from extender.core.decisions import DecisionLog
from extender.http.app import create_app
from extender.kube.client import KubeClient
from extender.kube.evictor import Evictor
from extender.kube.postfilter import PostFilterLoop
from extender.kube.source import KubeSource
from extender.kube.writer import ClusterWriter
from extender.service import Extender, StaticSource
from tests.builders import node, record_keys, snapshot

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "charts" / "muster" / "files" / "monitoring"
SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count")


def exported() -> set[str]:
    """Every metric name Muster's /metrics and the evictor's serve, with its series'
    suffixes."""
    client = cast(KubeClient, object())
    source = KubeSource(client, MusterArgs(), record_keys=record_keys)
    postfilter = PostFilterLoop(source, cast(ClusterWriter, None), DecisionLog())
    app = create_app(
        Extender(StaticSource(snapshot([node("n0")]))),
        collectors=[source.scheduler_preemptions, source.forged_records, postfilter.time_to_mark],
    )
    served = (
        TestClient(app).get("/metrics").text
        + generate_latest(Evictor(client, record_keys=record_keys).registry).decode()
    )
    families = re.findall(r"^# TYPE (\S+) ", served, flags=re.MULTILINE)
    return {family + suffix for family in families for suffix in SUFFIXES}


def referenced(expr: str) -> set[str]:
    return set(re.findall(r"\bmuster_[a-z_]+", expr))


def test_the_dashboard_names_only_exported_metrics() -> None:
    names = exported()
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 8
    for expr in exprs:
        assert referenced(expr) and referenced(expr) <= names, expr


def test_the_alert_rules_are_well_formed_and_name_only_exported_metrics() -> None:
    names = exported()
    document = yaml.safe_load((MONITORING / "prometheus-rules.yaml").read_text())
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} >= {"MusterExtenderErrors", "MusterQuotaOverMax"}
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert referenced(rule["expr"]) and referenced(rule["expr"]) <= names, rule["expr"]
