"""``labeldp audit`` through the CLI: the features party's attack from files scored against the truth,
the black-box ε check against a live labels party (canaries), the labels party's own audit, and bad
input (exit 2, a clear message)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from labeldp.cli import app
from labeldp.mechanisms import PublishedMechanism, optimal_mechanism, sampler_of
from labeldp.samples import load
from labeldp.terminal import number, numbers
from tests.support.labels_api import Api, charges, with_recipient

N = 30_000


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def release_files(tmp_path: Path, epsilon: float = 2.0) -> tuple[dict[str, Path], PublishedMechanism]:
    """A weeks-worked release made with the library, as the files an auditor would hold."""
    ds = load("weeks")
    y = ds.labels[:N]
    counts = ds.support.counts(y).astype(float)
    mech = optimal_mechanism(ds.support, counts, epsilon, "squared")
    published = mech.describe(prior=counts / counts.sum(), epsilon_prior=0.1)
    ids = pa.array([f"w{i}" for i in range(N)])
    paths = {name: tmp_path / f"{name}.parquet" for name in ("noisy", "features")}
    paths["truth"], paths["release"] = tmp_path / "truth.csv", tmp_path / "release.json"
    pq.write_table(pa.table({"example_id": ids, "bin": pa.array(mech.randomize(y))}), paths["noisy"])
    pq.write_table(ds.features.slice(0, N).append_column("example_id", ids), paths["features"])
    paths["truth"].write_text(
        "example_id,label\n" + "".join(f"w{i},{v:g}\n" for i, v in enumerate(y.tolist()))
    )
    paths["release"].write_text(json.dumps({"id": "r1", "mechanism": published.model_dump(mode="json")}))
    return paths, published


def test_the_attack_from_files_is_scored_against_the_truth(tmp_path: Path) -> None:
    paths, published = release_files(tmp_path)
    args = ["--release", str(paths["release"]), "--released", str(paths["noisy"])]
    args += ["--features", str(paths["features"]), "--truth", str(paths["truth"])]
    code, out, err = run("audit", "attack", *args, "--json")
    assert code == 0, err
    report = json.loads(out)
    measured, exact = report["measured"], report["exact"]
    assert measured["examples"] == N
    # the release helps the attacker on weeks worked (2+ bins at ε = 2): the interval excludes 0
    assert measured["additive_advantage_low"] > 0
    assert measured["accuracy_with_release"] > measured["accuracy_without_release"]
    assert exact["additive_max"] <= published.worst_case_additive_advantage + 1e-12
    assert exact["multiplicative_max"] <= published.implemented_epsilon + 1e-9
    assert report["worst_case_additive_advantage"] == published.worst_case_additive_advantage
    assert 0 < exact["mse_reduction_share"] < 1
    code, out, _ = run("audit", "attack", *args)
    assert code == 0 and "measured additive advantage" in out and "worst case over all priors" in out


def test_bad_audit_inputs_exit_2_with_a_clear_message(tmp_path: Path) -> None:
    paths, _ = release_files(tmp_path)
    no_label = tmp_path / "no-label.csv"
    no_label.write_text("example_id,value\nw1,3\n")
    base = ["--release", str(paths["release"]), "--released", str(paths["noisy"]), "--features"]
    code, _, err = run("audit", "attack", *base, str(paths["features"]), "--truth", str(no_label))
    assert code == 2 and "truth needs the column(s) label" in err
    garbage = tmp_path / "garbage.json"
    garbage.write_text('{"mechanism": {"kind": "nonsense"}}')
    args = [
        "--release",
        str(garbage),
        "--released",
        str(paths["noisy"]),
        "--features",
        str(paths["features"]),
    ]
    code, _, err = run("audit", "attack", *args, "--truth", str(paths["truth"]))
    assert code == 2 and "not a release or published mechanism" in err
    text = tmp_path / "features.txt"
    text.write_text("x")
    args = ["--release", str(paths["release"]), "--released", str(paths["noisy"]), "--features", str(text)]
    code, _, err = run("audit", "attack", *args, "--truth", str(paths["truth"]))
    assert code == 2 and "use a .csv or .parquet file" in err


def test_the_canary_check_bounds_a_live_services_epsilon(api: Api) -> None:
    """300,000 canaries through the real labels party: the bound is below the implemented ε and
    within 10% of it, and exactly the canaries were charged, ε each."""
    c = with_recipient(api.tenant("acme", "3"))
    key = c.headers["Authorization"].removeprefix("Bearer ")
    common = ["--url", api.base, "--api-key", key, "--recipient", "publisher"]
    code, out, err = run("audit", "epsilon", *common, "--epsilon", "1", "--canaries", "300000", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["passed"] and result["canaries"] == 300_000
    assert 0.9 * result["implemented_epsilon"] <= result["epsilon_low"] <= result["implemented_epsilon"]
    spent = charges(c)
    assert len(spent) == 1 and spent[0]["examples"] == 300_000 and spent[0]["epsilon"] == 1.0

    code, out, err = run("audit", "release", result["release_id"], "--url", api.base, "--api-key", key)
    assert code == 0, err
    assert "worst-case additive advantage" in out
    assert len(charges(c)) == 1  # auditing is free

    code, _, err = run("audit", "epsilon", *common, "--canaries", "10")
    assert code != 0 and "canaries must be between" in err
    assert len(charges(c)) == 1


def test_the_epsilon_check_fails_loudly_for_a_mechanism_spending_more_than_claimed() -> None:
    """The verdict logic: a bound above the claim is a failure (the library test drives a broken
    sampler through it; here the report's ``passed`` flag follows the comparison)."""
    from labeldp.audit.canaries import CanaryAudit

    ok = CanaryAudit("r", 10, 1.0, 0.99, 0.95, 1e-6, {})
    broken = CanaryAudit("r", 10, 1.0, 0.99, 1.2, 1e-6, {})
    assert ok.passed and not broken.passed and broken.as_dict()["passed"] is False
    assert np.isfinite(ok.epsilon_low)


def test_the_preview_prints_expected_error_and_attack_bounds_and_charges_nothing(api: Api) -> None:
    c = with_recipient(api.tenant("acme", "3"))
    key = c.headers["Authorization"].removeprefix("Bearer ")
    ds = c.post("/v1/datasets", json={"name": "weeks", "label_type": "count", "lo": 0, "hi": 9}).json()["id"]
    body = "example_id,label\n" + "".join(f"e{i},{(i * i) % 10}\n" for i in range(5000))
    c.put(f"/v1/datasets/{ds}/labels", content=body, headers={"Content-Type": "text/csv"}).raise_for_status()
    common = ["--url", api.base, "--api-key", key, "--dataset", "weeks"]
    for mechanism in ("rr_on_bins", "unbiased"):  # the latter: the default here
        named = ["--mechanism", mechanism] if mechanism == "rr_on_bins" else []
        code, out, err = run("labels", "preview", *common, "--epsilon", "2", *named, "--json")
        assert code == 0, err
        preview = json.loads(out)
        published = PublishedMechanism.model_validate(preview["mechanism"])
        assert published.kind == mechanism
        assert sampler_of(published).expected_loss(published.support, preview["mechanism"]["prior"]) >= 0
        code, out, err = run("labels", "preview", *common, "--epsilon", "2", *named)
        assert code == 0, err
        expected = preview["expected_loss"]
        assert f"{number(expected, 6)} (root: {number(expected**0.5)})" in out
        if mechanism == "rr_on_bins":
            assert f"bins ({preview['m']}): {numbers(preview['bin_values'])}" in out
        else:
            assert "unbiased: ε = 2" in out and f"{preview['m']} outputs from " in out
        assert f"{published.worst_case_additive_advantage:.3f}" in out
    assert charges(c) == []  # previews are free
    code, _, err = run("labels", "preview", *common, "--epsilon", "-1")
    assert code == 2 and "invalid" in err and "--epsilon" in err  # the caller's mistake
    code, _, err = run("labels", "preview", *common[:4], "--dataset", "nope", "--epsilon", "1")
    assert code == 1 and "not-found" in err
