"""The CLI's client commands against real services over HTTP and gRPC: upload, release (+ delivery),
feature upload, training; what they print; and their errors (a caller's mistake → exit 2, a refusal →
exit 1, a failed or unreachable service → exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from features_party.config import FeaturesSettings
from labeldp.cli import app
from labeldp.processes import free_port
from labeldp.samples import diamond_prices
from labeldp.terminal import number, numbers
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import (
    features_server_thread,
    features_tenant_key,
    labels_server_thread,
    tenant_key,
)

N = 6_000


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    ds = diamond_prices()
    ids = [f"d{i}" for i in range(N)]
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "example_id,label\n" + "".join(f"{i},{y}\n" for i, y in zip(ids, ds.labels[:N], strict=True))
    )
    features = tmp_path / "features.parquet"
    pq.write_table(ds.features.slice(0, N).append_column("example_id", pa.array(ids)), features)
    return {"labels": labels, "features": features}


def test_upload_release_deliver_and_train_from_the_cli(tmp_path: Path, files: dict[str, Path]) -> None:
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    _, labels_key = tenant_key(sqlite_url(labels_dir), "acme", "2")
    labels_settings = LabelsSettings(
        data_dir=labels_dir, database_url=sqlite_url(labels_dir), allow_plaintext=True, delivery_attempts=2
    )
    features_settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    features_key = features_tenant_key(features_settings, "pub")
    with labels_server_thread(labels_settings) as lbase, features_server_thread(features_settings) as fbase:
        a = httpx.Client(base_url=lbase, headers={"Authorization": f"Bearer {labels_key}"})
        f = httpx.Client(base_url=fbase, headers={"Authorization": f"Bearer {features_key}"})
        advertiser, publisher = a.get("/v1/identity").json(), f.get("/v1/identity").json()
        f.post(
            "/v1/senders", json={"id": advertiser["party_id"], "public_key_pem": advertiser["public_key_pem"]}
        ).raise_for_status()
        a.post(
            "/v1/recipients",
            json={"name": publisher["party_id"], "grpc_address": f"127.0.0.1:{publisher['grpc_port']}"},
        ).raise_for_status()
        spec = {
            "name": "prices",
            "label_type": "real",
            "lo": 0,
            "hi": 20000,
            "support": {"kind": "uniform", "k": 201},
        }
        a.post("/v1/datasets", json=spec).raise_for_status()
        L = ("--url", lbase, "--api-key", labels_key)
        F = ("--url", fbase, "--api-key", features_key)

        code, out, err = run("labels", "upload", str(files["labels"]), "--dataset", "prices", *L)
        assert code == 0, out
        assert f"{N:,} labels stored" in out
        assert err == ""  # stderr is no terminal here: no progress bar, not even an empty line
        code, out, err = run(
            "labels", "release", "--dataset", "prices", "--epsilon", "1", "--recipient", "publisher",
            "--idempotency-key", "k1", "--deliver", "--json", *L,
        )  # fmt: skip
        assert code == 0, err
        answer = json.loads(out)
        release = answer["release"]
        assert release["examples"] == N and answer["delivery"]["outcome"] == "delivered"
        # the same key again: the same release, nothing charged twice
        code, out, _ = run(
            "labels", "release", "--dataset", "prices", "--epsilon", "1", "--recipient", "publisher",
            "--idempotency-key", "k1", *L,
        )  # fmt: skip
        assert code == 0 and release["id"] in out
        assert "replayed: key k1 already made this release; nothing was charged again" in out
        assert answer["replayed"] is False  # the first answer was not a replay ...
        code, out, _ = run(
            "labels", "release", "--dataset", "prices", "--epsilon", "1", "--recipient", "publisher",
            "--idempotency-key", "k1", "--json", *L,
        )  # fmt: skip
        assert code == 0 and json.loads(out)["replayed"] is True  # ... the third is
        # budget 2, spent 1: ε = 1.5 more is refused with the server's code, exit 1
        code, out, err = run(
            "labels", "release", "--dataset", "prices", "--epsilon", "1.5", "--recipient", "publisher",
            "--json", *L,
        )  # fmt: skip
        assert code == 1 and "409 budget-exhausted" in err
        # --json writes ε as ε (not \u03b5), still valid JSON
        assert "ε = 1.5" in json.loads(out)["detail"] and "ε = 1.5" in out and "\\u03b5" not in out
        # a user-level release (no user_id column: every example is its own user, so τ = 1 keeps all)
        code, out, err = run(
            "labels", "release", "--dataset", "prices", "--privacy-unit", "user", "--epsilon-user", "0.5",
            "--contribution-bound", "1", "--recipient", "publisher", *L,
        )  # fmt: skip
        assert code == 0, err
        assert f"user-level: ε = 0.5 per user over {N:,} users, τ = 1 (1)" in out
        code, _, err = run(
            "labels", "release", "--dataset", "prices", "--privacy-unit", "user", "--epsilon", "0.5",
            "--contribution-bound", "1", "--recipient", "publisher", *L,
        )  # fmt: skip
        assert code == 2 and "--epsilon-user" in err

        code, out, err = run("features", "upload", str(files["features"]), "--table", "diamonds", *F)
        assert code == 0 and err == "", err
        assert f"{N:,} rows" in out
        code, out, err = run(
            "features", "train", "--release", release["id"], "--table", "diamonds", "--json", *F
        )
        assert code == 0 and err == "", err
        model = json.loads(out)
        assert model["status"] == "succeeded" and model["metrics"]["train_examples"] > 0
        prediction = f.post(f"/v1/models/{model['id']}/predictions", json={"example_ids": ["d1"]}).json()
        assert np.isfinite(prediction["predictions"][0])

        # errors: the server's code and message, exit 1; local mistakes, exit 2
        code, _, err = run("labels", "upload", str(files["labels"]), "--dataset", "nope", *L)
        assert code == 1 and "404 not-found" in err and "nope" in err
        bad = tmp_path / "bad.csv"
        bad.write_text("example_id,label\nx,1\nx,2\n")
        code, _, err = run("labels", "upload", str(bad), "--dataset", "prices", *L)
        assert code == 2 and "422 duplicate-example-id" in err  # the caller's data: a caller's mistake
        code, _, err = run(
            "labels",
            "upload",
            str(files["labels"]),
            "--dataset",
            "prices",
            "--url",
            lbase,
            "--api-key",
            "ldp_wrong",
        )
        assert code == 1 and "401" in err
        code, _, err = run("labels", "upload", str(files["labels"]), "--dataset", "prices", "--url", lbase)
        assert code == 2 and "LABELDP_API_KEY" in err
        odd = tmp_path / "labels.xlsx"
        odd.write_text("x")
        code, _, err = run("labels", "upload", str(odd), "--dataset", "prices", *L)
        assert code == 2 and ".parquet" in err
        code, _, err = run("labels", "upload", str(tmp_path / "missing.csv"), "--dataset", "prices", *L)
        assert code == 2
        code, _, err = run("features", "train", "--release", "nope", "--table", "diamonds", *F)
        assert code == 1 and "404" in err
        code, _, err = run(
            "labels",
            "upload",
            str(files["labels"]),
            "--dataset",
            "prices",
            "--url",
            "http://127.0.0.1:9",
            "--api-key",
            "k",
        )
        assert code == 3 and "unreachable" in err  # no answer: try again later


def test_version_and_short_help() -> None:
    from labeldp import __version__

    code, out, _ = run("--version")
    assert code == 0 and out.strip() == f"labeldp {__version__}"
    code, out, _ = run("audit", "-h")
    assert code == 0 and "attack" in out and "epsilon" in out


def test_every_resource_has_a_command_with_json_and_exit_codes(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """Identities, datasets, recipients and senders, releases, budget, ledger, feature tables, joins,
    models and predictions: each through the CLI, human and --json, with its error exits."""
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    _, labels_key = tenant_key(sqlite_url(labels_dir), "acme", "3")
    labels_settings = LabelsSettings(
        data_dir=labels_dir, database_url=sqlite_url(labels_dir), allow_plaintext=True
    )
    features_settings = FeaturesSettings(data_dir=tmp_path / "features", grpc_port=0, allow_plaintext=True)
    features_key = features_tenant_key(features_settings, "pub")
    with labels_server_thread(labels_settings) as lbase, features_server_thread(features_settings) as fbase:
        L = ("--url", lbase, "--api-key", labels_key)
        F = ("--url", fbase, "--api-key", features_key)

        def ok(*args: str) -> str:
            code, out, err = run(*args)
            assert code == 0, (args, out, err)
            return out

        (tmp_path / "advertiser.json").write_text(ok("labels", "identity", "--json", *L))
        (tmp_path / "publisher.json").write_text(ok("features", "identity", "--json", *F))
        assert "pinned" in ok(
            "features", "senders", "add", "--identity", str(tmp_path / "advertiser.json"), *F
        )
        out = ok("labels", "recipients", "add", "--identity", str(tmp_path / "publisher.json"),
                 "--grpc-host", "127.0.0.1", *L)  # fmt: skip
        assert "(plaintext)" in out
        assert json.loads(ok("features", "senders", "list", "--json", *F))[0]["id"] == "advertiser"
        assert "publisher" in ok("labels", "recipients", "list", *L).splitlines()[1]

        ds = ok("labels", "datasets", "create", "prices", "--label-type", "real", "--lo", "0",
                "--hi", "20000", "--support", "uniform:101", "-q", *L).strip()  # fmt: skip
        assert len(ds) == 36  # -q: the id alone
        ok("labels", "upload", str(files["labels"]), "--dataset", "prices", *L)
        shown = json.loads(ok("labels", "datasets", "show", "prices", "--json", *L))
        assert shown["id"] == ds and shown["label_count"] == N and shown["support_size"] == 101
        listing = ok("labels", "datasets", "list", *L).splitlines()
        assert listing[0].split()[:2] == ["NAME", "ID"] and listing[1].startswith("prices")
        rr = ("--mechanism", "rr_on_bins")  # bins to read (test_audit_cli reads the default's outputs)
        preview = json.loads(
            ok("labels", "preview", "--dataset", "prices", "--epsilon", "1", *rr, "--json", *L)
        )
        shown = ok("labels", "preview", "--dataset", "prices", "--epsilon", "1", *rr, *L).splitlines()
        # the bins as people read them: thousands separated, never mistaken for a list separator
        assert f"bins ({preview['m']}): {numbers(preview['bin_values'])}" in shown
        assert all("e+" not in line for line in shown)
        rel = ok("labels", "release", "--dataset", "prices", "--epsilon", "1", "--recipient", "publisher",
                 "--idempotency-key", "r1", *rr, "-q", *L).strip()  # fmt: skip
        released = json.loads(ok("labels", "releases", "list", "--dataset", ds, "--json", *L))[0]
        assert released["id"] == rel
        bins = f"bins ({len(released['bins'])}): {numbers(released['bins'])}"
        delivered = json.loads(ok("labels", "releases", "deliver", rel, "--json", *L))
        assert delivered["outcome"] == "delivered"
        show = ok("labels", "releases", "show", rel, *L).splitlines()  # the recipient by name, the bins
        prior = number(released["epsilon_prior"], 3)
        assert show[0].endswith(f"examples at ε = 1 (ε₁ = {prior}) to publisher")
        assert show[1:] == [bins, show[2]] and show[2].startswith("deliveries: delivered")
        [row] = ok("labels", "releases", "list", "--dataset", "prices", *L).splitlines()[1:]
        assert row.split()[:5] == [rel, "complete", "1", f"{N:,}", "publisher"]
        assert numbers(released["bins"]) in row
        # without --dataset: every dataset's releases, as GET /v1/releases, each with its dataset's name
        head, every = ok("labels", "releases", "list", *L).splitlines()
        assert head.split()[:3] == ["ID", "DATASET", "STATUS"]
        assert every.split()[:6] == [rel, "prices", "complete", "1", f"{N:,}", "publisher"]
        assert json.loads(ok("labels", "releases", "list", "--json", *L)) == [released]
        ok("labels", "releases", "download", rel, "-o", str(tmp_path / "noisy.parquet"), *L)
        assert pq.read_table(tmp_path / "noisy.parquet").num_rows == N
        budget = json.loads(ok("labels", "budget", "--dataset", "prices", "--epsilon", "2", "--json", *L))
        assert budget["max_spent"] == 1.0 and budget["can_take"] == N
        assert "can take ε = 2 more" in ok("labels", "budget", "--dataset", "prices", "--epsilon", "2", *L)
        assert [e["kind"] for e in json.loads(ok("labels", "ledger", "--json", *L))] == [
            "budget_set",
            "charge",
        ]

        assert json.loads(ok("features", "releases", "list", "--json", *F))[0]["release_id"] == rel
        received = ok("features", "releases", "show", rel, *F)
        assert received.rstrip().endswith(f"{N:,} examples at ε = 1")  # as the labels party writes ε
        uploaded = ok("features", "upload", str(files["features"]), "--table", "diamonds", *F)
        assert "columns carat (numeric), cut (categorical)" in uploaded and "{" not in uploaded
        assert json.loads(ok("features", "tables", "list", "--json", *F))[0]["name"] == "diamonds"
        assert f"{N:,} rows" in ok("features", "tables", "show", "diamonds", *F)
        assert f"{N:,} examples in both" in ok(
            "features", "join", "--release", rel, "--table", "diamonds", *F
        )
        model = ok("features", "train", "--release", rel, "--table", "diamonds", "-q", *F).strip()
        assert json.loads(ok("features", "models", "list", "--json", *F))[0]["id"] == model
        shown = ok("features", "models", "show", model, *F).splitlines()
        assert "succeeded" in shown[0] and "squared loss" in shown[0]
        metrics = json.loads(ok("features", "models", "show", model, "--json", *F))["metrics"]
        # one line per metric, named for people, with its unit (the machine names are in --json)
        assert len(shown) == 1 + len(metrics) and not any("_" in line for line in shown[1:])
        assert any(
            line.split()[:3] == ["training", "examples", f"{metrics['train_examples']:,}"] for line in shown
        )
        noisy = number(metrics["validation_loss_vs_noisy_labels"])
        root = number(metrics["validation_loss_vs_noisy_labels"] ** 0.5)
        assert any(
            line.lstrip().startswith("validation loss against the noisy labels")
            and f"{noisy} (mean squared error, label units²; root {root} label units)" in line
            for line in shown
        ), shown
        by_id = ok("features", "predict", model, "--ids", "d1,d2", *F).splitlines()
        assert [line.split("\t")[0] for line in by_id] == ["d1", "d2"]
        rows = tmp_path / "rows.json"
        rows.write_text(
            json.dumps(pq.read_table(files["features"]).slice(1, 2).drop_columns(["example_id"]).to_pylist())
        )
        answer = json.loads(ok("features", "predict", model, "--rows", str(rows), "--json", *F))
        assert answer["predictions"] == [float(line.split("\t")[1]) for line in by_id] or np.allclose(
            answer["predictions"], [float(line.split("\t")[1]) for line in by_id], rtol=1e-5
        )
        assert "bytes" in ok("features", "models", "download", model, "-o", str(tmp_path / "m.skops"), *F)
        assert (tmp_path / "m.skops").stat().st_size > 10_000

        # errors: the server's code (exit 1), local mistakes (exit 2), nothing half-written
        code, _, err = run("features", "models", "download", "nope", "-o", str(tmp_path / "x.skops"), *F)
        assert code == 1 and "404 not-found" in err and not list(tmp_path.glob("x.skops*"))
        code, _, err = run(
            "labels", "datasets", "create", "p2", "--label-type", "real", "--support", "grid:3", *L
        )
        assert code == 2 and "--support" in err
        code, _, err = run("labels", "datasets", "create", "prices", "--label-type", "count", "--lo", "0",
                           "--hi", "5", *L)  # fmt: skip
        assert code == 1 and "409 dataset-exists" in err
        (tmp_path / "junk.json").write_text("[1, 2]")
        code, _, err = run("features", "senders", "add", "--identity", str(tmp_path / "junk.json"), *F)
        assert code == 2 and "identity" in err
        code, _, err = run("features", "predict", model, *F)
        assert code == 2 and "--ids or --rows" in err
        code, _, err = run("labels", "releases", "show", "nope", *L)
        assert code == 1 and "404" in err


def test_an_invalid_request_names_the_option_and_its_bound_and_exits_2(tmp_path: Path) -> None:
    """The service's reasons reach the terminal, each named by the option that sent the field and with
    the bound the OpenAPI document declares; with --json the problem itself is on stdout. Exit codes say
    whose move it is: 2 the caller's (the request must change), 1 refused as things stand, 3 the
    service failed or was not reached."""
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    _, key = tenant_key(sqlite_url(labels_dir), "acme", "1")
    settings = LabelsSettings(
        data_dir=labels_dir, database_url=sqlite_url(labels_dir), allow_plaintext=True, delivery_attempts=1
    )
    with labels_server_thread(settings) as base:
        L = ("--url", base, "--api-key", key)
        schemas = httpx.get(f"{base}/openapi.json", timeout=60).json()["components"]["schemas"]
        least = schemas["ReleaseIn"]["properties"]["epsilon"]["anyOf"][0]["minimum"]
        most = schemas["PreviewIn"]["properties"]["epsilon"]["anyOf"][0]["maximum"]
        nobody = {"name": "publisher", "grpc_address": f"127.0.0.1:{free_port()}"}  # nothing listens there
        httpx.post(
            f"{base}/v1/recipients", json=nobody, headers={"Authorization": f"Bearer {key}"}
        ).raise_for_status()
        create = ("labels", "datasets", "create")
        code, _, err = run(*create, "prices", "--label-type", "real", "--lo", "0", "--hi", "100",
                           "--support", "uniform:11", *L)  # fmt: skip
        assert code == 0, err
        (tmp_path / "l.csv").write_text("example_id,label\n" + "".join(f"e{i},{i}\n" for i in range(50)))
        code, _, err = run("labels", "upload", str(tmp_path / "l.csv"), "--dataset", "prices", *L)
        assert code == 0, err

        release = ("labels", "release", "--dataset", "prices", "--recipient", "publisher", *L)
        for as_json in ((), ("--json",)):
            code, out, err = run(*release, "--epsilon", "0", *as_json)
            assert code == 2, err
            assert f"--epsilon: Input should be greater than or equal to {least:g}" in err
            if as_json:  # the problem as the service answered it, for scripts
                answer = json.loads(out)
                assert answer["type"] == "invalid-request"
                assert [e["loc"] for e in answer["errors"]] == [["body", "epsilon"]]
        code, _, err = run("labels", "preview", "--dataset", "prices", "--epsilon", str(most * 2), *L)
        assert code == 2 and f"--epsilon: Input should be less than or equal to {most:g}" in err
        code, _, err = run(*create, "p2", "--label-type", "reals", "--lo", "0", "--hi", "1", *L)
        assert code == 2 and "--label-type: Input should be 'real'" in err
        code, _, err = run(*create, "p3", "--label-type", "real", "--lo", "10", "--hi", "0", *L)
        assert code == 2 and "--hi: must be greater than lo (10)" in err
        code, _, err = run(*create, "p4", "--label-type", "real", "--lo", "0", "--hi", "1",
                           "--support", "uniform:1", *L)  # fmt: skip
        assert code == 2 and "--support (support.k): Input should be greater than or equal to 2" in err

        code, _, err = run(*release, "--epsilon", "2")  # over the budget of 1: refused, not a mistake
        assert code == 1 and "409 budget-exhausted" in err and "(1 left)" in err
        code, out, err = run(*release, "--epsilon", "0.5", "-q")
        assert code == 0, err
        code, out, err = run("labels", "releases", "deliver", out.strip(), "--json", *L)
        assert code == 3 and "502 delivery-failed" in err and json.loads(out)["status"] == 502
        code, out, err = run("labels", "datasets", "list", "--url", "http://127.0.0.1:9", "--api-key", "k",
                             "--json")  # fmt: skip
        assert code == 3 and "unreachable" in err and json.loads(out)["type"] == "unreachable"


def test_a_refused_upload_prints_its_first_rows_and_reason_never_their_values(tmp_path: Path) -> None:
    """Without --json too: the reason, then the first offending data rows (the first row after the
    header is 1, whether the row failed to parse or failed a check), and none of the values."""
    labels_dir = tmp_path / "labels"
    labels_dir.mkdir()
    _, key = tenant_key(sqlite_url(labels_dir), "acme", "1")
    settings = LabelsSettings(data_dir=labels_dir, database_url=sqlite_url(labels_dir), allow_plaintext=True)
    with labels_server_thread(settings) as base:
        L = ("--url", base, "--api-key", key)
        code, _, err = run("labels", "datasets", "create", "prices", "--label-type", "real", "--lo", "0",
                           "--hi", "100", "--support", "uniform:11", *L)  # fmt: skip
        assert code == 0, err
        rows_note = "(the first data row is 1, a header not counted)"
        cases = {
            "example_id,label\nk-1,1\nk-2,inf\nk-3,7\nk-4,nan\n": (
                "422 invalid-label: labels must be finite numbers",
                f"rows: 2, 4 {rows_note}",
            ),
            "example_id,label\nk-1,1\nk-2,150.5\n": (
                "422 out-of-bounds: labels outside the public bounds [0, 100]",
                f"rows: 2 {rows_note}",
            ),
            "example_id,label\nk-1,1\nk-2,2\nk-1,3\n": (
                "422 duplicate-example-id: 1 example IDs appear more than once",
                f"rows: 1, 3 {rows_note}",
            ),
            "example_id,label\nk-1,1\n,2\n": (
                "422 missing-example-id: example_id must not be empty",
                f"rows: 2 {rows_note}",
            ),
            "example_id,label\nk-1,1\nk-2,2,42.5\n": (
                "422 unparseable-upload: data row 2 has 3 fields; the header has 2",
                f"rows: 2 {rows_note}",
            ),
            "example_id;label\nk-1;1\n": (
                "422 missing-column: the upload needs an example_id column",
                "semicolons",
            ),
        }
        for i, (text, (reason, where)) in enumerate(cases.items()):
            path = tmp_path / f"bad{i}.csv"
            path.write_text(text)
            code, out, err = run("labels", "upload", str(path), "--dataset", "prices", *L)
            assert code == 2 and out == "", (text, err)
            assert err.startswith(f"error: {reason}") and where in err, (text, err)
            assert not any(v in err for v in ("inf", "nan", "150.5", "42.5", "k-")), (text, err)
        code, out, err = run("labels", "datasets", "show", "prices", "--json", *L)
        assert code == 0 and json.loads(out)["label_count"] == 0, err  # nothing stored
