"""Feature-aware releases end to end: the publisher's model, trained on a stage-1 release, prices the
advertiser's other examples (stored priors), and a stage-2 release randomizes each with its group's
mechanism — through the labels party's REST API, with a real features party over gRPC.

The privacy argument (docs/math.md §14) is checked on neighbouring datasets: two datasets that differ
in one label, priced by the same model (the stage-1 release held fixed), publish the same groups, the
same group mechanisms and the same ledger charges — everything but that example's noisy label."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from labeldp.common.wire.records import read_records
from labeldp.mechanisms import PublishedMechanism, priors_verdict, resolve_loss
from labeldp.samples import weeks_worked
from labeldp.v1 import delivery_pb2 as pb
from labels_party.storage.data_dir import DataDir
from tests.support.labels_api import problem
from tests.support.priors import RELEASED, SUPPORT, WITH_FEATURES, Parties, _csv, two_parties


@pytest.fixture(scope="module")
def parties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parties]:
    with two_parties(tmp_path_factory.mktemp("feature-aware")) as found:
        assert found.grant(max_groups=16).status_code == 200
        yield found


def priced(p: Parties, dataset_id: str, ids: list[str], max_groups: int = 16) -> dict[str, Any]:
    r = p.labels.post(
        f"/v1/datasets/{dataset_id}/priors",
        json={"recipient": "publisher", "example_ids": ids, "max_groups": max_groups},
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def preview_on(p: Parties, dataset_id: str, ids: list[str], priors_id: str) -> dict[str, Any]:
    """The free preview of a release of ``ids`` at ε = 1 on stored priors."""
    r = p.labels.post(
        f"/v1/datasets/{dataset_id}/releases:preview",
        json={
            "epsilon": 1.0,
            "recipient": "publisher",
            "example_ids": ids,
            "prior": {"from": "features-party", "priors_id": priors_id},
        },
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def release(p: Parties, dataset_id: str, key: str, **body: Any) -> httpx.Response:
    return p.labels.post(
        f"/v1/datasets/{dataset_id}/releases",
        json={"epsilon": 1.0, "recipient": "publisher", **body},
        headers={"Idempotency-Key": key},
    )


def output(p: Parties, release_id: str) -> pa.Table:
    r = p.labels.get(f"/v1/releases/{release_id}/noisy-labels")
    assert r.status_code == 200, r.text
    return pq.read_table(pa.BufferReader(r.content))


def ledger_of(p: Parties, release_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        e
        for e in p.labels.get("/v1/ledger", params={"limit": 1000}).json()["items"]
        if e.get("release_id") == release_id
    ]
    return rows


def header_of(p: Parties, release_id: str) -> pb.ReleaseHeader:
    """The signed header of the release's stored message, as the features party will receive it."""
    path = DataDir(p.labels_settings.data_dir).message(release_id)
    first = pb.ReleaseFrame.FromString(next(iter(read_records(path))))
    return pb.ReleaseHeader.FromString(first.header.header)


STAGE_2 = slice(RELEASED, WITH_FEATURES)  # examples with features the stage-1 release did not list


