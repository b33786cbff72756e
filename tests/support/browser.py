"""A real browser for the console tests: Debian's headless Chromium driven by Playwright (its own
browser downloads are not used: ``executable_path`` is the system's), pages that record every CSP
violation, script error and console error, axe-core for accessibility, and ``labeldp demo
--keep-running`` as the services to look at."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
SCREENSHOTS = Path(os.environ.get("LABELDP_CONSOLE_SCREENSHOTS", ROOT / "build" / "console-screenshots"))
BROWSERS = ("chromium", "chromium-browser", "google-chrome")

# Registered before any page script runs (in every frame): every CSP violation the page triggers
# lands in window.__csp, whatever the page's own code does.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push({directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample});
});
"""


def chromium_path() -> str:
    """The system Chromium (``apt-get install chromium``), or skip — in CI, fail: .ci/run installs it."""
    found = os.environ.get("LABELDP_CHROMIUM") or next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required in CI (.ci/run installs it with apt-get)")
        pytest.skip("no Chromium installed: apt-get install chromium to run the browser tests")
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[dev]'")
    return found


@dataclass
class Watched:
    """A page and what went wrong on it: CSP violations, uncaught errors, console errors."""

    page: Any  # playwright.sync_api.Page
    errors: list[str] = field(default_factory=list)

    def violations(self) -> list[dict[str, str]]:
        found: list[dict[str, str]] = self.page.evaluate("window.__csp || []")
        return found

    def forget(self) -> None:
        """Drop what a test provoked on purpose so far."""
        self.page.evaluate("window.__csp = []")
        self.errors.clear()

    def check_clean(self) -> None:
        """No CSP violation, no uncaught error and no console error except the HTTP errors a test
        provoked on purpose (the page shows those as problems; the browser logs them as failed loads)."""
        assert self.violations() == []
        unexpected = [e for e in self.errors if not e.startswith("console: Failed to load resource")]
        assert unexpected == []


def watch(page: Any) -> Watched:
    watched = Watched(page)

    def on_console(message: Any) -> None:
        if message.type == "error":
            watched.errors.append(f"console: {message.text}")

    def on_error(error: Any) -> None:
        watched.errors.append(f"pageerror: {error}")

    page.on("pageerror", on_error)
    page.on("console", on_console)
    return watched


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's WCAG 2.x A/AA and best-practice rules on the page as it stands. The script is
    evaluated through the DevTools protocol, which the page's CSP does not govern."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))
    result: list[dict[str, Any]] = page.evaluate(
        """async () => {
            const tags = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"];
            const options = {runOnly: {type: "tag", values: tags}, resultTypes: ["violations"]};
            const r = await axe.run(document, options);
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
              nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}));
        }"""
    )
    return result


def record_axe(where: str, violations: list[dict[str, Any]]) -> None:
    """Keep every page's axe findings (all impacts) in axe.json beside the screenshots."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    report = SCREENSHOTS / "axe.json"
    found = json.loads(report.read_text()) if report.exists() else {}
    found[where] = violations
    report.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@dataclass
class Demo:
    """``labeldp demo --keep-running``: the parties' base URLs (their consoles are under /console/) and
    the tenants' keys it printed."""

    labels_url: str
    labels_key: str
    features_url: str
    features_key: str
    run_id: str
    output: list[str]


def _read(stream: Any, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


@contextmanager
def demo_keep_running(out: Path, timeout: float = 400) -> Iterator[Demo]:
    """The demo as a person runs it, left running; stopped with Ctrl-C (SIGINT) afterwards, which
    must stop both services and exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "labeldp.cli", "demo", "--keep-running", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,  # SIGINT reaches the demo alone; it stops its services itself
        env={**os.environ, "COLUMNS": "200"},
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read, args=(proc.stdout, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while not any("press Ctrl-C to stop them" in line for line in lines):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the demo did not keep its services running:\n" + "".join(lines[-40:]))
            time.sleep(0.2)
        text = "".join(lines)
        labels = re.search(r"labels party \(advertiser\):\s+(\S+)\s+API key (\S+)", text)
        features = re.search(r"features party \(publisher\):\s+(\S+)\s+API key (\S+)", text)
        run = re.search(r"^run (\w+):", text, re.M)
        assert labels and features and run, text
        assert labels[1].endswith("/console/") and features[1].endswith("/console/"), text
        labels_base, features_base = (m[1].removesuffix("/console/") for m in (labels, features))
        yield Demo(labels_base, labels[2], features_base, features[2], run[1], lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=10)
