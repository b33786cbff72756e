"""Regenerate ``tests/slow_tests.txt`` from measured runs: every test whose setup, call and teardown
took at least ``--seconds`` (default 1) in any run given is marked ``slow`` and so leaves ``make
check`` (it stays in ``make test``). The list is measured, not guessed, so the inner loop keeps to its
3 minutes as tests grow: run ``make unit PYTEST_ARGS=--junitxml=/tmp/suite.xml`` and ``make check
PYTEST_ARGS=--junitxml=/tmp/check.xml`` (a test's time differs between the two), then ``python -m
tests.support.slow_tests /tmp/suite.xml /tmp/check.xml``."""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

LIST = Path(__file__).resolve().parents[1] / "slow_tests.txt"
HEADER = """\
# Tests marked `slow` by measurement (tests/conftest.py reads this file): each took {seconds:g} s or more
# (setup, call and teardown) in a measured `make test` or `make check` run on 2 cores, so `make check`
# leaves them out; `make test` runs them all. Regenerate after runs: python -m tests.support.slow_tests
# JUNIT_XML... (tests/support/slow_tests.py). tests/project/test_slow_tests.py checks each line's test.
"""


def node_id(case: ET.Element) -> str:
    """pytest's node ID of a junit ``testcase`` (``classname`` is the module's dotted path, then any
    test class)."""
    parts = case.attrib["classname"].split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (LIST.parents[1] / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], case.attrib["name"]])
    raise ValueError(f"no test module for {case.attrib['classname']}")


def slow(reports: list[Path], seconds: float) -> list[str]:
    """The tests that took ``seconds`` or more in any of the reports."""
    found = {
        node_id(case)
        for report in reports
        for case in ET.parse(report).getroot().iter("testcase")
        if float(case.attrib.get("time", 0)) >= seconds
    }
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("junit", type=Path, nargs="+", help="--junitxml reports of whole runs")
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    found = slow(args.junit, args.seconds)
    LIST.write_text(HEADER.format(seconds=args.seconds) + "".join(f"{n}\n" for n in found), encoding="utf-8")
    print(f"{len(found)} tests of {args.seconds:g} s or more listed in {LIST}")


if __name__ == "__main__":
    main()
