"""The configuration tables: every field of ``LabelsSettings`` and ``FeaturesSettings`` as its
environment variable, default and description, rendered in place of ``<!-- settings:labels -->`` and
``<!-- settings:features -->`` in ``reference/configuration.md``."""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files
from pydantic_settings import BaseSettings

from features_party.config import FeaturesSettings
from labels_party.config import LabelsSettings

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/configuration.md"


def escape_pipes(text: str) -> str:
    """Escape ``|`` for a table cell, except inside code spans (where Markdown tables keep it as is)."""
    parts = text.split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def default_of(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= 2**20 and value % 2**20 == 0:
        return f"{value // 2**30} GiB" if value % 2**30 == 0 else f"{value // 2**20} MiB"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{value}`"


def table(settings: type[BaseSettings]) -> str:
    prefix = str(settings.model_config.get("env_prefix", ""))
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in settings.model_fields.items():
        meaning = escape_pipes(field.description or "")
        lines.append(f"| `{prefix}{name.upper()}` | {default_of(field.default)} | {meaning} |")
    return "\n".join(lines)


def main() -> None:
    page = (ROOT / "docs" / PAGE).read_text()
    for party, settings in (("labels", LabelsSettings), ("features", FeaturesSettings)):
        marker = f"<!-- settings:{party} -->"
        if marker not in page:
            raise RuntimeError(f"docs/{PAGE} lost its {marker} line")
        page = page.replace(marker, table(settings))
    with mkdocs_gen_files.open(PAGE, "w") as f:
        f.write(page)


main()
