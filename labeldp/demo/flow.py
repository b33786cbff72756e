"""The demo's exchange, only through the parties' public APIs (its report: ``report.py``).

register both parties with each other → upload labels, clicks and features over REST → one release
at ε (budget charged first) → delivery over gRPC → join → training job → predictions for the test
examples, scored against the true labels beside a non-private model and a Laplace-baseline model
trained the same way.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

from features_party.training.fit import Encoder, regressor
from labeldp.audit.attack import AttackResult, run_attack
from labeldp.client import ApiError, FeaturesClient, LabelsClient
from labeldp.demo.mechanism import laplace_labels
from labeldp.demo.parties import Connection
from labeldp.demo.report import Report
from labeldp.demo.world import World
from labeldp.mechanisms import PublishedMechanism
from labeldp.mechanisms.advantage import Advantages, channel_advantages, targets_of
from labeldp.mechanisms.baselines import laplace_channel
from labeldp.terminal import numbers, progress, upload_with_progress

T = TypeVar("T")
LOSS = "squared"  # the release's loss: the models are scored by (root) mean squared error
STEPS = 9


class Steps:
    """Numbered progress lines, with each step's wall time kept for the report."""

    def __init__(self, console: Console, report: Report) -> None:
        self.console, self.report, self.n = console, report, 0

    @contextmanager
    def step(self, key: str, title: str) -> Iterator[None]:
        self.n += 1
        self.console.print(f"[bold cyan][{self.n}/{STEPS}][/] {title}")
        start = time.monotonic()
        yield
        self.report.timings_s[key] = round(time.monotonic() - start, 2)

    def say(self, text: str) -> None:
        self.console.print(f"      {text}")


def _upload(console: Console, label: str, file: Path, send: Callable[[Path, Callable[[int], None]], T]) -> T:
    return upload_with_progress(console, f"      {label}", file, send)


def register(labels: LabelsClient, features: FeaturesClient, conn: Connection) -> tuple[str, str]:
    """Each side registers the other; already registered (a re-run against the same services) is fine
    as long as the keys match."""
    advertiser, publisher = labels.identity(), features.identity()
    pinned = {s["id"]: s for s in features.senders()}
    if advertiser["party_id"] not in pinned:
        features.pin_sender(advertiser["party_id"], advertiser["public_key_pem"])
    elif pinned[advertiser["party_id"]]["key_id"] != advertiser["key_id"]:
        raise ApiError(409, "sender-key-mismatch", "the publisher pinned another key for this advertiser")
    if publisher["party_id"] not in {r["name"] for r in labels.recipients()}:
        labels.register_recipient(
            publisher["party_id"],
            conn.grpc_address,
            conn.tls_ca_pem,
            publisher["key_id"],
            publisher["tenant_id"],
        )
    return advertiser["party_id"], publisher["party_id"]


def _local_model(
    world: World,
    schema: dict[str, str],
    train: np.ndarray,
    targets: np.ndarray,
    test: np.ndarray,
    *,
    early_stopping: bool = False,
) -> np.ndarray:
    """The features party's model (its inferred schema, same encoder, same estimator) trained on the
    given targets (``early_stopping``: as it trains on unbiased targets)."""
    features = world.dataset.features
    encoder = Encoder(list(schema), [c for c in schema if schema[c] == "categorical"])
    encoder.fit(features.filter(pa.array(train)))
    X = encoder.transform(features)
    model = regressor("hgb", LOSS, encoder, early_stopping=early_stopping).fit(X[train], targets)
    return np.asarray(model.predict(X[test]), dtype=np.float64)