def test_a_stage_2_release_takes_each_examples_group_mechanism_at_the_whole_epsilon(parties: Parties) -> None:
    ids = parties.ids[STAGE_2]
    priors = priced(parties, parties.dataset_id, ids)
    before = parties.labels.get(f"/v1/datasets/{parties.dataset_id}/budget").json()
    r = release(
        parties,
        parties.dataset_id,
        "stage-2",
        example_ids=ids,
        prior={"from": "features-party", "priors_id": priors["id"]},
    )
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["status"] == "complete" and made["priors_id"] == priors["id"]
    assert made["examples"] == len(ids) and made["epsilon_prior"] == 0.0  # every example has a group: no ε₁

    table = output(parties, made["id"])
    assert table.column_names == ["example_id", "bin", "group"]
    stored = parties.labels.get(f"/v1/priors/{priors['id']}").json()
    groups = np.asarray(table.column("group").to_numpy(), dtype=np.int64)
    assert (groups >= 0).all() and groups.max() < stored["groups"]

    listed = parties.labels.get(f"/v1/releases/{made['id']}/groups").json()["items"]
    assert [g["group"] for g in listed] == list(range(stored["groups"]))
    assert sum(g["examples"] for g in listed) == len(ids)
    for g, given in zip(listed, stored["group_priors"], strict=True):
        m = g["mechanism"]
        assert m["epsilon"] == m["epsilon_randomize"] == 1.0 and m["epsilon_prior"] == 0.0
        assert np.allclose(m["prior"], given["masses"], rtol=0, atol=1e-12)  # optimal for the group's prior
        assert m["implemented_epsilon"] <= 1.0
    bins = np.asarray(table.column("bin").to_numpy(), dtype=np.int64)
    for g in listed:  # each example's bin counts within its own group's bins
        at = groups == g["group"]
        assert not at.any() or int(bins[at].max()) < len(g["mechanism"]["bin_values"])

    header = header_of(parties, made["id"])
    assert header.priors_id == priors["id"] and len(header.groups) == stored["groups"]
    assert [list(h.prior) for h in header.groups] == [g["mechanism"]["prior"] for g in listed]

    charged = ledger_of(parties, made["id"])
    assert (
        len(charged) == 1 and charged[0]["epsilon_micro"] == 1_000_000 and charged[0]["examples"] == len(ids)
    )
    after = parties.labels.get(f"/v1/datasets/{parties.dataset_id}/budget").json()
    assert after != before

    audit = parties.labels.get(f"/v1/releases/{made['id']}/audit").json()
    assert {g["group"] for g in audit["groups"]} == {g["group"] for g in listed if g["examples"]}
    assert sum(g["examples"] for g in audit["groups"]) == audit["examples"] == len(ids)
    assert audit["max_multiplicative_advantage"] <= 1.0 + 1e-12
    assert (
        max(g["max_multiplicative_advantage"] for g in audit["groups"])
        == audit["max_multiplicative_advantage"]
    )


def test_examples_without_a_group_fall_back_to_the_releases_own_private_prior(parties: Parties) -> None:
    """Priced examples without features (the publisher has none for them) get no group: they are released
    by the release's own mechanism, on a private prior of their labels only, charged as today."""
    ids = parties.ids[WITH_FEATURES - 300 :]  # 300 with features, 200 without
    priors = priced(parties, parties.dataset_id, ids)
    made = release(
        parties,
        parties.dataset_id,
        "with-fallback",
        example_ids=ids,
        prior={"from": "features-party", "priors_id": priors["id"]},
    )
    assert made.status_code == 201, made.text
    body = made.json()
    groups = np.asarray(output(parties, body["id"]).column("group").to_numpy(), dtype=np.int64)
    assert (groups[:300] >= 0).all() and (groups[300:] == -1).all()
    assert 0 < body["epsilon_prior"] < 1.0  # ε₁ of the 200 fallback examples
    assert body["mechanism"]["epsilon_prior"] == body["epsilon_prior"]
    assert ledger_of(parties, body["id"])[0]["epsilon_micro"] == 1_000_000


def test_the_preview_shows_what_the_priors_buy_and_charges_nothing(parties: Parties) -> None:
    ids = parties.ids[STAGE_2]
    priors = priced(parties, parties.dataset_id, ids)
    before = parties.labels.get("/v1/ledger").json()["items"]
    body = preview_on(parties, parties.dataset_id, ids, priors["id"])
    assert body["groups"] == parties.labels.get(f"/v1/priors/{priors['id']}").json()["groups"]
    assert body["examples_with_group"] == len(ids)
    # the model's priors are informative about weeks worked: the grouped release loses less
    assert body["expected_loss"] < body["expected_loss_without_priors"]
    # the public rule, recomputed here from the stored priors alone (docs/math.md §14)
    detail = parties.labels.get(f"/v1/priors/{priors['id']}").json()["group_priors"]
    sizes, masses = [g["examples"] for g in detail], [g["masses"] for g in detail]
    expected = priors_verdict(masses, sizes, SUPPORT, 1.0, "squared")
    verdict = body["priors_verdict"]
    assert verdict["with_priors"] == pytest.approx(expected.with_priors, rel=1e-9)
    assert verdict["without_priors"] == pytest.approx(expected.without_priors, rel=1e-9)
    assert (verdict["mechanism_without"], verdict["pays"]) == (expected.mechanism_without, expected.pays)
    assert parties.labels.get("/v1/ledger").json()["items"] == before


