"""The layering the folders show is a contract (pyproject.toml, [tool.importlinter]), checked here.

app layer (labeldp.cli, .client, .terminal, .demo, .audit, .samples, .processes)
  > the parties (labels_party | features_party, never importing each other)
  > the shared base (labeldp.common, the generated contract labeldp.v1)
  > the mechanism library (labeldp.mechanisms: no web, database, network or wire code)

and inside: no import cycle between sibling modules at any level, and layers inside each party and
inside the mechanism library. Beside them, labeldp_model (what an exported model needs; a distribution
of its own) imports none of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "9 kept, 0 broken" in done.stdout


def test_the_contracts_cover_every_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["id"]: c for c in config["contracts"]}
    assert set(contracts) == {
        "layers",
        "parties",
        "pure-math",
        "base",
        "acyclic",
        "labels-party-layers",
        "features-party-layers",
        "mechanisms-layers",
        "model-package",
    }
    assert set(contracts["acyclic"]["ancestors"]) == {
        "labeldp",
        "labels_party",
        "features_party",
        "labeldp_model",
    }
    layers = contracts["layers"]["layers"]
    assert layers[-1] == "labeldp.mechanisms" and "labels_party | features_party" in layers
    assert {"fastapi", "sqlalchemy", "grpc", "httpx", "google"} <= set(
        contracts["pure-math"]["forbidden_modules"]
    )
    assert {"labels_party", "features_party"} <= set(contracts["base"]["forbidden_modules"])
    assert contracts["model-package"]["source_modules"] == ["labeldp_model"]
    assert {"labeldp", "labels_party", "features_party", "pandas"} <= set(
        contracts["model-package"]["forbidden_modules"]
    )


def test_a_violation_is_reported(tmp_path: Path) -> None:
    """The checker is not vacuous: in a skeleton of every module the contracts name, a base module
    importing a party breaks the contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = set(config["root_packages"])
    for contract in config["contracts"]:
        for layer in contract.get("layers", []):
            named.update(m.strip() for m in layer.replace(":", "|").split("|"))
        named.update(contract.get("source_modules", []) + contract.get("modules", []))
    for module in sorted(named):
        folder = tmp_path.joinpath(*module.split("."))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
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
    assert "labeldp.common.leak -> labels_party" in done.stdout, done.stdout[-3000:]


def test_a_cycle_is_reported(tmp_path: Path) -> None:
    """The acyclic contract is not vacuous either: two sibling modules importing each other break it."""
    package = tmp_path / "labels_party"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("import labels_party.two\n")
    (package / "two.py").write_text("def later() -> None:\n    import labels_party.one\n")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [acyclic] = [c for c in config["contracts"] if c["type"] == "acyclic_siblings"]
    for root in set(acyclic["ancestors"]) - {"labels_party"}:
        (tmp_path / root).mkdir()
        (tmp_path / root / "__init__.py").write_text("")
    roots = json.dumps(acyclic["ancestors"])
    (tmp_path / "pyproject.toml").write_text(
        "[tool.importlinter]\n"
        f"root_packages = {roots}\n"
        "[[tool.importlinter.contracts]]\n"
        f'id = "{acyclic["id"]}"\nname = "{acyclic["name"]}"\ntype = "acyclic_siblings"\n'
        f"ancestors = {acyclic['ancestors']!r}\n".replace("'", '"')
    )
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode != 0 and "No cycles are allowed in labels_party" in done.stdout, done.stdout[
        -2000:
    ]


def test_generated_contract_lives_at_its_import_path() -> None:
    import labeldp
    from labeldp.v1 import delivery_pb2

    assert Path(delivery_pb2.__file__).resolve().parent == ROOT / "labeldp" / "v1"
    assert "__path__" not in (ROOT / "labeldp" / "__init__.py").read_text()  # no import-path tricks
    assert list(labeldp.__path__) == [str(ROOT / "labeldp")]
