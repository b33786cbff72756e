"""The demo's report as the README and the quick start show it: rendered from a real run's
``report.json``, and checked against a fresh run.

``python -m tests.support.demo_report demo-output/report.json`` (after ``make demo``) writes the
report between ``<!-- demo-report … -->`` and ``<!-- /demo-report -->`` in both pages, with the run's
commit, date, machine and wall time, and the time into the pages' ``make demo`` line.
``tests/e2e/test_demo.py`` renders its own run the same way and compares: every word and every
deterministic number must match, the others within ``TOLERANCES`` — so a page whose report no run
produces any more fails the suite.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

from labeldp.demo.report import report_text

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", ROOT / "docs" / "quickstart.md")
BLOCK = re.compile(
    r"<!-- demo-report (?P<stamp>\{.*?\}) -->\n(?P<caption>.*?)```text\n(?P<report>.*?)\n```\n"
    r"<!-- /demo-report -->",
    re.S,
)
# the make demo line's measured time, in both pages' first code block
TIME = re.compile(r"(make demo +# .*? on real data \()[^)]*(\))")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")

# How far a fresh run may land from the shown one, by the row's label: ("rel", r) a share of the
# shown value, ("abs", a) in the unit shown (a percentage in points). Spread measured on 20 releases
# (bins, the distribution attacker: 50.5–52.7% → 50.9–53.5%) and 5 trained ones (RMSE 2,083–2,228;
# features attacker 87.3–88.3%; advantages ±10%) at ε = 1 on diamond prices, 2026-11-27. Every other
# number (the split, the budget, the models on true labels or none) must match exactly.
TOLERANCES: dict[str, tuple[str, float]] = {
    "RR-on-Bins (labeldp)": ("rel", 0.15),
    "Laplace baseline": ("rel", 0.10),
    "non-private": ("rel", 0.02),  # gradient boosting on the true labels: the same up to float sums
    "features attacker, accuracy": ("abs", 3.0),
    "distribution attacker, accuracy": ("abs", 4.0),
    "additive advantage, mean": ("abs", 0.01),
    "additive advantage, p99": ("abs", 0.05),
    "additive advantage, worst case": ("abs", 0.03),  # one bin more or fewer
    "multiplicative advantage, max": ("abs", 0.2),
    "share of squared error": ("abs", 3.0),
}
BINS = re.compile(r"^bins chosen \((\d+)\): ")
BIN_COUNT_SLACK = 1


def rendered(report: dict[str, object]) -> str:
    return report_text(report)


def shown(page: Path) -> tuple[dict[str, object], str]:
    """The stamp and the report a page shows."""
    found = BLOCK.search(page.read_text())
    assert found, f"{page.name} shows no <!-- demo-report --> block"
    return json.loads(found["stamp"]), found["report"]


def _numbers(line: str) -> list[float]:
    return [float(n.replace(",", "")) for n in NUMBER.findall(line)]


def _words(line: str) -> str:
    """A line without its numbers, its padding and its rules (whose lengths follow the numbers')."""
    return re.sub(r"[ ─━]", "", NUMBER.sub("#", line))


def differences(shown_text: str, fresh_text: str) -> list[str]:
    """Where a fresh run's report differs from the shown one beyond ``TOLERANCES`` (empty: none)."""
    old, new = shown_text.splitlines(), fresh_text.splitlines()
    if len(old) != len(new):
        return [f"{len(old)} lines shown, {len(new)} in the fresh run"]
    found = []
    for a, b in zip(old, new, strict=True):
        if (bins_a := BINS.match(a)) and (bins_b := BINS.match(b)):
            if abs(int(bins_a[1]) - int(bins_b[1])) > BIN_COUNT_SLACK:
                found.append(f"{a!r} → {b!r}: more than {BIN_COUNT_SLACK} bin apart")
            continue
        if _words(a) != _words(b):
            found.append(f"{a!r} → {b!r}: other words")
            continue
        label = a.strip("│ ").split("│")[0].strip()
        kind, amount = next((t for key, t in TOLERANCES.items() if label.startswith(key)), ("rel", 0.0))
        for x, y in zip(_numbers(a), _numbers(b), strict=True):
            allowed = amount * abs(x) if kind == "rel" else amount
            # a number is shown rounded: half its last digit is no difference
            decimals = max((len(t.split(".")[1]) for t in NUMBER.findall(a) if "." in t), default=0)
            if abs(x - y) > allowed + 0.5 * 10**-decimals:
                found.append(f"{label or a.strip()!r}: {x:g} shown, {y:g} now (allowed ±{allowed:g})")
    return found


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown CPU",
    )
    return f"{os.cpu_count()} cores ({model.replace('(R)', '')})"


def write(report_file: Path, commit: str, date: str, shared: bool) -> None:
    report = json.loads(report_file.read_text())
    seconds = round(float(report["timings_s"]["total"]))
    where = machine() + (", shared with other jobs" if shared else "")
    stamp = {"commit": commit, "date": date, "machine": where, "seconds": seconds}
    caption = textwrap.fill(
        f"One run of `make demo` (commit `{commit}`, {date}, {where}): {seconds} s from start to report. "
        "`tests/e2e/test_demo.py` repeats the run and checks every number against its own: the split, "
        "the budget and the models on true labels or none exactly; RMSE within 15% for RR-on-Bins and "
        "10% for Laplace, attack accuracies within 3–4 points, the bins' count within one "
        "(`tests/support/demo_report.py`).",
        width=105,
        break_on_hyphens=False,
    )
    caption += "\n\n"
    block = f"<!-- demo-report {json.dumps(stamp, ensure_ascii=False)} -->\n{caption}```text\n"
    block += rendered(report) + "\n```\n<!-- /demo-report -->"
    for page in PAGES:
        text = page.read_text()
        assert BLOCK.search(text), f"{page}: no <!-- demo-report --> block to replace"
        text = BLOCK.sub(lambda _: block, text)
        text, n = TIME.subn(rf"\g<1>{seconds} s here: see below\g<2>", text)
        assert n == 1, f"{page}: the make demo line"
        page.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a run's report.json (make demo: demo-output/report.json)")
    parser.add_argument("--commit", default=None, help="the commit the run was made at (default: HEAD)")
    parser.add_argument("--date", default=datetime.datetime.now(datetime.UTC).date().isoformat())
    parser.add_argument("--alone", action="store_true", help="the machine ran nothing else meanwhile")
    args = parser.parse_args()
    write(args.report, args.commit or _git("rev-parse", "--short", "HEAD"), args.date, not args.alone)


if __name__ == "__main__":
    main()
