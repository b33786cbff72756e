"""The documentation site: the strict build `make docs` runs, what the generated references must cover,
that the site loads nothing from the network, and the executable examples under docs/examples/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))
# examples that start the services as processes (the others need only the library)
STARTS_SERVICES = {"publisher_model.py", "bring_your_own_trainer.py"}
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}  # the toolchain's notices


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`mkdocs build --strict` into a temporary folder: a warning (a broken link or anchor, a page
    missing from the nav, a docstring mkdocstrings cannot read) fails it."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, **QUIET},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    return out


def test_make_docs_runs_the_strict_build() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "docs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert dry.stdout.strip().splitlines()[-1] == ".venv/bin/mkdocs build --strict"
    assert "site/" in (ROOT / ".gitignore").read_text().splitlines()


def test_the_docs_toolchain_is_in_the_dev_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["docs"]) <= set(extras["dev"])


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    for page in (
        "index.html",  # the README
        "quickstart.html",
        "tour.html",
        "examples/mechanism_walkthrough.html",
        "examples/publisher_model.html",
        "benchmarks/results.html",
        "reference/python/mechanisms.html",
    ):
        assert (site / page).is_file(), page
    home = re.sub(r"<[^>]+>", "", (site / "index.html").read_text())  # the README, as text
    assert "make demo" in home and "make test" in home


@pytest.mark.parametrize("party", ["labels", "features"])
def test_the_rest_reference_has_every_operation(site: Path, party: str) -> None:
    doc = json.loads((site / "reference" / "rest" / f"{party}-openapi.json").read_text())
    page = (site / "reference" / "rest" / f"{party}.html").read_text()
    operations = [op for item in doc["paths"].values() for op in item.values() if "operationId" in op]
    assert operations
    missing = [
        op["operationId"] for op in operations if f'id="op-{op["operationId"].replace("_", "-")}"' not in page
    ]
    assert not missing, missing
    missing_schemas = [name for name in doc["components"]["schemas"] if name not in page]
    assert not missing_schemas, missing_schemas


def test_the_grpc_reference_has_every_rpc_and_message(site: Path) -> None:
    page = (site / "reference" / "grpc.html").read_text()
    protos = "\n".join(p.read_text() for p in (ROOT / "proto").rglob("*.proto"))
    names = re.findall(r"^\s*(?:rpc|message|enum|service)\s+(\w+)", protos, flags=re.M)
    assert names and not [n for n in names if n not in page]
    assert "Missing associated documentation" not in page


def test_the_configuration_reference_has_every_setting(site: Path) -> None:
    from features_party.config import FeaturesSettings
    from labels_party.config import LabelsSettings

    page = (site / "reference" / "configuration.html").read_text()
    for prefix, settings in (("LABELDP_", LabelsSettings), ("LABELDP_FEATURES_", FeaturesSettings)):
        missing = [name for name in settings.model_fields if f"{prefix}{name.upper()}" not in page]
        assert not missing, (prefix, missing)


def test_the_site_loads_nothing_from_the_network(site: Path) -> None:
    """No web font, CDN script or remote stylesheet: the site reads the same offline. (Links a reader
    may follow are fine; only what a page loads is checked.)"""
    remote = re.compile(
        r"<(?:script|img|iframe|source)\b[^>]*\bsrc=[\"']?(?:https?:)?//"
        r"|<link\b[^>]*\bhref=[\"']?(?:https?:)?//[^>]*>"
        r"|@import\s+url\(\s*[\"']?(?:https?:)?//"
        r"|fonts\.googleapis|fonts\.gstatic",
        re.I,
    )
    offenders = []
    for path in [*site.rglob("*.html"), *site.rglob("*.css")]:
        for match in remote.finditer(path.read_text(errors="replace")):
            if 'rel="canonical"' not in match.group(0):
                offenders.append(f"{path.relative_to(site)}: {match.group(0)[:120]}")
    assert not offenders, offenders[:10]


def test_every_example_is_a_jupytext_notebook() -> None:
    import jupytext

    assert {p.name for p in EXAMPLES} >= {"mechanism_walkthrough.py", *STARTS_SERVICES}
    for script in EXAMPLES:
        notebook = jupytext.read(script)
        kinds = [cell.cell_type for cell in notebook.cells]
        assert kinds.count("markdown") >= 3 and kinds.count("code") >= 3, script.name
        assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# "), (
            script.name
        )


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(p, id=p.stem, marks=[pytest.mark.processes] if p.name in STARTS_SERVICES else [])
        for p in EXAMPLES
    ],
)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    """Each example runs top to bottom as a script (its assertions are part of the page)."""
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
