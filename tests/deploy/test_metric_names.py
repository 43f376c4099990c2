"""Every PromQL expression of the Grafana dashboard (deploy/grafana) and of the alert rules
(deploy/prometheus) parses, and every metric it names is one the brains export: the names
are collected from the registries a regional and a national brain build (in this process),
not listed here. The dashboard takes its data source from a template variable, and
docs/observability.md names every metric the brains export."""

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry

from cnbrain.national.metrics import NationalMetrics
from cnbrain.regional.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "cnbrain.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
DOCS = ROOT / "docs" / "observability.md"

MADE_BY_PROMETHEUS = frozenset({"up"})
"""Series Prometheus makes itself for every target, not a brain."""

GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")
"""Grafana's interval variables, which stand for a duration in a range selector."""

SAMPLES_OF_TYPE = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}
"""The samples' suffixes of a family of each type (a gauge's sample is the family's name)."""


def _families(registry: CollectorRegistry) -> dict[str, str]:
    """Every family `registry` collects, its name to its type."""
    return {family.name: family.type for family in registry.collect()}


def _regional() -> CollectorRegistry:
    return Metrics(brain="regional", region="east").registry


def _national() -> CollectorRegistry:
    return NationalMetrics().registry


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """The names of every sample series a regional or a national brain exports."""
    names: set[str] = set()
    for registry in (_regional(), _national()):
        for family, kind in _families(registry).items():
            names.update(family + suffix for suffix in SAMPLES_OF_TYPE.get(kind, ("",)))
    return names


def _dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def _rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def metric_names(expression: str) -> set[str]:
    """The metric names the selectors of a PromQL `expression` name (Grafana's interval
    variables taken as 5m). Raises ValueError when it does not parse."""
    parsed = promql_parser.parse(GRAFANA_INTERVALS.sub("5m", expression))
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(parsed, visit)
    return names


def test_the_names_come_from_the_brains_registries(exported: set[str]) -> None:
    assert "cnbrain_decisions_total" in exported  # a regional brain's
    assert "cnbrain_two_phase_parts_total" in exported  # the national brain's
    assert "cnbrain_grpc_server_handling_seconds_bucket" in exported  # both
    assert "cnbrain_queue_length" in exported  # read when scraped
    assert "cnbrain_decisions" not in exported  # a family, not a series


def test_the_extraction_finds_every_selector_and_only_those() -> None:
    expression = (
        'sum by (class) (rate(a_total{job="x", le="1"}[$__rate_interval])) '
        "> on (class) group_left max_over_time(b[1h:5m]) or vector(0) * scalar(c)"
    )
    assert metric_names(expression) == {"a_total", "b", "c"}
    with pytest.raises(ValueError):
        metric_names("sum(rate(a_total[5m])")


def test_every_dashboard_expression_names_exported_metrics(exported: set[str]) -> None:
    expressions = _dashboard_expressions()
    assert len(expressions) >= 30
    for expression in expressions:
        names = metric_names(expression)
        assert names, expression
        unknown = names - exported - MADE_BY_PROMETHEUS
        assert not unknown, f"{expression}: {sorted(unknown)} are not exported"


def test_every_alert_expression_names_exported_metrics(exported: set[str]) -> None:
    expressions = _rule_expressions()
    assert len(expressions) == 8
    for expression in expressions:
        unknown = metric_names(expression) - exported - MADE_BY_PROMETHEUS
        assert not unknown, f"{expression}: {sorted(unknown)} are not exported"


def test_a_name_no_brain_exports_is_caught(exported: set[str]) -> None:
    names = metric_names("rate(cnbrain_decision_total[5m])")  # _decisions_, misspelt
    assert names - exported == {"cnbrain_decision_total"}


def test_the_dashboard_takes_its_data_source_from_a_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert (variable["name"], variable["query"]) == ("datasource", "prometheus")
    source = {"type": "prometheus", "uid": "${datasource}"}
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == source, panel["title"]
        assert all(t["datasource"] == source for t in panel["targets"]), panel["title"]
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in (
        "decision",
        "latency",
        "queue",
        "model",
        "link",
        "two-phase",
        "grpc",
        "preemption",
        "audit",
    ):
        assert topic in titles, topic


def test_the_documentation_names_every_metric() -> None:
    text = DOCS.read_text()
    for registry in (_regional(), _national()):
        for family, kind in _families(registry).items():
            shown = family + "_total" if kind == "counter" else family
            assert f"`{shown}" in text, shown


def test_every_two_phase_series_is_there_at_0_from_the_start() -> None:
    """So that the first parts that fail after a start move a series Prometheus has seen
    (the alert on failing commits takes its increase)."""
    [family] = [f for f in _national().collect() if f.name == "cnbrain_two_phase_parts"]
    totals = {
        (s.labels["step"], s.labels["outcome"]): s.value
        for s in family.samples
        if s.name.endswith("_total")
    }
    steps = ("prepare", "commit", "abort", "release")
    outcomes = ("ok", "refused", "unavailable")
    assert totals == {(step, outcome): 0 for step in steps for outcome in outcomes}