def run_flow(
    conn: Connection,
    world: World,
    epsilon: float,
    workdir: Path,
    console: Console,
    contribution_bound: int | str | None = None,
) -> Report:
    """The whole two-party flow; with ``contribution_bound`` the release is user-level (``epsilon``
    per user) over the world's synthetic users."""
    report = Report(world.dataset.name, world.run_id, epsilon)
    user_level = contribution_bound is not None
    steps = Steps(console, report)
    labels = LabelsClient(conn.labels_url, conn.labels_key)
    features = FeaturesClient(conn.features_url, conn.features_key)
    with labels, features:
        with steps.step("register", "registering the parties with each other"):
            advertiser, publisher = register(labels, features, conn)
            steps.say(f"publisher pinned {advertiser}'s signing key; advertiser registered {publisher}")
            steps.say(
                f"gRPC receiver {conn.grpc_address} ({'mutual TLS' if conn.tls_ca_pem else 'plaintext'})"
            )

        with steps.step("upload", "uploading labels (advertiser) and features (publisher) over REST"):
            files = world.write_files(workdir / "uploads")
            ds = labels.create_dataset(world.spec)
            up = _upload(
                console, "labels  ", files["labels"], lambda f, cb: labels.upload_labels(ds["id"], f, cb)
            )
            clicks = _upload(
                console, "clicks  ", files["universe"], lambda f, cb: labels.upload_universe(ds["id"], f, cb)
            )
            table = f"clicks_{world.run_id}"
            ft = _upload(
                console, "features", files["features"], lambda f, cb: features.upload_table(table, f, cb)
            )
            steps.say(
                f"advertiser: {up['rows']:,} conversions (non-zero labels) and {clicks['rows']:,} clicks "
                f"(the release's universe); publisher: {ft['rows']:,} rows × {len(ft['schema'])} features"
            )

        unit = f"ε = {epsilon:g} per user" if user_level else f"ε = {epsilon:g}"
        with steps.step("release", f"releasing at {unit} (budget charged before any noise)"):
            rel = labels.release(
                ds["id"],
                epsilon,
                publisher,
                LOSS,
                idempotency_key=f"demo-{world.run_id}",
                privacy_unit="user" if user_level else "example",
                contribution_bound=contribution_bound,
                # named: the report shows RR-on-Bins's bins, plots and audit; the service's default
                # here is the unbiased randomizer (docs/concepts/mechanism.md), whose outputs are no bins
                mechanism="rr_on_bins",
            )
            bins = rel["bins"] or []
            mech = PublishedMechanism.model_validate(rel["mechanism"])
            steps.say(
                f"{rel['examples']:,} examples, ε₁ = {rel['epsilon_prior']:.3f} for the private prior, "
                f"ε₂ = {mech.epsilon_randomize:.3f} for randomization; {len(bins)} bins: {numbers(bins)}"
            )
            if user_level:
                steps.say(
                    f"user-level: {rel['users']:,} users, τ = {mech.contribution_bound} "
                    f"({rel['contribution_bound']}); each user spends ε₁ + τ·ε₂ <= {epsilon:g}, each "
                    f"example at most {mech.epsilon_per_example:.3f}; {rel['examples_capped']:,} clicks "
                    "over the bound are listed without label information"
                )
            noisy = pq.read_table(io.BytesIO(labels.noisy_labels(rel["id"])))

        with steps.step("deliver", "delivering the signed message over gRPC"):
            sent = labels.deliver(rel["id"])
            steps.say(
                f"{sent['wire_bytes']:,} bytes in {sent['attempts']} attempt(s); "
                f"receipt {(sent['receipt_sha256'] or '')[:16]}… verified"
            )

        with steps.step("join", "joining the noisy labels to the publisher's features by example ID"):
            joined = features.join(rel["id"], table)
            match_rate = joined["in_both"] / max(joined["release_examples"], 1)
            steps.say(
                f"{joined['in_both']:,} of {joined['release_examples']:,} released examples have features "
                f"(match rate {match_rate:.1%}); {joined['only_in_features']:,} feature rows have no label"
            )

        with steps.step("train", "training the publisher's model (gradient boosting, debiased)"):
            job = features.train(rel["id"], table)
            with progress(
                console,
                TextColumn("      boosting"),
                BarColumn(),
                TextColumn("{task.completed:.0f}/{task.total:.0f} iterations"),
                TimeElapsedColumn(),
            ) as bar:
                task = bar.add_task("train", total=200)
                done = features.wait_for_job(
                    job["id"],
                    lambda j: bar.update(task, completed=float(j["progress"].get("iterations", 0))),
                )
            model = features.model(job["id"])
            steps.say(f"model {model['id'][:8]} trained in {done['progress'].get('elapsed_s', 0):.1f} s")

        with steps.step("score", "scoring on held-out test examples against their TRUE labels"):
            test_ids = [str(i) for i in world.ids[world.test]]
            steps.say(f"the private model predicts {len(test_ids):,} test clicks (REST)")
            private = np.asarray(features.predict(model["id"], test_ids))
            y_test = world.y[world.test]
            # the baselines are trained on exactly the examples the private model saw: released and matched
            trained_on = world.train & world.has_features
            steps.say(f"baseline: the same model on the {int(trained_on.sum()):,} raw labels (no privacy)")
            non_private = _local_model(world, ft["schema"], trained_on, world.y[trained_on], world.test)
            lap_on, lap_eps = trained_on, epsilon
            if user_level:  # the same kept examples, each at ε_user/τ: a user spends ε_user in all
                capped = set(
                    noisy.filter(pc.equal(noisy.column("bin"), mech.m)).column("example_id").to_pylist()
                )
                lap_on = trained_on & np.array([i not in capped for i in world.ids])
                lap_eps = epsilon / (mech.contribution_bound or 1)
            steps.say(f"baseline: the same model on Laplace-noised labels at ε = {lap_eps:g}")
            lap = laplace_labels(world.dataset, lap_eps, world.y[lap_on])
            laplace_model = _local_model(world, ft["schema"], lap_on, lap, world.test)

            def rmse(pred: np.ndarray) -> float:
                return float(np.sqrt(np.mean((pred - y_test) ** 2)))

            errors = {
                "rr_on_bins_private": rmse(private),
                "non_private": rmse(non_private),
                "laplace_baseline": rmse(laplace_model),
                "predict_mean": rmse(np.full(y_test.size, float(np.mean(world.y[trained_on])))),
            }

        with steps.step("audit", "attacking the release as the publisher could, scored against the truth"):
            steps.say(
                "the features attacker learns each click's prior from its features (two folds), then reads "
                "its bin"
            )
            attack, lap_adv = _audit(world, mech, noisy, lap_eps)
            # the labels party's own audit (the console's): the distribution attacker, no features
            distribution = labels.audit(rel["id"])["realized"]
            m = attack.measured
            steps.say(
                f"features attacker, each click's bin from features alone: "
                f"{m['accuracy_without_release']:.1%} right; "
                f"with its released bin: {m['accuracy_with_release']:.1%} (worst case over all priors "
                f"+{mech.worst_case_additive_advantage:.3f}; odds move by at most "
                f"e^{mech.implemented_epsilon:.2f})"
            )
            steps.say(
                "the labels party's audit (the console's): the distribution attacker, who knows the "
                f"labels' distribution but no features, {distribution['accuracy_without_release']:.1%} → "
                f"{distribution['accuracy_with_release']:.1%}"
            )

        with steps.step("budget", "reading the budget and the ledger back"):
            budget = labels.budget(ds["id"], mech.epsilon_per_example, epsilon)
            ledger = [
                {
                    "kind": e["kind"],
                    "epsilon": e["epsilon"],
                    "examples": e["examples"],
                    "created_at": e["created_at"],
                }
                for e in labels.ledger()
            ]

    report.values.update(
        {
            "examples_released": rel["examples"],
            "release_id": rel["id"],
            "epsilon_prior": rel["epsilon_prior"],
            "epsilon_randomize": mech.epsilon_randomize,
            "bins": bins,
            "mechanism": mech.model_dump(mode="json"),
            "delivery": {
                "wire_bytes": sent["wire_bytes"],
                "attempts": sent["attempts"],
                "receipt_sha256": sent["receipt_sha256"],
            },
            "join": joined,
            "match_rate": match_rate,
            "model_id": model["id"],
            "model_metrics": model["metrics"],
            "test_examples": int(world.test.sum()),
            "test_rmse": errors,
            "ledger": ledger,
            "budget": {
                "per_example": budget["per_example_budget"],
                "spent_max": budget["max_spent"],
                "spent_min": budget["min_spent"],
                "left": budget["per_example_budget"] - budget["max_spent"],
                "examples_that_can_take_another_release": budget["can_take"],
                "users": budget["users"],
            },
            "privacy": {
                "unit": mech.privacy_unit,
                "epsilon": epsilon,
                "epsilon_per_example": mech.epsilon_per_example,
                "contribution_bound": mech.contribution_bound,
                "contribution_bound_asked": rel.get("contribution_bound"),
                "users": rel.get("users"),
                "examples_capped": rel.get("examples_capped"),
            },
        }
    )
    report.values["privacy_audit"] = {
        "worst_case_additive_advantage": mech.worst_case_additive_advantage,
        "max_multiplicative_advantage": mech.max_multiplicative_advantage,
        "measured": attack.measured,
        "distribution_attacker": {
            "accuracy_without_release": distribution["accuracy_without_release"],
            "accuracy_with_release": distribution["accuracy_with_release"],
        },
        "exact": attack.exact.summary(),
        "laplace_exact": lap_adv.summary(),
        "laplace_epsilon": lap_eps,
    }
    report.noisy, report.attack, report.laplace_advantages = noisy, attack, lap_adv
    return report


def _audit(
    world: World, mech: PublishedMechanism, noisy: pa.Table, laplace_epsilon: float
) -> tuple[AttackResult, Advantages]:
    """The publisher's attack on the release, and the same attacker's exact advantage against the
    Laplace baseline at the same ε (same priors, same target: the label's RR-on-Bins bin)."""
    ids = pa.array(world.ids.astype(str))
    logged = pa.array(world.has_features)  # what the publisher holds
    features = world.dataset.features.filter(logged).append_column("example_id", ids.filter(logged))
    truth = pa.table({"example_id": ids, "label": pa.array(world.y.astype(float))})
    attack = run_attack(mech, noisy, features, truth)
    ds = world.dataset
    channel, _ = laplace_channel(mech.support, ds.lo, ds.hi, laplace_epsilon)
    return attack, channel_advantages(attack.support_priors, channel, targets_of(mech), mech.support)