def test_the_preview_states_the_loss_of_the_group_mechanisms_the_release_then_publishes(
    parties: Parties,
) -> None:
    """The preview optimizes each group's mechanism itself (labels_party/releases/service.py) and the
    release in labeldp.mechanisms.grouped: the preview's expected loss per example must be exactly the
    one of the group mechanisms the release publishes, each under the labels its group holds, computed
    here from the published thresholds. A preview that optimized at another ε or objective than the
    release — their one seam — fails."""
    ids = parties.ids[STAGE_2]
    labels = weeks_worked().labels[: len(parties.ids)][STAGE_2]
    priors = priced(parties, parties.dataset_id, ids)
    request = {"example_ids": ids, "prior": {"from": "features-party", "priors_id": priors["id"]}}
    shown = parties.labels.post(
        f"/v1/datasets/{parties.dataset_id}/releases:preview",
        json={"epsilon": 1.0, "recipient": "publisher", **request},
    )
    assert shown.status_code == 200, shown.text
    assert shown.json()["examples_with_group"] == len(ids)  # every example by its group's mechanism
    made = release(parties, parties.dataset_id, "preview-then-release", **request)
    assert made.status_code == 201, made.text
    table = output(parties, made.json()["id"])
    group_of = dict(
        zip(table.column("example_id").to_pylist(), table.column("group").to_pylist(), strict=True)
    )
    groups = np.asarray([group_of[i] for i in ids], dtype=np.int64)
    total = 0.0
    for g in parties.labels.get(f"/v1/releases/{made.json()['id']}/groups").json()["items"]:
        mechanism = PublishedMechanism.model_validate(g["mechanism"])
        counts = np.bincount(labels[groups == g["group"]].astype(np.int64), minlength=len(SUPPORT))
        ell = resolve_loss(mechanism.loss)
        losses = ell(np.asarray(mechanism.bin_values)[None, :], np.asarray(SUPPORT)[:, None])
        rows = mechanism.transition_matrix()
        total += float(counts @ np.einsum("ij,ij->i", rows, np.where(rows > 0, losses, 0.0)))
    assert shown.json()["expected_loss"] == pytest.approx(total / len(ids), rel=1e-9)


def test_priors_that_do_not_fit_the_release_are_refused_before_anything_is_charged(parties: Parties) -> None:
    ids = parties.ids[STAGE_2]
    priors = priced(parties, parties.dataset_id, ids[:400])
    ledger = parties.labels.get("/v1/ledger").json()["items"]
    releases = parties.labels.get("/v1/releases").json()["items"]
    cases = [
        (ids[:200], priors["id"], 422, "priors-mismatch"),  # the priors name examples not listed
        (ids[:400], "00000000-0000-4000-8000-000000000000", 422, "unknown-priors"),
    ]
    for listed, priors_id, status, code in cases:
        r = release(
            parties,
            parties.dataset_id,
            f"bad-{code}",
            example_ids=listed,
            prior={"from": "features-party", "priors_id": priors_id},
        )
        body = problem(r, status, code)
        assert body["parameter"] == "prior"
    bad = release(
        parties,
        parties.dataset_id,
        "bad-shape",
        example_ids=ids[:400],
        prior={"from": "somewhere", "priors_id": priors["id"]},
    )
    assert bad.status_code == 422
    other = parties.labels_tenant("other-advertiser")  # another tenant's priors are unknown to it
    ds = other.post("/v1/datasets", json={"name": "w", "label_type": "count", "lo": 0, "hi": 52}).json()["id"]
    other.put(
        f"/v1/datasets/{ds}/labels",
        content=_csv(ids[:400], np.zeros(400)),
        headers={"Content-Type": "text/csv"},
    )
    assert other.post("/v1/recipients", json=parties.recipient()).status_code == 201
    r = other.post(
        f"/v1/datasets/{ds}/releases",
        json={
            "epsilon": 1.0,
            "recipient": "publisher",
            "prior": {"from": "features-party", "priors_id": priors["id"]},
        },
        headers={"Idempotency-Key": "foreign"},
    )
    problem(r, 422, "unknown-priors")
    assert [e["kind"] for e in other.get("/v1/ledger").json()["items"]] == ["budget_set"]
    assert parties.labels.get("/v1/ledger").json()["items"] == ledger
    assert parties.labels.get("/v1/releases").json()["items"] == releases


