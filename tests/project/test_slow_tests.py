"""The measured slow list (tests/slow_tests.txt) names tests that exist: a renamed or removed test
would otherwise silently move back into ``make check``'s inner loop, or the line would rot."""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import SLOW_TESTS
from tests.support import slow_tests

ROOT = Path(__file__).resolve().parents[2]


def defined(path: Path) -> set[str]:
    """``function`` and ``Class::method`` names of the tests a module defines."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{f.name}" for f in node.body if isinstance(f, ast.FunctionDef))
    return names


def test_every_listed_test_exists() -> None:
    lines = [s for s in SLOW_TESTS.read_text(encoding="utf-8").splitlines() if s and not s.startswith("#")]
    assert lines == sorted(set(lines))
    missing = []
    for line in lines:
        path, _, name = line.partition("::")
        if not (ROOT / path).is_file() or name.split("[")[0] not in defined(ROOT / path):
            missing.append(line)
    assert missing == []


def test_a_run_report_lists_its_slow_tests(tmp_path: Path) -> None:
    report = tmp_path / "run.xml"
    suite = ET.Element("testsuite")
    for classname, name, seconds in (
        ("tests.project.test_slow_tests", "test_every_listed_test_exists", "2.0"),
        ("tests.project.test_slow_tests", "test_a_run_report_lists_its_slow_tests", "0.1"),
        ("tests.e2e.test_console_browser", "test_everything_is_reachable_by_keyboard", "1.5"),
    ):
        ET.SubElement(suite, "testcase", classname=classname, name=name, time=seconds)
    ET.ElementTree(suite).write(report)
    assert slow_tests.slow([report], 1.5) == [
        "tests/e2e/test_console_browser.py::test_everything_is_reachable_by_keyboard",
        "tests/project/test_slow_tests.py::test_every_listed_test_exists",
    ]
    ET.SubElement(suite, "testcase", classname="tests.nowhere", name="test_x", time="9")
    ET.ElementTree(suite).write(report)
    with pytest.raises(ValueError, match="no test module"):
        slow_tests.slow([report], 1.5)
