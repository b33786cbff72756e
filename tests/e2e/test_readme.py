"""Every Python snippet in the README and the docs runs as written (the tour: test_tour.py)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS = README.parent / "docs"


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
