"""``labeldp demo --feature-aware``: the two-stage loop through both parties' public APIs.

stage 1 (a keyed hash of each click's ID picks ``STAGE_1`` of them: no label is read) → the publisher
trains on it → it grants that model to price the advertiser's examples → the advertiser fetches the
priors of the other clicks → stage 2 releases them with one mechanism per group at the whole ε → the
publisher trains on both releases → the model is scored on held-out clicks against their true labels,
beside the same model on a one-stage release of every click at the same ε (drawn here with the
service's own release code, charged nowhere) and on the raw labels. Every click is released once, at
ε: the ledger shows two charges of ε over disjoint examples.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from labeldp.client import FeaturesClient, LabelsClient
from labeldp.demo.flow import LOSS, _local_model, _upload, register
from labeldp.demo.parties import Connection
from labeldp.demo.world import World
from labeldp.mechanisms import PublishedMechanism, release_labels
from labeldp.mechanisms.debias import UnbiasedNoise, release_noise

STAGE_1 = 0.2
MAX_LISTED = 100_000  # example IDs a release or a priors request may list
GROUPS = 32
STEPS = 7


def stage_1_ids(ids: list[str], fraction: float = STAGE_1, key: bytes | None = None) -> set[str]:
    """A keyed hash of each ID below ``fraction``: which clicks stage 1 lists, chosen without reading
    a label (the key is fresh per run, so nobody can aim a click at a stage)."""
    key = key or secrets.token_bytes(16)
    cut = int(fraction * 2**64)
    return {
        i
        for i in ids
        if int.from_bytes(hashlib.blake2b(i.encode(), key=key, digest_size=8).digest(), "little") < cut
    }


@dataclass
class FeatureAwareReport:
    dataset: str
    run_id: str
    epsilon: float
    values: dict[str, Any] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "run_id": self.run_id,
            "epsilon": self.epsilon,
            **self.values,
            "timings_s": self.timings_s,
        }

    def markdown(self) -> str:
        v = self.values
        rmse = v["test_rmse"]
        one, two, raw = rmse["one_stage"], rmse["two_stage"], rmse["non_private"]
        closed = (one - two) / (one - raw) if one > raw else 0.0
        lines = [
            f"# Feature-aware demo: {self.dataset} at ε = {self.epsilon:g} (run {self.run_id})",
            "",
            "| model (the publisher's gradient boosting) | test RMSE on true labels |",
            "|---|---|",
            f"| one stage: every click released at ε (one mechanism) | {one:,.4g} |",
            f"| two stages: {v['stage_1']['examples']:,} clicks, then {v['stage_2']['examples']:,} "
            f"with the publisher's priors ({v['stage_2']['groups']} groups) | {two:,.4g} |",
            f"| non-private (the raw labels) | {raw:,.4g} |",
            "",
            (
                f"The two-stage loop closed {closed:.0%} of the gap between the one-stage model and the "
                "non-private one."
                if closed > 0
                else f"The two-stage loop did not beat one stage here ({two / one - 1:+.0%} RMSE)."
            ),
            "",
            "| stage | examples | ε charged per example | ε₁ (noisy prior) |",
            "|---|---|---|---|",
        ]
        for name in ("stage_1", "stage_2"):
            s = v[name]
            stage = name.replace("_", " ")
            lines.append(f"| {stage} | {s['examples']:,} | {s['epsilon']:g} | {s['epsilon_prior']:.3g} |")
        return "\n".join(lines) + "\n"


class _Steps:
    def __init__(self, console: Console, report: FeatureAwareReport) -> None:
        self.console, self.report, self.n = console, report, 0

    def start(self, key: str, title: str) -> float:
        self.n += 1
        self.console.print(f"[bold cyan][{self.n}/{STEPS}][/] {title}")
        return time.monotonic()

    def done(self, key: str, started: float) -> None:
        self.report.timings_s[key] = round(time.monotonic() - started, 2)

    def say(self, text: str) -> None:
        self.console.print(f"      {text}")


def _train(features: FeaturesClient, release_ids: list[str], table: str) -> dict[str, Any]:
    job = features.train(release_ids[0], table, also_release_ids=release_ids[1:])
    features.wait_for_job(job["id"])
    return dict(features.model(job["id"]))


def run_feature_aware_flow(
    conn: Connection, world: World, epsilon: float, workdir: Path, console: Console
) -> FeatureAwareReport:
    report = FeatureAwareReport(world.dataset.name, world.run_id, epsilon)
    steps = _Steps(console, report)
    labels = LabelsClient(conn.labels_url, conn.labels_key)
    features = FeaturesClient(conn.features_url, conn.features_key)
    with labels, features:
        at = steps.start("setup", "registering the parties and uploading labels and features over REST")
        advertiser, publisher = register(labels, features, conn)
        files = world.write_files(workdir / "uploads")
        ds = labels.create_dataset(world.spec)
        _upload(console, "labels  ", files["labels"], lambda f, cb: labels.upload_labels(ds["id"], f, cb))
        _upload(console, "clicks  ", files["universe"], lambda f, cb: labels.upload_universe(ds["id"], f, cb))
        table = f"clicks_{world.run_id}"
        _upload(console, "features", files["features"], lambda f, cb: features.upload_table(table, f, cb))
        steps.done("setup", at)

        clicks = [str(i) for i in world.ids[world.train]]
        first = stage_1_ids(clicks)
        ids_1 = [i for i in clicks if i in first]
        ids_2 = [i for i in clicks if i not in first]
        if max(len(ids_1), len(ids_2)) > MAX_LISTED:
            raise ValueError(
                f"--feature-aware lists each stage's clicks in its requests (at most {MAX_LISTED:,}); "
                f"{world.dataset.name} has {len(ids_2):,} in stage 2: use --dataset prices"
            )
        at = steps.start("stage_1", f"stage 1: releasing {len(ids_1):,} clicks (a keyed hash of the ID) at ε")
        rel_1 = labels.release(  # the default mechanism, as measured for the loop (BENCHMARKS.md)
            ds["id"],
            epsilon,
            publisher,
            LOSS,
            f"demo-{world.run_id}-stage-1",
            example_ids=ids_1,
        )
        labels.deliver(rel_1["id"])
        mech = PublishedMechanism.model_validate(rel_1["mechanism"])
        kind = mech.kind.replace("_", "-")
        steps.say(f"{kind}, {mech.m} outputs, ε₁ = {rel_1['epsilon_prior']:.3f}; delivered")
        steps.done("stage_1", at)

        at = steps.start("price", "the publisher trains on it and prices the other clicks")
        model_1 = _train(features, [rel_1["id"]], table)
        features.grant_pricing(advertiser, model_1["id"], GROUPS)
        priors = labels.fetch_priors(ds["id"], publisher, GROUPS, LOSS, ids_2)
        steps.say(
            f"model {model_1['id'][:8]} priced {priors['examples_priced']:,} of "
            f"{priors['examples_requested']:,} clicks into {priors['groups']} groups ({priors['rule']})"
        )
        steps.done("price", at)

        at = steps.start("stage_2", "stage 2: releasing them, each by its group's mechanism at the whole ε")
        # the public rule (docs/math.md §14): the preview says whether the priors pay; it reads no label
        verdict = labels.preview(ds["id"], epsilon, LOSS, example_ids=ids_2, priors_id=priors["id"]).get(
            "priors_verdict"
        )
        on_priors = verdict is None or verdict["pays"]
        rel_2 = labels.release(
            ds["id"],
            epsilon,
            publisher,
            LOSS,
            f"demo-{world.run_id}-stage-2",
            example_ids=ids_2,
            priors_id=priors["id"] if on_priors else None,
        )
        labels.deliver(rel_2["id"])
        if on_priors:
            groups = labels.release_groups(rel_2["id"])
            bins = [len(g["mechanism"]["bin_values"]) for g in groups if g["examples"]]
            steps.say(
                f"{sum(1 for g in groups if g['examples'])} groups used, {min(bins)}–{max(bins)} bins each; "
                f"ε₁ = {rel_2['epsilon_prior']:.3f} (clicks without a group only); delivered"
            )
        else:
            assert verdict is not None
            steps.say(
                f"the priors do not pay (a model's expected error {verdict['with_priors']:.4g} with them, "
                f"{verdict['without_priors']:.4g} without): released as without them; delivered"
            )
        steps.done("stage_2", at)

        at = steps.start("train", "the publisher trains on both releases")
        final = _train(features, [rel_1["id"], rel_2["id"]], table)
        steps.done("train", at)

        at = steps.start("score", "scoring on held-out clicks against their TRUE labels")
        test_ids = [str(i) for i in world.ids[world.test]]
        y_test = world.y[world.test]
        two_stage = np.asarray(features.predict(final["id"], test_ids))
        trained_on = world.train & world.has_features
        schema = features.table(table)["schema"]
        non_private = _local_model(world, schema, trained_on, world.y[trained_on], world.test)
        # the one-stage release of these clicks at ε by the service's default, trained as the features
        # party trains on it (an unbiased release: its outputs, stopping early, predictions clipped)
        one = release_labels(world.y[trained_on], world.dataset.support, epsilon, LOSS)
        noise = release_noise(one.published())
        unbiased = isinstance(noise, UnbiasedNoise)
        one_stage = noise.affine_correct(
            _local_model(world, schema, trained_on, one.noisy_labels, world.test, early_stopping=unbiased)
        )

        def rmse(pred: np.ndarray) -> float:
            return float(np.sqrt(np.mean((pred - y_test) ** 2)))

        errors = {
            "one_stage": rmse(one_stage),
            "two_stage": rmse(two_stage),
            "non_private": rmse(non_private),
        }
        steps.say(
            f"RMSE: one stage {errors['one_stage']:,.4g}, two stages {errors['two_stage']:,.4g}, "
            f"non-private {errors['non_private']:,.4g}"
        )
        steps.done("score", at)

        at = steps.start("ledger", "reading the ledger back: what each stage charged")
        charges = [e for e in labels.ledger() if e["kind"] == "charge"]
        steps.done("ledger", at)
    report.values.update(
        {
            "stage_1": {
                "release_id": rel_1["id"],
                "examples": rel_1["examples"],
                "epsilon": rel_1["epsilon"],
                "epsilon_prior": rel_1["epsilon_prior"],
            },
            "stage_2": {
                "release_id": rel_2["id"],
                "examples": rel_2["examples"],
                "epsilon": rel_2["epsilon"],
                "epsilon_prior": rel_2["epsilon_prior"],
                "priors_id": priors["id"],
                "groups": priors["groups"],
                "priors_verdict": verdict,
                "on_priors": on_priors,
            },
            "test_examples": int(world.test.sum()),
            "test_rmse": errors,
            "charges": [
                {"release_id": e["release_id"], "epsilon": e["epsilon"], "examples": e["examples"]}
                for e in charges
            ],
        }
    )
    return report


def write_feature_aware(report: FeatureAwareReport, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "feature-aware.json", out / "feature-aware.md"]
    paths[0].write_text(json.dumps(report.as_json(), indent=2))
    paths[1].write_text(report.markdown())
    return paths
