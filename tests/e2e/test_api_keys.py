"""API keys from the CLI, checked through the live APIs: issue, list, revoke (401 at once), rotate."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from features_party.config import FeaturesSettings
from labeldp.cli import app
from labels_party.config import LabelsSettings
from labels_party.storage.db import sqlite_url
from tests.support.servers import features_server_thread, labels_server_thread


def cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout + result.stderr


def key_of(output: str) -> str:
    return output.strip().splitlines()[-1]


@pytest.mark.parametrize("party", ["labels", "features"])
def test_keys_can_be_issued_listed_revoked_and_rotated(tmp_path: Path, party: str) -> None:
    data = tmp_path / party
    if party == "labels":
        env = {"LABELDP_DATA_DIR": str(data), "LABELDP_DATABASE_URL": sqlite_url(data)}
        create = ["labels", "tenant", "create", "acme", "--epsilon-per-example", "1"]
        server = labels_server_thread(LabelsSettings(data_dir=data, database_url=sqlite_url(data)))
        probe = "/v1/datasets"
    else:
        env = {"LABELDP_FEATURES_DATA_DIR": str(data)}
        create = ["features", "tenant", "create", "acme"]
        server = features_server_thread(FeaturesSettings(data_dir=data, grpc_port=0, allow_plaintext=True))
        probe = "/v1/feature-tables"
    code, out = cli(env, *create)
    assert code == 0, out
    first = key_of(out)
    code, out = cli(env, party, "key", "create", "acme")
    assert code == 0 and "not shown again" in out, out
    second = key_of(out)
    code, out = cli(env, party, "key", "list", "acme", "--json")
    listed = json.loads(out)
    assert code == 0 and len(listed) == 2 and all(k["revoked_at"] is None for k in listed)
    assert (
        {k["prefix"] for k in listed} == {first[:10], second[:10]} and first not in out and second not in out
    )
    with server as base:

        def status(key: str) -> int:
            return httpx.get(f"{base}{probe}", headers={"Authorization": f"Bearer {key}"}).status_code

        assert status(first) == status(second) == 200
        first_id = next(k["id"] for k in listed if k["prefix"] == first[:10])
        assert cli(env, party, "key", "revoke", first_id)[0] == 0
        assert status(first) == 401 and status(second) == 200
        code, out = cli(env, party, "key", "rotate", "acme", "--key-file", str(tmp_path / "new.key"))
        assert code == 0 and "1 revoked" in out, out
        rotated = (tmp_path / "new.key").read_text().strip()
        assert (tmp_path / "new.key").stat().st_mode & 0o777 == 0o600
        assert status(second) == 401 and status(rotated) == 200
    assert cli(env, party, "key", "revoke", "00000000-0000-4000-8000-000000000000")[0] == 2
    assert cli(env, party, "key", "list", "nobody")[0] == 2
