"""``labeldp demo``: set up (or connect to) both parties, run the exchange, report, plot, clean up;
or, with ``--mechanism-only``, the mechanism alone on the dataset, printed and drawn."""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from rich.console import Console

from labeldp.demo.flow import run_flow
from labeldp.demo.mechanism import laplace_labels, print_mechanism_table
from labeldp.demo.parties import Connection, local_parties
from labeldp.demo.plots import draw, loss_curve_figure, mechanism_figure, save
from labeldp.demo.report import print_report, write_report
from labeldp.demo.world import SPECS, split
from labeldp.samples import load


@dataclass(frozen=True)
class Remote:
    """Services that are already running (``docker compose``): their URLs and tenants' API keys."""

    labels_url: str
    labels_key: str
    features_url: str
    features_key: str
    grpc_address: str
    tls_ca_pem: str | None
    # where a person's browser reaches each party (the REST URLs above may be names only the demo's
    # network resolves, as compose's `http://labels-party:8400`); None: the REST URL itself
    labels_public_url: str | None = None
    features_public_url: str | None = None
    # where the tenants' API keys are, to say so beside the consoles
    labels_key_file: str | None = None
    features_key_file: str | None = None


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``docker stop``, a CI timeout) unwinds like Ctrl-C, so the services get stopped."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _remote(remote: Remote) -> Iterator[Connection]:
    yield Connection(
        remote.labels_url,
        remote.labels_key,
        remote.features_url,
        remote.features_key,
        remote.grpc_address,
        remote.tls_ca_pem,
    )


def console_urls(conn: Connection, remote: Remote | None = None) -> tuple[str, str]:
    """Where a person opens each party's web console (docs/console.md): on the public URL given for
    running services, else on the URL the demo itself calls."""
    labels = (remote.labels_public_url if remote else None) or conn.labels_url
    features = (remote.features_public_url if remote else None) or conn.features_url
    return f"{labels.rstrip('/')}/console/", f"{features.rstrip('/')}/console/"


def _keep_running(console: Console, conn: Connection, remote: Remote | None) -> None:
    """Leave the services up until Ctrl-C (or SIGTERM), so that a person can look at the demo's
    release in the consoles. The local tenants are the demo's own, so their keys are printed; of
    running services, the files that hold them are named."""
    labels, features = console_urls(conn, remote)
    console.print(
        "\n[bold]the services keep running[/] (--keep-running): open a console and sign in with its "
        "tenant's API key",
        soft_wrap=True,
    )
    for party, url, key, file in (
        ("labels party (advertiser): ", labels, conn.labels_key, remote and remote.labels_key_file),
        ("features party (publisher):", features, conn.features_key, remote and remote.features_key_file),
    ):
        shown = f"API key {key}" if remote is None else f"API key in {file}" if file else "(your API key)"
        console.print(f"  {party} {url}  {shown}", soft_wrap=True, highlight=False)
    console.print("press Ctrl-C to stop them", soft_wrap=True)
    # a demo started in the background by a script inherits SIGINT ignored: Ctrl-C (or kill -INT)
    # must stop it all the same
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        console.print("stopping the services")
    finally:
        signal.signal(signal.SIGINT, previous)


