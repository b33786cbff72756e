"""The layering the folders show is a contract (pyproject.toml, [tool.importlinter]), checked here.

app layer (labeldp.cli, .client, .demo, .datasets, .processes)
  > the parties (labels_party | features_party, never importing each other)
  > the shared base (labeldp.common, the generated contract labeldp.v1)
  > the mechanism library (labeldp.mechanisms: no web, database, network or wire code)
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "4 kept, 0 broken" in done.stdout


def test_the_contracts_cover_every_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["id"]: c for c in config["contracts"]}
    assert set(contracts) == {"layers", "parties", "pure-math", "base"}
    layers = contracts["layers"]["layers"]
    assert layers[-1] == "labeldp.mechanisms" and "labels_party | features_party" in layers
    assert {"fastapi", "sqlalchemy", "grpc", "httpx", "google"} <= set(
        contracts["pure-math"]["forbidden_modules"]
    )
    assert {"labels_party", "features_party"} <= set(contracts["base"]["forbidden_modules"])


def test_a_violation_is_reported(tmp_path: Path) -> None:
    """The checker is not vacuous: a base module importing a party breaks the contract."""
    for package in (
        "labeldp",
        "labeldp/common",
        "labeldp/mechanisms",
        "labeldp/scale",
        "labeldp/semi_sensitive",
        "labeldp/v1",
        "labeldp/cli",
    ):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for package in ("labels_party", "features_party"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for module in ("labeldp/client.py", "labeldp/processes.py"):
        (tmp_path / module).write_text("")
    for package in ("labeldp/demo", "labeldp/samples", "labeldp/audit"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "labeldp" / "common" / "leak.py").write_text("import labels_party\n")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode != 0
    assert "labeldp.common.leak -> labels_party" in done.stdout


def test_generated_contract_lives_at_its_import_path() -> None:
    import labeldp
    from labeldp.v1 import delivery_pb2

    assert Path(delivery_pb2.__file__).resolve().parent == ROOT / "labeldp" / "v1"
    assert "__path__" not in (ROOT / "labeldp" / "__init__.py").read_text()  # no import-path tricks
    assert list(labeldp.__path__) == [str(ROOT / "labeldp")]
