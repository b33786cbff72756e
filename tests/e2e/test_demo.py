"""`labeldp demo` (what `make demo` runs), as a real command: both services as child processes, the
whole exchange over REST and gRPC, the report, the figures, and no process left behind — on success,
on PostgreSQL, on bad input and on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from labeldp.demo.world import MISSING_EVERY, TEST_EVERY
from labeldp.processes import free_port
from labeldp.samples import diamond_prices, synthetic_users
from tests.support import demo_report, postgres

pytestmark = pytest.mark.processes

PNG = b"\x89PNG\r\n\x1a\n"


def demo(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "labeldp.cli", "demo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pids(output: str) -> list[int]:
    return [int(p) for p in re.findall(r"\(pid (\d+)\)", output)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def check_report(out: Path, epsilon: float) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    n = diamond_prices().table.num_rows
    index = np.arange(n)
    train = index % TEST_EVERY != 0
    matched = train & (index % MISSING_EVERY != 1)
    # every click is released (the universe), whatever its label; the join finds those with features
    assert report["examples_released"] == int(train.sum())
    assert report["join"]["in_both"] == int(matched.sum())
    assert report["match_rate"] == pytest.approx(matched.sum() / train.sum())
    assert report["test_examples"] == n - int(train.sum())
    budget = report["budget"]
    assert budget["spent_max"] == budget["spent_min"] == epsilon
    assert budget["left"] == pytest.approx(2 * epsilon)
    assert budget["examples_that_can_take_another_release"] == report["examples_released"]
    assert len(report["bins"]) >= 2 and report["bins"] == sorted(report["bins"])
    assert report["epsilon_prior"] + report["epsilon_randomize"] == pytest.approx(epsilon)
    rmse = report["test_rmse"]
    # margins far beyond run-to-run noise at ε = 1 on 10,788 test examples (measured ~3,000 vs ~4,700)
    assert rmse["non_private"] < rmse["rr_on_bins_private"] < rmse["laplace_baseline"]
    assert rmse["rr_on_bins_private"] < rmse["predict_mean"]
    for name in ("mechanism.png", "loss_vs_epsilon.png", "budget.png", "privacy_audit.png"):
        assert (out / name).read_bytes()[:8] == PNG
    check_audit(report)
    return report


def check_audit(report: dict[str, Any]) -> None:
    """The report's privacy audit: exact per-example numbers within the mechanism's data-independent
    bounds, those bounds as the mechanism defines them, the measured attack over the joined clicks."""
    audit, mech = report["privacy_audit"], report["mechanism"]
    m = len(mech["bin_values"])
    assert audit["max_multiplicative_advantage"] == mech["implemented_epsilon"]
    assert 0 < audit["worst_case_additive_advantage"] < 1 - 1 / m
    assert audit["exact"]["additive_max"] <= audit["worst_case_additive_advantage"] + 1e-12
    assert audit["exact"]["multiplicative_max"] <= mech["implemented_epsilon"] + 1e-9
    measured = audit["measured"]
    assert measured["examples"] > 0.9 * report["join"]["in_both"] - (
        report["privacy"]["examples_capped"] or 0
    )
    assert 0 < measured["accuracy_without_release"] <= 1 and 0 < measured["accuracy_with_release"] <= 1


def test_demo_runs_both_parties_end_to_end_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "out"
    labels_port, features_port = free_port(), free_port()
    done = demo("--out", str(out), "--labels-port", str(labels_port), "--features-port", str(features_port))
    assert done.returncode == 0, done.stdout + done.stderr
    check_report(out, 1.0)
    # the services on the ports asked for, and their consoles there
    assert f"labels party (advertiser) at http://127.0.0.1:{labels_port} " in done.stdout
    assert f"features party (publisher) at http://127.0.0.1:{features_port}," in done.stdout
    assert f"console: http://127.0.0.1:{labels_port}/console/ (advertiser)" in done.stdout
    # the report the README and the quick start show: the same words, every number within its
    # tolerance of this run's (tests/support/demo_report.py)
    fresh = demo_report.rendered(json.loads((out / "report.json").read_text()))
    for page in demo_report.PAGES:
        _, shown = demo_report.shown(page)
        assert not demo_report.differences(shown, fresh), (page.name, demo_report.differences(shown, fresh))
    for step in ("registering", "uploading", "releasing at ε = 1", "delivering", "joining", "training"):
        assert step in done.stdout
    assert "mutual TLS" in done.stdout and "test error against the true labels" in done.stdout
    steps = done.stdout[done.stdout.index("[1/9]") : done.stdout.index("drawing the figures")]
    assert "\n\n" not in steps, steps  # no empty line left by a progress bar (stdout is a pipe)
    started = pids(done.stdout)
    assert len(started) == 2 and all(gone(p) for p in started)
    logs = (out / "logs" / "labels-party.log").read_text()
    assert '"release charged"' in logs or "release charged" in logs


def check_user_level_report(out: Path, epsilon_user: float) -> dict[str, Any]:
    """A user-level run over the demo's synthetic users: every click listed, at most τ per user with
    label information, every user charged ε_user, and the model still far better than the mean."""
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    n = diamond_prices().table.num_rows
    train = np.arange(n) % TEST_EVERY != 0
    users = synthetic_users(n)[train]
    counts = np.unique(users, return_counts=True)[1]
    privacy = report["privacy"]
    tau = privacy["contribution_bound"]
    assert privacy["unit"] == "user" and privacy["contribution_bound_asked"] == "auto" and tau >= 1
    assert privacy["users"] == counts.size and report["examples_released"] == int(train.sum())
    assert privacy["examples_capped"] == int(np.maximum(counts - tau, 0).sum()) > 0
    assert report["mechanism"]["privacy_unit"] == "user" and report["mechanism"]["epsilon"] == epsilon_user
    # auto: τ is known only after the noise, so every click was charged the worst case, ε_user
    budget = report["budget"]
    assert budget["spent_max"] == budget["spent_min"] == epsilon_user
    assert budget["users"]["users"] == counts.size and budget["users"]["spent"]["max"] == epsilon_user
    assert report["model_metrics"]["examples_capped"] > 0
    rmse = report["test_rmse"]
    assert rmse["non_private"] < rmse["rr_on_bins_private"] < rmse["predict_mean"]
    assert rmse["rr_on_bins_private"] < rmse["laplace_baseline"]
    check_audit(report)
    return report


def test_demo_runs_the_labels_party_on_postgresql_with_a_user_level_release(
    tmp_path: Path, postgres_server: str
) -> None:
    url = postgres.create_database(postgres_server, "demo")
    out = tmp_path / "out"
    done = demo(
        "--out", str(out), "--postgres", url, "--privacy-unit", "user", "--epsilon-user", "4",
        "--contribution-bound", "auto",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on PostgreSQL" in done.stdout and "releasing at ε = 4 per user" in done.stdout
    assert "user-level:" in done.stdout and "privacy unit: user" in done.stdout
    report = check_user_level_report(out, 4.0)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as c:
        status = c.execute(text("SELECT status FROM releases WHERE id = :id"), {"id": report["release_id"]})
        assert status.scalar_one() == "complete"
    engine.dispose()
    assert all(gone(p) for p in pids(done.stdout))


def test_demo_stops_its_services_on_ctrl_c(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "labeldp.cli", "demo", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 120
    while "labels party (advertiser) at" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    started = pids(seen)
    assert len(started) == 2, seen
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, seen + rest + err
    assert "interrupted" in err and "stopped" in err
    assert all(gone(p) for p in started)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "-1"], "epsilon must be a finite number > 0"),
        (["--dataset", "nope"], "unknown dataset 'nope'"),
        (["--labels-url", "http://127.0.0.1:9"], "with running services give"),
        (["--keep-running", "--mechanism-only"], "--keep-running is for the two-party demo"),
        (["--mechanism-only", "--labels-port", "8400"], "are for the services the demo starts"),
        (["--labels-port", "8400", "--features-port", "8400"], "must differ"),
        (["--features-port", "0"], "'--features-port'"),  # out of 1–65535
        (["--labels-public-url", "http://127.0.0.1:8400"], "go with --labels-url"),
    ],
)
def test_demo_rejects_bad_options_before_starting_anything(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = demo("--out", str(tmp_path / "out"), *args, timeout=60)
    assert done.returncode == 2 and message in done.stderr
    assert "(pid" not in done.stdout


def test_demo_refuses_a_port_in_use_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = demo("--out", str(tmp_path / "out"), "--labels-port", str(port), timeout=120)
    assert done.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert "(pid" not in done.stdout


def test_demo_against_unreachable_services_fails_clearly(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("ldp_nope\n")
    done = demo(
        "--out",
        str(tmp_path / "out"),
        "--labels-url",
        "http://127.0.0.1:9",
        "--labels-key-file",
        str(key),
        "--features-url",
        "http://127.0.0.1:9",
        "--features-key-file",
        str(key),
        "--grpc-address",
        "127.0.0.1:9",
        timeout=60,
    )
    assert done.returncode == 3 and "unreachable" in done.stderr  # no answer: as every client command


def test_make_demo_runs_this_command() -> None:
    """`make demo` (the README's first command) is `labeldp demo` with its defaults, run from .venv."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert dry.stdout.strip().splitlines()[-1] == ".venv/bin/labeldp demo"
    kept = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo", "KEEP_RUNNING=1"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert kept.stdout.strip().splitlines()[-1] == ".venv/bin/labeldp demo --keep-running"


def test_the_feature_aware_demo_runs_the_loop_and_reports_both_stages(tmp_path: Path) -> None:
    """`labeldp demo --feature-aware`: stage 1, the publisher's model, its priors, stage 2 on them and
    one model on both, through the two services it starts — every click released once (two charges of
    ε over disjoint clicks), the report's models scored on the held-out clicks."""
    out = tmp_path / "out"
    done = demo("--feature-aware", "--dataset", "prices", "--epsilon", "2", "--out", str(out), timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "feature-aware.json").read_text())
    one, two = report["stage_1"], report["stage_2"]
    clicks = sum(1 for i in range(diamond_prices().table.num_rows) if i % TEST_EVERY != 0)
    assert one["examples"] + two["examples"] == clicks and 0 < one["examples"] < two["examples"]
    assert one["epsilon"] == two["epsilon"] == 2.0 and two["groups"] >= 1
    charges = {c["release_id"]: c for c in report["charges"]}
    assert charges[one["release_id"]]["examples"] == one["examples"]
    assert charges[two["release_id"]]["examples"] == two["examples"]
    assert all(c["epsilon"] == 2.0 for c in charges.values())
    rmse = report["test_rmse"]
    assert rmse["non_private"] <= min(rmse["one_stage"], rmse["two_stage"]) * 1.02
    assert "| one stage: every click released at ε" in (out / "feature-aware.md").read_text()
