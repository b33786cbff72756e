"""Pages made from files outside ``docs/``, so that each fact has one home:

- ``examples/NAME.md`` from each jupytext script ``docs/examples/NAME.py`` (markdown cells as text,
  code cells as code; the tests run the scripts themselves);
- ``benchmarks/results.md`` from BENCHMARKS.md at the repository's root (its links rewritten for
  the site);
- ``reference/datasets.md``'s ``<!-- provenance -->`` from ``labeldp/samples/PROVENANCE.md``;
- ``index.md``, the home page, from README.md (the landing page), its links rewritten for the site and
  its drawings (fences with no language) shown without a copy button over their first line.
"""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def example_page(script: Path) -> str:
    notebook = jupytext.read(script)
    name = script.name
    lines: list[str] = []
    for cell in notebook.cells:
        source = cell.source.strip()
        if not source:
            continue
        if cell.cell_type == "markdown":
            lines += [source, ""]
        else:
            lines += ["```py", source, "```", ""]
    lines += [
        "---",
        "",
        f"This page is the script [`docs/examples/{name}`]({name}), a jupytext percent script:",
        f"run it with `python docs/examples/{name}`, or open it as a notebook with",
        f"`jupytext --to notebook docs/examples/{name}`. The test suite runs it",
        "(`tests/project/test_docs.py`).",
        "",
    ]
    return "\n".join(lines)


def benchmarks_page() -> str:
    text = (ROOT / "BENCHMARKS.md").read_text()
    text = text.replace("](docs/benchmarks/", "](").replace("](docs/", "](../")
    note = (
        "\n\n!!! note\n    This page is `BENCHMARKS.md` at the repository's root; `make bench` reruns "
        "every benchmark.\n"
    )
    title, _, rest = text.partition("\n")
    return title + note + rest


def drawings_without_copy_button(text: str) -> str:
    """A fence with no language is a drawing (the README's diagram): read, not copied, so the theme's
    copy button, which sits over a block's first line, is left off (``.no-copy``)."""
    lines, fenced = [], False
    for line in text.split("\n"):
        drawing = not fenced and line.strip() == "```"
        lines.append("``` { .text .no-copy }" if drawing else line)
        fenced ^= line.startswith("```")
    return "\n".join(lines)


def home_page() -> str:
    text = drawings_without_copy_button((ROOT / "README.md").read_text())
    text = re.sub(r"\]\(docs/examples/([\w-]+)\.py\)", r"](examples/\1.md)", text)
    text = text.replace("](docs/)", "](development.md#the-documentation-site)")
    text = text.replace("](BENCHMARKS.md)", "](benchmarks/results.md)").replace("](docs/", "](")
    return text


def main() -> None:
    with mkdocs_gen_files.open("index.md", "w") as f:
        f.write(home_page())
    for script in sorted((DOCS / "examples").glob("*.py")):
        with mkdocs_gen_files.open(f"examples/{script.stem}.md", "w") as f:
            f.write(example_page(script))
    with mkdocs_gen_files.open("benchmarks/results.md", "w") as f:
        f.write(benchmarks_page())
    page = (DOCS / "reference" / "datasets.md").read_text()
    provenance = (ROOT / "labeldp" / "samples" / "PROVENANCE.md").read_text()
    body = re.sub(r"^# .*\n", "", provenance, count=1).strip()
    with mkdocs_gen_files.open("reference/datasets.md", "w") as f:
        f.write(page.replace("<!-- provenance -->", body))


main()
