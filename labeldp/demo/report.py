"""The demo's report: what one run measured (match rate, budget, bins, test errors beside the baselines,
the label-inference audit), printed as tables and written as JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from labeldp.audit.attack import AttackResult
from labeldp.mechanisms.advantage import Advantages
from labeldp.terminal import numbers

REPORT_WIDTH = 100  # the report as the README shows it (and as the demo prints it off a terminal)


@dataclass
class Report:
    dataset: str
    run_id: str
    epsilon: float
    values: dict[str, Any] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    noisy: pa.Table | None = None  # the release as stored (example_id, bin), for the plots only
    attack: AttackResult | None = None  # the audit's per-example numbers, for the plots only
    laplace_advantages: Advantages | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "run_id": self.run_id,
            "epsilon": self.epsilon,
            **self.values,
            "timings_s": self.timings_s,
        }


def print_report(console: Console, v: Mapping[str, Any]) -> None:
    """The report (``Report.as_json()``, or a ``report.json`` read back) as tables."""
    epsilon, dataset = v["epsilon"], v["dataset"]
    units = "weeks" if dataset == "weeks" else "USD"
    console.print()
    console.rule(f"[bold]labeldp demo report — {dataset}, ε = {epsilon:g}")
    console.print(
        f"match rate {v['match_rate']:.1%} ({v['join']['in_both']:,} of {v['join']['release_examples']:,} "
        f"released examples joined to features)"
    )
    b = v["budget"]
    console.print(
        f"budget: ε {b['spent_max']:g} spent per example, {b['left']:g} left of {b['per_example']:g} "
        f"({b['examples_that_can_take_another_release']:,} examples can take another ε = {epsilon:g})"
    )
    p = v["privacy"]
    if p["unit"] == "user":
        u = b["users"]
        console.print(
            f"privacy unit: user — ε = {p['epsilon']:g} per user over {p['users']:,} users, τ = "
            f"{p['contribution_bound']} ({p['contribution_bound_asked']}), at most "
            f"{p['epsilon_per_example']:.3f} per example; {p['examples_capped']:,} clicks over the bound; "
            f"per-user spend p50 {u['spent'].get('p50', 0):g}, max {u['spent'].get('max', 0):g}"
        )
    console.print(f"bins chosen ({len(v['bins'])}): {numbers(v['bins'])}")
    table = Table(title=f"test error against the true labels ({v['test_examples']:,} held-out examples)")
    table.add_column("model")
    table.add_column(f"RMSE ({units})", justify="right")
    table.add_column("labels it was trained on")
    per = " per user" if p["unit"] == "user" else ""
    lap = (
        f"Laplace at ε = {epsilon:g}/τ on the kept clicks, clipped"
        if p["unit"] == "user"
        else f"Laplace noise at ε = {epsilon:g}, clipped"
    )
    rows = (
        ("RR-on-Bins (labeldp)", "rr_on_bins_private", f"one ε = {epsilon:g}{per} release, debiased"),
        ("Laplace baseline", "laplace_baseline", lap),
        ("non-private", "non_private", "the true labels (no privacy)"),
        ("constant (mean)", "predict_mean", "none: predicts the mean label"),
    )
    for name, key, what in rows:
        table.add_row(name, f"{v['test_rmse'][key]:,.2f}", what)
    console.print(table)
    a = v["privacy_audit"]
    m, e, lap = a["measured"], a["exact"], a["laplace_exact"]
    audit = Table(title="what the publisher can learn about one click's label (target: the label's bin)")
    audit.add_column("")
    audit.add_column("RR-on-Bins", justify="right")
    audit.add_column(f"Laplace (ε = {a['laplace_epsilon']:g})", justify="right")
    # two attackers, named apart (docs/concepts/audits.md): the publisher's, which learns each click's
    # prior from its features, and the labels party's audit's (the console's), which knows the labels'
    # distribution and no features
    attackers = [("features attacker", m)]
    if "distribution_attacker" in a:
        attackers.append(("distribution attacker", a["distribution_attacker"]))
    for who, acc in attackers:
        audit.add_row(f"{who}, accuracy without the release", f"{acc['accuracy_without_release']:.2%}", "")
        audit.add_row(f"{who}, accuracy with the release", f"{acc['accuracy_with_release']:.2%}", "")
    audit.add_row(
        "additive advantage, mean (exact)", f"{e['additive_mean']:.4f}", f"{lap['additive_mean']:.4f}"
    )
    audit.add_row("additive advantage, p99 (exact)", f"{e['additive_p99']:.4f}", f"{lap['additive_p99']:.4f}")
    audit.add_row(
        "additive advantage, worst case (any prior)", f"{a['worst_case_additive_advantage']:.4f}", ""
    )
    audit.add_row(
        "multiplicative advantage, max", f"{e['multiplicative_max']:.4f}", f"{lap['multiplicative_max']:.4f}"
    )
    if "mse_reduction_share" in e:
        audit.add_row(
            "share of squared error in the value removed",
            f"{e['mse_reduction_share']:.2%}",
            f"{lap['mse_reduction_share']:.2%}",
        )
    console.print(audit)


def write_report(report: Report, path: Path) -> None:
    path.write_text(json.dumps(report.as_json(), indent=2, default=float) + "\n")


def report_text(report: Mapping[str, Any], width: int = REPORT_WIDTH) -> str:
    """The printed report as plain text (no colours, no trailing spaces): what the README and the quick
    start show, rendered from a run's ``report.json`` (``python -m labeldp.demo.readme``)."""
    plain = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    with plain.capture() as captured:
        print_report(plain, report)
    return "\n".join(line.rstrip() for line in captured.get().strip("\n").splitlines())