def run_demo(
    dataset: str,
    epsilon: float,
    out: Path,
    postgres_url: str | None = None,
    remote: Remote | None = None,
    console: Console | None = None,
    contribution_bound: int | str | None = None,
    keep_running: bool = False,
    ports: tuple[int | None, int | None] = (None, None),
) -> dict[str, object]:
    """Run the demo; with ``contribution_bound`` (τ, auto or private) the release is user-level with
    ``epsilon`` per user, over synthetic users with a heavy-tailed number of clicks each. With
    ``keep_running`` the services stay up after the report until Ctrl-C (or SIGTERM). ``ports``: the
    local services' REST ports (labels, features), free ones where None."""
    if dataset not in SPECS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(SPECS)}")
    if not 0 < epsilon <= 100:
        raise ValueError("epsilon must be a finite number > 0 (and at most 100)")
    console = console or Console(width=None if Console().is_terminal else 110)
    started = time.monotonic()
    world = split(load(dataset), with_users=contribution_bound is not None)
    console.print(
        f"[bold]labeldp demo[/]: {world.dataset.description}\n"
        f"run {world.run_id}: the advertiser holds {int(world.train.sum()):,} clicks' labels, the publisher "
        f"their features; {int(world.test.sum()):,} examples are held out to score the models"
    )
    out.mkdir(parents=True, exist_ok=True)
    with _terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="labeldp-demo-") as tmp:
        work = Path(tmp)

        def say(text: str) -> None:
            console.print(f"      {text}")

        parties: AbstractContextManager[Connection]
        if remote is not None:
            console.print(
                f"[bold cyan][0][/] using running services at {remote.labels_url} and {remote.features_url}"
            )
            parties = _remote(remote)
        else:
            console.print("[bold cyan][0][/] starting both services on loopback")
            parties = local_parties(work, out / "logs", world.run_id, epsilon, postgres_url, say, ports=ports)
        with parties as conn:
            labels_console, features_console = console_urls(conn, remote)
            for url, party, file in (
                (labels_console, "advertiser", remote and remote.labels_key_file),
                (features_console, "publisher", remote and remote.features_key_file),
            ):
                say(f"console: {url} ({party}" + (f", its API key in {file})" if file else ")"))
            report = run_flow(conn, world, epsilon, work, console, contribution_bound)
            console.print("[bold cyan][…][/] drawing the figures")
            figures = draw(world, report, out)
            report.timings_s["total"] = round(time.monotonic() - started, 1)
            print_report(console, report.as_json())
            write_report(report, out / "report.json")
            console.print(f"wrote {out / 'report.json'} and " + ", ".join(str(p) for p in figures))
            console.print(f"done in {report.timings_s['total']:.0f} s")
            if keep_running:
                _keep_running(console, conn, remote)
    return report.as_json()


def run_feature_aware_demo(
    dataset: str,
    epsilon: float,
    out: Path,
    postgres_url: str | None = None,
    console: Console | None = None,
    ports: tuple[int | None, int | None] = (None, None),
) -> dict[str, object]:
    """The feature-aware loop (``feature_aware.py``) between two local services: stage 1, the
    publisher's model, its priors, stage 2, the model on both — against one stage at the same ε."""
    from labeldp.demo.feature_aware import run_feature_aware_flow, write_feature_aware

    if dataset not in SPECS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(SPECS)}")
    if not 0 < epsilon <= 100:
        raise ValueError("epsilon must be a finite number > 0 (and at most 100)")
    console = console or Console(width=None if Console().is_terminal else 110)
    started = time.monotonic()
    world = split(load(dataset))
    console.print(
        f"[bold]labeldp demo --feature-aware[/]: {world.dataset.description}\n"
        f"run {world.run_id}: {int(world.train.sum()):,} clicks released in two stages at ε = {epsilon:g} "
        f"each (every click once); {int(world.test.sum()):,} held out to score the models"
    )
    out.mkdir(parents=True, exist_ok=True)
    with _terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="labeldp-demo-") as tmp:
        work = Path(tmp)

        def say(text: str) -> None:
            console.print(f"      {text}")

        console.print("[bold cyan][0][/] starting both services on loopback")
        with local_parties(work, out / "logs", world.run_id, epsilon, postgres_url, say, ports=ports) as conn:
            report = run_feature_aware_flow(conn, world, epsilon, work, console)
    report.timings_s["total"] = round(time.monotonic() - started, 1)
    console.print(report.markdown(), soft_wrap=True, highlight=False)
    paths = write_feature_aware(report, out)
    console.print("wrote " + ", ".join(str(p) for p in paths))
    return report.as_json()


def run_mechanism_demo(
    dataset: str, epsilons: Sequence[float], out: Path, echo: Callable[[str], None] = print
) -> list[dict[str, float]]:
    """The mechanism alone at each ε (no services): a line per ε, the mechanism at the ε nearest 1
    drawn like the paper's Figure 2, and the error-versus-ε curve."""
    ds = load(dataset)
    rows, releases = print_mechanism_table(ds, epsilons, echo)
    out.mkdir(parents=True, exist_ok=True)
    focus = min(epsilons, key=lambda e: abs(e - 1.0))
    y = ds.labels
    true_prior = ds.support.counts(y) / y.size
    figure = out / f"mechanism_{ds.name}_eps{focus:g}.png"
    rel = releases[focus]
    save(
        mechanism_figure(ds, y, true_prior, rel.published(), rel.noisy_labels, laplace_labels(ds, focus)),
        figure,
    )
    curve = out / f"loss_vs_epsilon_{ds.name}.png"
    save(loss_curve_figure(ds, rows), curve)
    echo(f"\nRR-on-Bins beats Laplace at every ε: {all(r['rr_on_bins'] < r['laplace'] for r in rows)}")
    echo(f"Wrote {figure} and {curve}")
    return rows
