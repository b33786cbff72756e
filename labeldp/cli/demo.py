"""``labeldp demo``: the two-party demo (``labeldp.demo``), or the mechanism alone.

The demo's modules (both parties, numpy, pyarrow, matplotlib) are imported when the command runs.
Exit codes: 2 for a bad option or input, 1 when a service refused or the demo failed (its logs are
named), 3 when a service failed or could not be reached (as every client command), 130 on Ctrl-C — the
demo's services are stopped in every case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from labeldp.cli.options import exit_code
from labeldp.terminal import error, problem

app = typer.Typer()  # merged into the root (main.py): `labeldp demo`


@app.command("demo")
def demo(
    out: Annotated[
        Path, typer.Option(help="Folder for the report, the figures and the service logs.")
    ] = Path("demo-output"),
    dataset: Annotated[
        str, typer.Option(help="'prices' (diamond sale prices, USD) or 'weeks' (census weeks worked).")
    ] = "prices",
    epsilon: Annotated[
        float, typer.Option(help="ε of the release (charged to every released example).")
    ] = 1.0,
    privacy_unit: Annotated[
        str, typer.Option(help="example, or user: a user-level release over synthetic users.")
    ] = "example",
    epsilon_user: Annotated[
        float | None, typer.Option(help="With --privacy-unit user: ε per user (instead of --epsilon).")
    ] = None,
    contribution_bound: Annotated[
        str, typer.Option(help="With --privacy-unit user: τ, auto or private.")
    ] = "auto",
    postgres: Annotated[
        str | None, typer.Option(help="Run the labels party on this PostgreSQL URL instead of SQLite.")
    ] = None,
    labels_url: Annotated[
        str | None, typer.Option(help="Use a running labels party (with the options below) instead.")
    ] = None,
    labels_key_file: Annotated[Path | None, typer.Option(help="File holding its tenant's API key.")] = None,
    features_url: Annotated[str | None, typer.Option(help="The running features party's REST URL.")] = None,
    features_key_file: Annotated[Path | None, typer.Option(help="File holding its tenant's API key.")] = None,
    grpc_address: Annotated[
        str | None,
        typer.Option(help="host:port of the features party's gRPC receiver, as the labels party sees it."),
    ] = None,
    labels_public_url: Annotated[
        str | None,
        typer.Option(help="With --labels-url: its URL as a browser reaches it (for the console's link)."),
    ] = None,
    features_public_url: Annotated[
        str | None,
        typer.Option(help="With --features-url: its URL as a browser reaches it (for the console's link)."),
    ] = None,
    ca: Annotated[
        Path | None, typer.Option(help="CA that signed the receiver's certificate (mutual TLS).")
    ] = None,
    mechanism_only: Annotated[
        bool,
        typer.Option(
            "--mechanism-only", help="Only the mechanism on the dataset, no services (see --epsilons)."
        ),
    ] = False,
    semi_sensitive: Annotated[
        bool,
        typer.Option(
            "--semi-sensitive",
            help="UCI Adult with 7 semi-sensitive columns: label DP, then DP-SGD at the labels party.",
        ),
    ] = False,
    feature_aware: Annotated[
        bool,
        typer.Option(
            "--feature-aware",
            help="Two stages: the publisher's model, trained on the first, prices the second release "
            "(docs/concepts/feature-aware.md); compared with one stage at the same ε.",
        ),
    ] = False,
    epsilons: Annotated[
        str, typer.Option(help="With --mechanism-only: comma-separated ε values.")
    ] = "0.1,0.5,1,2,4",
    labels_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            metavar="<port>",
            help="The labels party's REST port on 127.0.0.1 (default: a free port).",
        ),
    ] = None,
    features_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            metavar="<port>",
            help="The features party's REST port on 127.0.0.1 (default: a free port).",
        ),
    ] = None,
    keep_running: Annotated[
        bool,
        typer.Option(
            "--keep-running",
            help="Leave both services running after the report (until Ctrl-C) and print their web "
            "consoles' URLs and the demo tenants' API keys.",
        ),
    ] = False,
) -> None:
    """Two-party demo: an advertiser and a publisher train a private conversion model end to end."""
    from labeldp.client import ApiError

    try:
        if keep_running and (mechanism_only or semi_sensitive):
            raise ValueError(
                "--keep-running is for the two-party demo (not --mechanism-only or --semi-sensitive)"
            )
        ports = (labels_port, features_port)
        if any(ports) and (mechanism_only or labels_url or features_url):
            raise ValueError("--labels-port and --features-port are for the services the demo starts")
        if labels_port is not None and labels_port == features_port:
            raise ValueError("--labels-port and --features-port must differ")
        if mechanism_only:
            from labeldp.demo.main import run_mechanism_demo

            eps = [float(e) for e in epsilons.split(",") if e.strip()]
            if not eps:
                raise ValueError("give at least one ε")
            run_mechanism_demo(dataset=dataset, epsilons=eps, out=out, echo=typer.echo)
            return
        if feature_aware:
            if labels_url or features_url or privacy_unit != "example" or semi_sensitive or keep_running:
                raise ValueError("--feature-aware starts its own services, example-level only")
            from labeldp.demo.main import run_feature_aware_demo

            run_feature_aware_demo(dataset, epsilon, out, postgres_url=postgres, ports=ports)
            return
        if semi_sensitive:
            if labels_url or features_url or privacy_unit != "example":
                raise ValueError("--semi-sensitive starts its own services, example-level only")
            from labeldp.demo.semi_sensitive import run_semi_sensitive_demo

            run_semi_sensitive_demo(epsilon, out, postgres_url=postgres, ports=ports)
            return
        from labeldp.demo.main import Remote, run_demo

        remote = None
        if labels_url or features_url:
            if not (labels_url and features_url and labels_key_file and features_key_file and grpc_address):
                raise ValueError(
                    "with running services give --labels-url, --labels-key-file, --features-url, "
                    "--features-key-file and --grpc-address"
                )
            remote = Remote(
                labels_url,
                _read_secret(labels_key_file),
                features_url,
                _read_secret(features_key_file),
                grpc_address,
                ca.read_text() if ca else None,
                labels_public_url,
                features_public_url,
                str(labels_key_file),
                str(features_key_file),
            )
        elif labels_public_url or features_public_url:
            raise ValueError("--labels-public-url and --features-public-url go with --labels-url")
        if privacy_unit not in ("example", "user"):
            raise ValueError("--privacy-unit is example or user")
        bound: int | str | None = None
        if privacy_unit == "user":
            epsilon = epsilon_user if epsilon_user is not None else epsilon
            bound = contribution_bound if not contribution_bound.isdigit() else int(contribution_bound)
        elif epsilon_user is not None:
            raise ValueError("--epsilon-user needs --privacy-unit user")
        run_demo(
            dataset,
            epsilon,
            out,
            postgres_url=postgres,
            remote=remote,
            contribution_bound=bound,
            keep_running=keep_running,
            ports=ports,
        )
    except ValueError as exc:
        error(str(exc))
        raise typer.Exit(code=2) from exc
    except ApiError as exc:
        problem(exc)
        raise typer.Exit(code=exit_code(exc)) from exc
    except (RuntimeError, TimeoutError) as exc:
        error(f"{exc} (service logs: {out / 'logs'})")
        raise typer.Exit(code=1) from exc
    except KeyboardInterrupt:
        typer.echo("interrupted: the demo's services have been stopped", err=True)
        raise typer.Exit(code=130) from None


def _read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
