"""Project rules that a reviewer would otherwise have to check by hand."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = [p for d in ("labeldp", "labels_party", "features_party") for p in (ROOT / d).rglob("*.py")]


def test_no_seeded_or_non_cryptographic_randomness_in_production_code() -> None:
    pattern = re.compile(
        r"default_rng\(|np\.random\.|numpy\.random|RandomState|^import random$|^from random import|"
        r"random\.(random|choice|randint|seed)\("
    )
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in PRODUCTION
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, offenders


def test_ci_calls_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make demo" in readme
    assert re.search(r"^make test$", ci, re.M)


def test_pyproject_lists_every_python_package() -> None:
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(d.relative_to(ROOT).parts)
        for top in ("labeldp", "labels_party", "features_party")
        for d in [ROOT / top, *(ROOT / top).rglob("*")]
        if d.is_dir() and any(d.glob("*.py")) and "__pycache__" not in d.parts
    }
    assert listed == found
