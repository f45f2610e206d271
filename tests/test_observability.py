"""deploy/prometheus (alerting rules) and deploy/grafana (dashboard) against the metrics /metrics serves.

promtool checks and unit-tests the rules when it is installed (Debian's `prometheus` package has
it); the YAML-and-expression checks here run either way: every metric a rule or panel uses must be
one the monitor exposes, so a renamed metric cannot silently blind an alert.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.web import web_client

from monitor.store import Store

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "drift-monitor.json"
_METRIC = re.compile(r"\bdrift_monitor_[a-z_]+\b")
_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}


@pytest.fixture
def exposed(store: Store) -> Iterator[set[str]]:
    """Every series name /metrics can carry, suffixes included."""
    with web_client(store) as client:
        text = client.get("/metrics").text
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
    yield names


def balanced(expr: str) -> bool:
    depth: list[str] = []
    pairs = {")": "(", "}": "{", "]": "["}
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if char in "({[":
            depth.append(char)
        elif char in pairs and (not depth or depth.pop() != pairs[char]):
            return False
    return not depth


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alert_rules_use_exposed_metrics(exposed: set[str]) -> None:
    found = rules()
    assert {rule["alert"] for rule in found} >= {"DriftMonitorCriticalAlertOpen", "DriftMonitorServerDown"}
    for rule in found:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert balanced(rule["expr"]), rule["expr"]
        used = set(_METRIC.findall(rule["expr"]))
        assert used <= exposed, f"{rule['alert']} uses {used - exposed}, which /metrics does not serve"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_checks_and_unit_tests_the_rules() -> None:
    for command in (["check", "rules", RULES.name], ["test", "rules", "alerts.test.yml"]):
        result = subprocess.run(
            ["promtool", *command], cwd=RULES.parent, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_shipped_rule_has_a_unit_test_that_fires_it() -> None:
    """A rule nobody has seen fire under `promtool test rules` may never fire: each one needs a case
    that expects it (and the cases run by the promtool test above)."""
    tests = yaml.safe_load((RULES.parent / "alerts.test.yml").read_text(encoding="utf-8"))
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {rule["alert"] for rule in rules()} - fired == set()


def test_grafana_dashboard_panels_use_exposed_metrics(exposed: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "drift-monitor"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "server"}
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert balanced(target["expr"]), target["expr"]
            used = set(_METRIC.findall(target["expr"]))
            assert used and used <= exposed, f"{panel['title']} uses {used - exposed}"
