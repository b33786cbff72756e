"""Project rules that a reviewer would otherwise have to check by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = [
    p
    for d in ("labeldp", "labels_party", "features_party", "packages/labeldp-model")
    for p in (ROOT / d).rglob("*.py")
]


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
    """Every package in the tree is in the distribution, ``labeldp_model`` too: it is a distribution of
    its own (``packages/labeldp-model``), mapped into this one with ``package-dir``. A folder of data
    alone (the console's static files) is listed too: setuptools ships a folder's files as a package's
    data, and warns at every install about a folder that is not one."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    model = ROOT / "packages" / "labeldp-model"
    found = {
        ".".join(d.relative_to(base).parts)
        for base, top in [
            (ROOT, "labeldp"),
            (ROOT, "labels_party"),
            (ROOT, "features_party"),
            (model, "labeldp_model"),
        ]
        for d in [base / top, *(base / top).rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts
    }
    assert set(setuptools["packages"]) == found
    assert setuptools["package-dir"] == {"labeldp_model": "packages/labeldp-model/labeldp_model"}
    own = tomllib.loads((model / "pyproject.toml").read_text())
    assert own["tool"]["setuptools"]["packages"] == ["labeldp_model"]


def test_the_model_package_has_labeldp_s_version_and_needs_numpy_and_scikit_learn_only() -> None:
    import tomllib

    import labeldp
    import labeldp_model

    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    own = tomllib.loads((ROOT / "packages" / "labeldp-model" / "pyproject.toml").read_text())["project"]
    assert main["version"] == own["version"] == labeldp.__version__ == labeldp_model.__version__
    assert sorted(re.split(r"[<>=!~ ]", d)[0] for d in own["dependencies"]) == ["numpy", "scikit-learn"]
    # the same bounds as labeldp's, so that installing both never conflicts
    assert set(own["dependencies"]) <= set(main["dependencies"])


def test_both_services_start_without_the_optional_extras() -> None:
    """The services' base install has no PyTorch, Opacus, dp-accounting, Dask or numba (the compose
    image installs only demo, fast and scale; a plain ``pip install`` none): with those imports made
    to fail, both apps still build — optional work imports them when it runs."""
    import subprocess
    import sys

    blocked = ("torch", "opacus", "dp_accounting", "numba", "dask", "distributed", "lightgbm", "matplotlib")
    probe = (
        "import importlib.abc, sys\n"
        f"BLOCKED = {blocked!r}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import tempfile, pathlib\n"
        "from labels_party.api.app import create_app\n"
        "from labels_party.config import LabelsSettings\n"
        "from features_party.api.app import create_app as features_app\n"
        "from features_party.config import FeaturesSettings\n"
        "root = pathlib.Path(tempfile.mkdtemp())\n"
        "create_app(LabelsSettings(data_dir=root / 'labels'))\n"
        "features_app(FeaturesSettings(data_dir=root / 'features'))\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_the_wheel_ships_every_console_file(tmp_path: Path) -> None:
    """The consoles' shell, modules, styles and icon are package data: a wheel built from the tree
    (offline, with the installed setuptools) holds every one of them, so an installed service serves
    its console without the source tree."""
    import shutil
    import subprocess
    import sys
    import zipfile

    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    # the packages (and packages/labeldp-model, mapped into the distribution with package-dir)
    for package in ("labeldp", "labels_party", "features_party", "packages"):
        skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
        shutil.copytree(ROOT / package, source / package, ignore=skip)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", "dist", "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    # every folder shipped is declared: no "Package would be ignored" from setuptools (it printed ~160
    # lines on every `pip install -e .` when the console's folders were data of labeldp.console)
    assert "would be ignored" not in built.stderr, built.stderr[:2000]
    (wheel,) = (source / "dist").glob("labeldp-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    static = ROOT / "labeldp" / "console" / "static"
    files = {str(p.relative_to(ROOT)) for p in static.rglob("*") if p.is_file()}
    assert files and files <= shipped, sorted(files - shipped)


def _loaded_at_start(app: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules of ``prefixes`` a fresh interpreter holds once the CLI and ``app`` are imported."""
    import subprocess
    import sys

    code = (
        f"import json, sys, labeldp.cli.main, {app}; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return list(json.loads(out.stdout))


def test_the_labels_party_starts_without_loading_scipy() -> None:
    """scipy's optimize, special and linalg took about 0.6 s of each labels-party start (3.7 s, idle):
    the service imports them where a release first needs them, not at start-up."""
    assert _loaded_at_start("labels_party.api.app", ("scipy",)) == []


def test_the_features_party_starts_without_loading_scikit_learn() -> None:
    """scikit-learn (and the scipy it loads) took about 1.6 s of each features-party start (3.9 s):
    the service imports it where a model is first fitted or loaded, not at start-up."""
    assert _loaded_at_start("features_party.api.app", ("sklearn", "scipy")) == []