def test_neighbouring_datasets_publish_the_same_groups_mechanisms_and_charges(parties: Parties) -> None:
    """Two datasets that differ in one example's label, priced by the same model (the stage-1 release
    held fixed): the stored priors, each example's group, every group's mechanism, the ledger rows and
    the preview's verdict of whether the priors pay (what the loop decides stage 2 by) are identical —
    only the changed example's noisy label may differ."""
    ids = parties.ids[STAGE_2]
    base = np.arange(len(ids)) % 53
    changed = base.copy()
    changed[7] = (changed[7] + 26) % 53  # one label moved far
    seen = []
    for name, labels in (("D", base), ("D-prime", changed)):
        ds = parties.labels.post(
            "/v1/datasets", json={"name": name, "label_type": "count", "lo": 0, "hi": 52}
        ).json()["id"]
        up = parties.labels.put(
            f"/v1/datasets/{ds}/labels", content=_csv(ids, labels), headers={"Content-Type": "text/csv"}
        )
        assert up.status_code in (200, 201), up.text
        priors = priced(parties, ds, ids)
        detail = parties.labels.get(f"/v1/priors/{priors['id']}").json()
        made = release(
            parties,
            ds,
            f"neighbour-{name}",
            example_ids=ids,
            prior={"from": "features-party", "priors_id": priors["id"]},
        )
        assert made.status_code == 201, made.text
        rel = made.json()
        table = output(parties, rel["id"])
        groups = parties.labels.get(f"/v1/releases/{rel['id']}/groups").json()["items"]
        charges = [
            {k: v for k, v in e.items() if k in ("epsilon_micro", "examples", "kind")}
            for e in ledger_of(parties, rel["id"])
        ]
        header = header_of(parties, rel["id"])
        preview = preview_on(parties, ds, ids, priors["id"])
        seen.append(
            {
                "priors": (
                    {
                        k: detail[k]
                        for k in ("groups", "group_priors", "group_sizes", "rule", "model_id")
                        if k in detail
                    }
                ),
                "ids": table.column("example_id").to_pylist(),
                "groups": table.column("group").to_pylist(),
                "mechanisms": groups,
                "charges": charges,
                "release": {k: rel[k] for k in ("epsilon", "epsilon_prior", "examples", "loss", "mechanism")},
                "header_groups": [g.SerializeToString(deterministic=True) for g in header.groups],
                "bins": table.column("bin").to_pylist(),
                "verdict": preview["priors_verdict"],  # the loop's choice: no label read
            }
        )
    first, second = seen
    for key in ("priors", "ids", "groups", "mechanisms", "charges", "release", "header_groups", "verdict"):
        assert first[key] == second[key], key
    assert len(first["bins"]) == len(ids)


