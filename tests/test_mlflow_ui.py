"""`mlflow ui` on the workflow's default store, for real: the server's REST API and its web page in
headless Chromium (driven by chromedriver over the plain WebDriver HTTP protocol, so no Python
browser package is needed).

Needs the Debian packages chromium and chromium-driver; without them the browser test is skipped,
unless GSPO_REQUIRE_BROWSER=1 (CI), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from gspo.tracking.store import ui_link

BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method: str, url: str, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode()
    return json.loads(text) if text.strip().startswith(("{", "[")) else text


def _wait_http(url: str, proc, timeout: float):
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[:3]} exited with {proc.returncode}")
        try:
            return _http("GET", url, timeout=5)
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            if time.time() > deadline:
                raise AssertionError(f"{url} did not answer within {timeout} s") from e
            time.sleep(0.5)


@pytest.fixture(scope="module")
def store(smoke):
    return smoke[0]


@pytest.fixture(scope="module")
def ui(store, tmp_path_factory):
    """`mlflow ui --backend-store-uri sqlite:///results/mlflow.db`, run where the workflow ran."""
    port = _free_port()
    log = open(tmp_path_factory.mktemp("ui") / "mlflow-ui.log", "w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "ui",
            "--backend-store-uri",
            "sqlite:///results/mlflow.db",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=store,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{base}/health", proc, 120)
        yield base
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


@pytest.mark.slow
def test_the_ui_server_lists_the_experiment_and_its_runs_over_rest(ui):
    exp = _http("GET", f"{ui}/api/2.0/mlflow/experiments/get-by-name?experiment_name=smoke")
    exp_id = exp["experiment"]["experiment_id"]
    runs = _http(
        "POST",
        f"{ui}/api/2.0/mlflow/runs/search",
        {"experiment_ids": [exp_id], "filter": "tags.stage = 'rl'", "max_results": 100},
    )
    names = sorted(r["info"]["run_name"] for r in runs["runs"])
    assert names == [
        "grpo-seed0",
        "grpo-seed1",
        "gspo-bf16-rollout-seed0",
        "gspo-bf16-rollout-seed1",
        "gspo-seed0",
        "gspo-seed1",
        "gspo-trl-seed0",
        "gspo-trl-seed1",
    ]
    rid = next(r["info"]["run_id"] for r in runs["runs"] if r["info"]["run_name"] == "gspo-seed0")
    hist = _http(
        "GET",
        f"{ui}/api/2.0/mlflow/metrics/get-history?run_id={rid}&metric_key=eval/aime/pass_at_1",
    )
    assert sorted(int(m["step"]) for m in hist["metrics"]) == [0, 2, 4]
    comp = _http(
        "GET", f"{ui}/api/2.0/mlflow/metrics/get-history?run_id={rid}&metric_key=compute_flops"
    )
    assert {0, 2, 4} <= {int(m["step"]) for m in comp["metrics"]}


class WebDriver:
    """The few W3C WebDriver commands the test needs, over HTTP to chromedriver."""

    def __init__(self, url: str, binary: str, user_data_dir: str):
        self.url = url
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": binary,
                        "args": BROWSER_FLAGS + [f"--user-data-dir={user_data_dir}"],
                    },
                }
            }
        }
        self.session = _http("POST", f"{url}/session", caps, timeout=120)["value"]["sessionId"]

    def cmd(self, method, path, body=None):
        return _http(method, f"{self.url}/session/{self.session}{path}", body, timeout=120)["value"]

    def get(self, url):
        self.cmd("POST", "/url", {"url": url})

    def text(self) -> str:
        return self.cmd(
            "POST", "/execute/sync", {"script": "return document.body.innerText;", "args": []}
        )

    def wait_for_text(self, needles, timeout=90) -> str:
        deadline = time.time() + timeout
        while True:
            text = self.text() or ""
            if all(n in text for n in needles):
                return text
            if time.time() > deadline:
                raise AssertionError(f"page never showed {needles}; it shows:\n{text[:3000]}")
            time.sleep(1)

    def quit(self):
        try:
            _http("DELETE", f"{self.url}/session/{self.session}", timeout=30)
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture
def browser(tmp_path):
    binary = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )
    driver = shutil.which("chromedriver")
    if not (binary and driver):
        msg = "headless browser test needs Debian packages chromium and chromium-driver"
        if os.environ.get("GSPO_REQUIRE_BROWSER") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    port = _free_port()
    proc = subprocess.Popen(
        [driver, f"--port={port}", "--allowed-ips=127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/status", proc, 60)
        wd = WebDriver(f"http://127.0.0.1:{port}", binary, str(tmp_path / "chrome-profile"))
        try:
            yield wd
        finally:
            wd.quit()
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


@pytest.mark.slow
def test_the_ui_web_page_shows_the_experiment_and_its_runs_in_headless_chromium(ui, store, browser):
    exp = _http("GET", f"{ui}/api/2.0/mlflow/experiments/get-by-name?experiment_name=smoke")
    exp_id = exp["experiment"]["experiment_id"]
    browser.get(f"{ui}/#/experiments")
    assert "smoke" in browser.wait_for_text(["smoke"])
    # the link the report gives opens the experiment on its training runs (MLflow 3.17 would
    # open the bare address on its GenAI overview of traces, "No data available")
    page = (store / "results" / "smoke" / "report" / "index.html").read_text()
    link = ui_link(exp_id, ui)
    assert ui_link(exp_id) in page
    browser.get(link)
    text = browser.wait_for_text(["Runs", "grpo-seed0", "gspo-seed1"])
    assert "No data available" not in text and "Model training" in text
    for name in ("grpo-seed1", "gspo-seed0", "gspo-bf16-rollout-seed1", "sft", "report"):
        assert name in text


# every table's right edge, and whether its box scrolls sideways, at the window's width
OVERFLOW_JS = """
const right = document.body.getBoundingClientRect().right + 1;
const tables = [...document.querySelectorAll('table')];
const over = tables.filter(t => t.getBoundingClientRect().right > right
    || t.parentElement.scrollWidth > t.parentElement.clientWidth + 1);
return {inner: window.innerWidth, page: document.documentElement.scrollWidth,
        tables: tables.length, over: over.map(t => t.rows[0].innerText.slice(0, 120))};
"""


@pytest.mark.slow
def test_the_report_page_fits_a_1280_px_window_in_chromium(store, browser):
    """Issue 40: at 1280 px no table of the report is cut off or scrolls sideways (wide tables
    are split, each part with its key columns: pipeline.report.html.table)."""
    browser.cmd("POST", "/window/rect", {"width": 1280, "height": 1000})
    page = store / "results" / "smoke" / "report" / "index.html"
    browser.get(page.as_uri())
    got = browser.cmd("POST", "/execute/sync", {"script": OVERFLOW_JS, "args": []})
    assert 1200 <= got["inner"] <= 1280 and got["tables"] >= 8
    assert got["over"] == [] and got["page"] <= got["inner"], got
