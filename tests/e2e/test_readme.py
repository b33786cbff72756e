"""Every Python snippet in the README runs as written (the tour: test_tour.py)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_snippets_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README should show the Python API"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_docs_python_snippets_run() -> None:
    """The guides under docs/ show runnable Python too (docs/semi-sensitive.md)."""
    for page in sorted((README.parent / "docs").glob("*.md")):
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            exec(compile(block, str(page), "exec"), {})


def test_readme_documents_the_public_api() -> None:
    from labeldp import mechanisms

    text = README.read_text()
    missing = [name for name in mechanisms.__all__ if name not in text and name[0].islower()]
    assert not missing, missing
