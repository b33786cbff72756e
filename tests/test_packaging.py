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


def test_mechanisms_import_no_web_database_or_network_code() -> None:
    banned = re.compile(r"^\s*(import|from)\s+(fastapi|sqlalchemy|grpc|httpx|requests|socket|uvicorn)\b")
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "labeldp" / "mechanisms").rglob("*.py")
        if any(banned.match(line) for line in p.read_text().splitlines())
    ]
    assert not offenders, offenders


def test_parties_never_import_each_other() -> None:
    for package, other in (("labels_party", "features_party"), ("features_party", "labels_party")):
        pattern = re.compile(rf"^\s*(import|from)\s+{other}\b")
        offenders = [
            str(p.relative_to(ROOT))
            for p in (ROOT / package).rglob("*.py")
            if any(pattern.match(line) for line in p.read_text().splitlines())
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