def test_the_cli_recipe_prices_previews_releases_and_shows_the_groups(
    parties: Parties, tmp_path: Path
) -> None:
    """The documented recipe (docs/guides/advertiser.md): fetch priors for a file of IDs, preview and
    release on them, show the release's groups — the CLI against the two real parties."""
    from typer.testing import CliRunner

    from labeldp.cli import app

    def run(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(app, list(args))
        return result.exit_code, result.stdout, result.stderr

    L = (
        "--url",
        parties.labels_base,
        "--api-key",
        parties.labels.headers["Authorization"].removeprefix("Bearer "),
    )
    ids = tmp_path / "stage-2.txt"
    ids.write_text("\n".join(parties.ids[STAGE_2][:500]) + "\n")
    code, out, err = run(
        "labels",
        "priors",
        "fetch",
        "--dataset",
        "weeks",
        "--recipient",
        "publisher",
        "--example-ids",
        str(ids),
        "-q",
        *L,
    )
    assert code == 0, err
    pid = out.strip()
    assert parties.labels.get(f"/v1/priors/{pid}").json()["examples_requested"] == 500
    code, out, err = run(
        "labels",
        "preview",
        "--dataset",
        "weeks",
        "--epsilon",
        "1",
        "--priors",
        pid,
        "--example-ids",
        str(ids),
        *L,
    )
    assert code == 0, err
    assert "with priors: 500 examples in" in out and "without the priors the expected squared error" in out
    code, out, err = run(
        "labels", "release", "--dataset", "weeks", "--recipient", "publisher", "--epsilon", "1",
        "--priors", pid, "--example-ids", str(ids), "--json", *L,
    )  # fmt: skip
    assert code == 0, err
    made = json.loads(out)["release"]
    assert made["priors_id"] == pid and made["examples"] == 500
    code, out, err = run("labels", "releases", "show", made["id"], *L)
    assert code == 0, err
    groups = parties.labels.get(f"/v1/releases/{made['id']}/groups").json()["items"]
    used = [g for g in groups if g["examples"]]
    assert f"feature-aware (priors {pid}): 500 examples in {len(used)} of {len(groups)} groups" in out


def test_a_user_level_release_on_priors_keeps_its_bounding_split_and_charges(parties: Parties) -> None:
    """The seam of user-level releases and priors: which examples are kept (≤ τ per user) and what every
    user and example is charged are as without priors; the noisy prior is still drawn at ε₁ (the
    examples without a group and τ need it); kept examples with a group are randomized by their group's
    mechanism at the release's ε₂, which states the same ε₁; examples over τ get no group."""
    ids = parties.ids[STAGE_2][:600]
    users = [f"u{i // 5}" for i in range(len(ids))]  # 120 users of 5 examples each
    body = "example_id,label,user_id\n" + "".join(
        f"{e},{i % 53},{u}\n" for i, (e, u) in enumerate(zip(ids, users, strict=True))
    )
    ds = parties.labels.post(
        "/v1/datasets", json={"name": "weeks-users", "label_type": "count", "lo": 0, "hi": 52}
    ).json()["id"]
    up = parties.labels.put(
        f"/v1/datasets/{ds}/labels", content=body.encode(), headers={"Content-Type": "text/csv"}
    )
    assert up.status_code in (200, 201), up.text
    priors = priced(parties, ds, ids)
    made = parties.labels.post(
        f"/v1/datasets/{ds}/releases",
        json={
            "privacy_unit": "user",
            "epsilon_user": 2.0,
            "contribution_bound": 2,
            "recipient": "publisher",
            "prior": {"from": "features-party", "priors_id": priors["id"]},
        },
        headers={"Idempotency-Key": "user-level-on-priors"},
    )
    assert made.status_code == 201, made.text
    rel = made.json()
    assert rel["privacy_unit"] == "user" and rel["priors_id"] == priors["id"] and rel["users"] == 120
    assert rel["examples_capped"] == 600 - 240 and 0 < rel["epsilon_prior"] < 2.0
    own = rel["mechanism"]
    table = output(parties, rel["id"])
    groups = np.asarray(table.column("group").to_numpy(), dtype=np.int64)
    bins = np.asarray(table.column("bin").to_numpy(), dtype=np.int64)
    capped = (groups == -1) & (bins == len(own["bin_values"]))
    assert int(capped.sum()) == 360 and int((groups >= 0).sum()) == 240  # every kept example is priced
    kept_per_user: dict[str, int] = {}
    for e, g in zip(table.column("example_id").to_pylist(), groups, strict=True):
        if g >= 0:
            u = users[ids.index(e)]
            kept_per_user[u] = kept_per_user.get(u, 0) + 1
    assert set(kept_per_user.values()) == {2} and len(kept_per_user) == 120
    for g in parties.labels.get(f"/v1/releases/{rel['id']}/groups").json()["items"]:
        m = g["mechanism"]
        assert m["privacy_unit"] == "user" and m["contribution_bound"] == 2
        assert (
            m["epsilon_randomize"] == own["epsilon_randomize"] and m["epsilon_prior"] == own["epsilon_prior"]
        )
    [entry] = ledger_of(parties, rel["id"])
    assert entry["examples"] == 240 and entry["users"] == 120 and entry["user_epsilon"] == 2.0
