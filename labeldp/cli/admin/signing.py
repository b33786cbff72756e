"""``labeldp keys …``: a party's Ed25519 signing key and a development CA with both parties'
certificates (run anywhere; no database)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from labeldp.terminal import print_table

keys_app = typer.Typer(help="Signing keys and development certificates.", no_args_is_help=True)


@keys_app.command("generate")
def keys_generate(path: Path) -> None:
    """Create an Ed25519 identity key at PATH (0600) and print its fingerprint; keeps an existing key."""
    from labeldp.common.identity import Identity

    existed = path.exists()
    identity = Identity.load_or_create(path)
    typer.echo(f"{'existing' if existed else 'new'} key {identity.key_id} at {path}")


@keys_app.command("dev-ca")
def keys_dev_ca(
    out: Annotated[Path, typer.Option(help="Folder for ca.pem and both parties' certificates.")] = Path(
        "dev-certs"
    ),
    host: Annotated[
        list[str] | None, typer.Option(help="Names/IPs of the gRPC receiver (repeatable).")
    ] = None,
    keep_existing: Annotated[
        bool, typer.Option("--keep-existing", help="Do nothing if OUT already holds a CA (restarts).")
    ] = False,
) -> None:
    """A development CA plus a server certificate (features party) and a client certificate (labels party)."""
    from labeldp.common.tls import dev_ca

    if keep_existing and (out / "ca.pem").exists():
        typer.echo(f"{out / 'ca.pem'} exists; keeping the existing certificates")
        return
    paths = dev_ca(out, tuple(host or ("localhost", "127.0.0.1")))
    written = (
        ("CA", paths.ca),
        ("features-party server cert", paths.server_cert),
        ("features-party server key", paths.server_key),
        ("labels-party client cert", paths.client_cert),
        ("labels-party client key", paths.client_key),
    )
    print_table([{"file": what, "path": str(p)} for what, p in written], ("file", "path"))
