"""The chart's alerts and dashboard against the real thing: `promtool test rules` for every alert, the
chart's PrometheusRule and dashboard ConfigMap rendered from the same files, and a real Prometheus (Debian's
package) scraping a real worker and the real operator, where every query of every dashboard panel returns
data.

promtool and prometheus come from Debian's `prometheus` package (.ci/test installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from fireflow_local.ports import free_port
from fireflow_worker.client import FireflowClient
from tests.chart.chart import CHART_DIR, render
from tests.kube.cluster import Cluster
from tests.kube.tools import REPO_ROOT
from tests.support.flows import sleep_flow
from tests.support.pools import OperatorProcess, create_pool, create_secret, wait_for_condition
from tests.support.proc import WorkerProcess, wait_for
from tests.worker.test_logs import three_nodes

RULES_FILE = CHART_DIR / "files" / "prometheus-rules.yaml"
RULES_TESTS = Path(__file__).with_name("prometheus-rules.test.yaml")
DASHBOARD_FILE = CHART_DIR / "files" / "grafana-dashboard.json"
MONITORING_DOC = REPO_ROOT / "docs" / "monitoring.md"
DOCS_URL = "https://github.com/fireflow/fireflow-pool/blob/main/docs/monitoring.md"
# Grafana's variables, as a dashboard user with every namespace and pool selected would have them.
DASHBOARD_VARIABLES = {"$namespace": ".*", "$pool": ".*", "$__rate_interval": "30s"}
POOL = "watched"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing; install Debian's prometheus package (apt-get install prometheus)")
    return found


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the page's headings."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_should_pass_promtool_unit_tests_that_fire_every_alert() -> None:
    checked = subprocess.run(
        [_tool("promtool"), "check", "rules", str(RULES_FILE)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [_tool("promtool"), "test", "rules", RULES_TESTS.name],
        cwd=RULES_TESTS.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    cases = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in cases for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert fired == {rule["alert"] for rule in _alerts()}


def test_should_give_every_alert_a_wait_a_severity_and_a_runbook_on_the_monitoring_page() -> None:
    anchors = _anchors(MONITORING_DOC.read_text())
    alerts = _alerts()
    assert len(alerts) >= 5
    for rule in alerts:
        assert rule["for"], rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        url = rule["annotations"]["runbook_url"]
        assert url == f"{DOCS_URL}#{rule['alert'].lower()}", rule["alert"]
        assert rule["alert"].lower() in anchors, f"docs/monitoring.md has no section {rule['alert']}"


def test_should_render_the_rules_and_the_dashboard_from_their_files(tmp_path: Path) -> None:
    values = {
        "monitoring": {
            "podMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True, "runbookBaseUrl": "https://wiki.example.com/fireflow"},
            "grafanaDashboard": {"enabled": True},
        }
    }
    objects = {o["kind"]: o for o in render(tmp_path, values) if o["kind"] in ("PrometheusRule", "ConfigMap")}
    rendered_alerts = [r for g in objects["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
    for mine, rendered in zip(_alerts(), rendered_alerts, strict=True):
        assert rendered["expr"] == mine["expr"]
        assert rendered["annotations"]["summary"] == mine["annotations"]["summary"]  # Prometheus templates intact
        assert rendered["annotations"]["runbook_url"] == mine["annotations"]["runbook_url"].replace(
            DOCS_URL, "https://wiki.example.com/fireflow"
        )
    assert json.loads(objects["ConfigMap"]["data"]["fireflow-pool.json"]) == json.loads(DASHBOARD_FILE.read_text())
    assert objects["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert not {"PodMonitor", "PrometheusRule"} & {o["kind"] for o in render(tmp_path, {})}  # opt-in


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, Grafana's variables filled in."""
    queries = []
    for panel in json.loads(DASHBOARD_FILE.read_text())["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in DASHBOARD_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append((panel["title"], expr))
    return queries


class Prometheus:
    def __init__(self, workdir: Path, targets: dict[str, tuple[str, dict[str, str], bool]]) -> None:
        self.port = free_port()
        scrape_configs = [
            {
                "job_name": job,
                "scrape_interval": "1s",
                "honor_labels": honor,
                "static_configs": [{"targets": [target], "labels": labels}],
            }
            for job, (target, labels, honor) in targets.items()
        ]
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": scrape_configs}))
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    _tool("prometheus"),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def query(self, expr: str) -> list[Any]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        result: list[Any] = body["data"]["result"]
        return result

    def wait_for_data(self, queries: list[tuple[str, str]], timeout: float = 180) -> dict[str, list[str]]:
        """Poll until every query returns data; returns what did not (empty: all did)."""
        deadline = time.monotonic() + timeout
        empty: dict[str, list[str]] = {}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log.read_text()[-3000:]}")
            empty = {}
            try:
                for title, expr in queries:
                    if not self.query(expr):
                        empty.setdefault(title, []).append(expr)
            except OSError:
                empty = {"prometheus": ["not answering yet"]}
            if not empty:
                return {}
            time.sleep(2)
        return empty

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fireflow-prometheus-") as path:
        yield Path(path)


@pytest.fixture
def worker(database_url: str) -> Iterator[WorkerProcess]:
    """A worker on the pool's database (the pool itself runs none), scraped as the PodMonitor scrapes pods."""
    process = WorkerProcess(database_url, "scraped-0").start()
    yield process
    process.stop()


def test_should_answer_every_dashboard_query_from_a_real_prometheus_scraping_a_worker_and_the_operator(
    kube_cluster: Cluster, kube_api: ApiClient, kube_namespace: str, database_url: str, worker: WorkerProcess,
    workdir: Path,
) -> None:  # fmt: skip
    operator = OperatorProcess(kube_cluster).start()
    try:
        create_secret(kube_api, kube_namespace, database_url)
        # At zero replicas: the runs go to the scraped worker. The pool migrates its database and is Ready.
        create_pool(kube_api, kube_namespace, POOL, replicas=0)
        wait_for_condition(kube_api, kube_namespace, POOL, "Ready")
        worker.wait_ready()
        client = FireflowClient(database_url)
        metrics_port = operator.environment["FIREFLOW_OPERATOR_METRICS_PORT"]
        prometheus = Prometheus(
            workdir,
            {
                # The PodMonitor's target labels: the pod's namespace and its pool label.
                "workers": (f"127.0.0.1:{worker.port}", {"namespace": kube_namespace, "pool": POOL}, False),
                # The ServiceMonitor honours the operator's own namespace/pool labels (about the pools).
                "operator": (f"127.0.0.1:{metrics_port}", {}, True),
            },
        )
        try:
            for _ in range(3):
                assert client.wait(client.enqueue(three_nodes()), timeout_seconds=60).status == "SUCCESS"
            assert client.wait(client.enqueue(three_nodes(fail_last=True)), timeout_seconds=60).status == "ERROR"
            napping = client.enqueue(sleep_flow(600))
            # Cancelled once it executes here: a run cancelled between its claim and its start never starts,
            # so the worker never counts it.
            wait_for(lambda: worker.metric("fireflow_active_runs") == 1, what="the sleeping run to execute")
            client.cancel(napping)
            missing = prometheus.wait_for_data(dashboard_queries())
            assert not missing, f"dashboard queries without data: {json.dumps(missing, indent=1)}"
        finally:
            client.close()
            prometheus.stop()
    finally:
        operator.stop()
