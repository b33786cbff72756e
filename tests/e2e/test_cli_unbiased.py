"""``--mechanism unbiased`` from the CLI against a real labels service: the preview prints the unbiased
randomizer's expected variance beside RR-on-Bins's expected loss, the release prints its outputs'
range, and a loss or ε it cannot serve is the caller's mistake (exit 2), charging nothing."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from typer.testing import CliRunner

from labeldp.cli import app
from labeldp.terminal import number
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import labels_server_thread, tenant_key


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_preview_and_release_with_the_unbiased_randomizer(tmp_path: Path) -> None:
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    _, key = tenant_key(sqlite_url(labels_dir), "acme", "5")
    settings = LabelsSettings(data_dir=labels_dir, database_url=sqlite_url(labels_dir), allow_plaintext=True)
    with labels_server_thread(settings) as base:
        L = ("--url", base, "--api-key", key)

        def ok(*args: str) -> str:
            code, out, err = run(*args)
            assert code == 0, (args, out, err)
            return out

        ok("labels", "datasets", "create", "counts", "--label-type", "count", "--lo", "0", "--hi", "9", *L)
        (tmp_path / "l.csv").write_text(
            "example_id,label\n" + "".join(f"e{i},{i % 10}\n" for i in range(2_000))
        )
        ok("labels", "upload", str(tmp_path / "l.csv"), "--dataset", "counts", *L)
        preview = ("labels", "preview", "--dataset", "counts", "--epsilon", "2", "--mechanism", "unbiased")
        answer = json.loads(ok(*preview, "--json", *L))
        assert answer["mechanism"]["kind"] == "unbiased"
        shown = ok(*preview, *L)
        assert shown.startswith("unbiased: ε = 2")
        rr, variance = answer["rr_on_bins_expected_loss"], answer["unbiased_expected_variance"]
        assert (
            f"side by side: RR-on-Bins's expected squared loss {number(rr, 6)}, "
            f"the unbiased randomizer's expected variance {number(variance, 6)}"
        ) in shown
        outputs = answer["mechanism"]["bin_values"]
        assert f"{len(outputs)} outputs from {number(outputs[0])} to {number(outputs[-1])}" in shown

        recipient = {"name": "publisher", "grpc_address": "127.0.0.1:1"}  # never delivered to here
        httpx.post(
            f"{base}/v1/recipients", json=recipient, headers={"Authorization": f"Bearer {key}"}
        ).raise_for_status()
        release = ("labels", "release", "--dataset", "counts", "--epsilon", "2", "--recipient", "publisher",
                   "--mechanism", "unbiased", *L)  # fmt: skip
        made = json.loads(ok(*release, "--idempotency-key", "u1", "--json"))["release"]
        assert made["mechanism"]["kind"] == "unbiased"
        values = made["bins"]
        assert f"unbiased: {len(values)} outputs from {number(values[0])} to {number(values[-1])}" in ok(
            *release, "--idempotency-key", "u1"
        )  # the same release, replayed
        code, _, err = run(*release, "--loss", "absolute", "--idempotency-key", "u2")
        assert code == 2 and "the unbiased randomizer serves the losses squared, poisson" in err, err
        code, _, err = run(*release, "--epsilon", "25", "--idempotency-key", "u3")
        assert code == 2 and "numerically safe" in err, err
        ledger = httpx.get(f"{base}/v1/ledger", headers={"Authorization": f"Bearer {key}"}).json()["items"]
        assert [e["kind"] for e in ledger].count("charge") == 1
