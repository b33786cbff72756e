"""Every Python snippet in the README and the docs runs as written, and so does the tour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS = README.parent / "docs"
TOUR_MARKER = "<!-- readme-tour -->"


def tour_page() -> Path:
    """The page that holds the tour (marked ``<!-- readme-tour -->``): docs/tour.md, or the README."""
    pages = [p for p in [README, *sorted(DOCS.rglob("*.md"))] if TOUR_MARKER in p.read_text()]
    assert len(pages) == 1, f"exactly one page should hold the tour, found {pages}"
    return pages[0]


def test_readme_python_snippets_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should show the Python API"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_docs_python_snippets_run() -> None:
    """Every page under docs/ (concepts, guides, the library reference) runs its Python blocks too; a
    block with a title (```` ```python title="Needs … (not run by the tests)" ````) is shown only: it
    needs running services or a reader's files."""
    pages = sorted(DOCS.rglob("*.md"))
    assert any("```python\n" in p.read_text() for p in pages)
    for page in pages:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            exec(compile(block, str(page), "exec"), {})


def test_docs_document_the_public_api() -> None:
    """The library's page lists every public function of ``labeldp.mechanisms`` (its classes are in
    the generated reference)."""
    from labeldp import mechanisms

    text = (DOCS / "reference" / "python" / "index.md").read_text()
    missing = [name for name in mechanisms.__all__ if name not in text and name[0].islower()]
    assert not missing, missing


@pytest.mark.processes
def test_readme_tour_runs_against_real_services(tmp_path: Path) -> None:
    """The shell tour (docs/tour.md), run as written with bash against both services on free ports."""
    import os
    import subprocess
    import sys

    from labeldp.processes import free_port

    tour = re.search(r"<!-- readme-tour -->\n```sh\n(.*?)```", tour_page().read_text(), flags=re.S)
    assert tour is not None
    script = tmp_path / "tour.sh"
    script.write_text("set -euo pipefail\n" + tour.group(1))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TMPDIR": str(tmp_path),
        "LABELDP_PORT": str(free_port()),
        "LABELDP_FEATURES_PORT": str(free_port()),
        "LABELDP_FEATURES_GRPC_PORT": str(free_port()),
    }
    for name in ("LABELDP_DATABASE_URL", "LABELDP_FEATURES_DATABASE_URL", "LABELDP_API_KEY"):
        env.pop(name, None)
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    assert "curl" not in tour.group(1) and "jq" not in tour.group(1)  # the CLI alone
    assert "refused with exit code 1" in out and "409 budget-exhausted" in done.stderr
    assert "2,000 examples in both" in out and "2,000 labels stored" in out
    assert "from advertiser: 2,000 examples at ε = 1" in out  # the publisher's view of the release
    assert "deliveries: delivered" in out
    predictions = [line.split("\t") for line in out.splitlines() if line.startswith("click-")]
    assert [p[0] for p in predictions] == ["click-1", "click-2"] and all(float(p[1]) > 0 for p in predictions)
    assert any(tmp_path.glob("*/model.skops"))  # the model left the service
