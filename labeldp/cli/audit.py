"""``labeldp audit``: privacy audits for whoever holds ground truth (``labeldp.audit``).

``attack`` runs, from files, the label-inference attack the features party could mount on a release
and scores it against the true labels; ``epsilon`` checks a live labels party's sampler with canaries.
``release`` prints the labels party's own (tenant-only, free) audit of a release. Exit codes: 0 done,
1 the service refused or the ε check failed, 2 bad local input. pyarrow and the mechanism library are
imported by the commands that read files, not when the CLI starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from labeldp.cli.options import LABELS_URL, AsJson, LabelsKey, LabelsUrl, labels_client
from labeldp.terminal import error, show, table_lines

if TYPE_CHECKING:
    import pyarrow as pa

    from labeldp.mechanisms import PublishedMechanism

app = typer.Typer(
    help="Measure what an attacker learns from a release (additive / multiplicative advantage, ε).",
    no_args_is_help=True,
)

DataFile = Annotated[Path, typer.Option(exists=True, dir_okay=False, help="CSV or Parquet.")]


def _table(path: Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pq.read_table(path)
    if suffix == ".csv":
        return pcsv.read_csv(
            path, convert_options=pcsv.ConvertOptions(column_types={"example_id": pa.string()})
        )
    raise ValueError(f"{path}: use a .csv or .parquet file")


def _mechanism(path: Path) -> PublishedMechanism:
    """A release as JSON from either party (``GET /v1/releases/{id}``) or a bare published mechanism."""
    from labeldp.mechanisms import PublishedMechanism

    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from exc
    if isinstance(data, dict) and isinstance(data.get("mechanism"), dict):
        data = data["mechanism"]
    try:
        return PublishedMechanism.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"{path}: not a release or published mechanism: {exc}") from exc


@app.command("attack")
def audit_attack(
    release: Annotated[
        Path,
        typer.Option(exists=True, dir_okay=False, help="The release's JSON (either party) or its mechanism."),
    ],
    released: DataFile = Path("noisy.parquet"),
    features: DataFile = Path("features.parquet"),
    truth: DataFile = Path("truth.parquet"),
    alpha: Annotated[float, typer.Option(help="Level of the measured advantage's interval.")] = 0.05,
    as_json: AsJson = False,
) -> None:
    """Attack a release as the features party could, and score it against the true labels.

    --released: example_id, bin (as delivered; GET /v1/releases/{id}/noisy-labels). --features:
    example_id and the feature columns. --truth: example_id, label."""
    from labeldp.audit.attack import AuditInputError, run_attack

    try:
        mechanism = _mechanism(release)
        result = run_attack(mechanism, _table(released), _table(features), _table(truth), alpha=alpha)
    except (ValueError, AuditInputError, OSError) as exc:
        error(str(exc))
        raise typer.Exit(code=2) from exc
    m, e = result.measured, result.exact.summary()
    summary = {
        "measured": m,
        "exact": e,
        "worst_case_additive_advantage": mechanism.worst_case_additive_advantage,
        "max_multiplicative_advantage": mechanism.max_multiplicative_advantage,
    }
    target = "bin" if mechanism.kind == "rr_on_bins" else "class"
    rows = [
        ("features attacker, from the features alone", f"{m['accuracy_without_release']:.2%} right"),
        (
            f"features attacker, with each example's released {target}",
            f"{m['accuracy_with_release']:.2%} right",
        ),
        (
            "measured additive advantage",
            f"{m['additive_advantage']:+.4f} [{m['additive_advantage_low']:+.4f}, "
            f"{m['additive_advantage_high']:+.4f}] at {1 - alpha:.0%}",
        ),
        ("exact expected advantage (mean, p99)", f"{e['additive_mean']:.4f}, {e['additive_p99']:.4f}"),
        ("worst case over all priors", f"{mechanism.worst_case_additive_advantage:.4f}"),
        (
            "multiplicative advantage (max)",
            f"{e['multiplicative_max']:.4f} (implemented ε {mechanism.implemented_epsilon:.4f})",
        ),
        ("examples trusting their noisy label is optimal for", f"{e['share_trusting_noisy_label']:.1%}"),
    ]
    if "mse_reduction_share" in e:
        rows.append(("share of the squared error the release removes", f"{e['mse_reduction_share']:.2%}"))
    table = table_lines([{"what": w, "value": v} for w, v in rows], ("what", "value"), headers=("", ""))
    line = "\n".join(
        [f"{int(m['examples']):,} examples attacked (the label's {target} is the target)"]
        + [f"  {row}" for row in table]
    )
    show(summary, as_json, line)


@app.command("epsilon")
def audit_epsilon(
    recipient: Annotated[str, typer.Option(help="A registered recipient to address the canary release to.")],
    epsilon: Annotated[float, typer.Option(help="ε of the canary release.")] = 1.0,
    canaries: Annotated[int, typer.Option(help="Canaries (binary labels, half each).")] = 1_000_000,
    alpha: Annotated[float, typer.Option(help="False-alarm rate of the check.")] = 1e-6,
    epsilon_prior: Annotated[
        float | None, typer.Option(help="ε₁ of the release (default: the service's).")
    ] = None,
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """Black-box check of a live labels party: a Clopper–Pearson lower bound on the ε its sampler
    implements, from one release of canaries with known labels; exit 1 if it exceeds the claim."""
    from labeldp.audit.canaries import canary_audit

    with labels_client(url, api_key) as client:
        result = canary_audit(
            client, recipient, epsilon, canaries, alpha, epsilon_prior, say=lambda t: typer.echo(t, err=True)
        )
    verdict = "PASSED" if result.passed else "FAILED: the sampler implements more ε than it claims"
    show(
        result.as_dict(),
        as_json,
        f"release {result.release_id}: {result.canaries:,} canaries; ε implemented (claimed) "
        f"{result.implemented_epsilon:.4f}, measured lower bound {result.epsilon_low:.4f} "
        f"(holds with probability >= {1 - alpha:g}); {verdict}",
    )
    if not result.passed:
        raise typer.Exit(code=1)


@app.command("release")
def audit_release(
    release_id: Annotated[str, typer.Argument(help="A complete release's id.")],
    url: LabelsUrl = LABELS_URL,
    api_key: LabelsKey = "",
    as_json: AsJson = False,
) -> None:
    """The labels party's own audit of a release with the raw labels (free, tenant-only, never logged)."""
    with labels_client(url, api_key) as client:
        a = client.audit(release_id)
    t, r = a["true_distribution"], a["realized"]
    show(
        a,
        as_json,
        f"release {a['release_id']} ({a['examples']:,} examples): worst-case additive advantage "
        f"{a['worst_case_additive_advantage']:.4f}, max multiplicative "
        f"{a['max_multiplicative_advantage']:.4f}; the distribution attacker (the true label "
        f"distribution, no features): "
        f"{t['success_without_mean']:.2%} → {t['success_with_mean']:.2%} right (advantage "
        f"{t['additive_mean']:.4f}); realized on this release: {r['accuracy_without_release']:.2%} → "
        f"{r['accuracy_with_release']:.2%}",
    )
