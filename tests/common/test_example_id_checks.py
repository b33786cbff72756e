"""The fast checks of example IDs (first bytes, one pass over the bytes) refuse exactly the IDs the
plain Arrow checks refuse: empty or blank, control characters — on sliced arrays too."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from labeldp.common.errors import DomainError
from labeldp.common.example_ids import _control_characters, check_ids

PIECES = ["a", "Z", "0", " ", "\t", "\n", "\x00", "\x1f", "\x7f", "é", "\u3000", "\u00a0", "中", "~", "-", ""]


def _plain(ids: pa.Array) -> str | None:
    """The code the unoptimized checks give (the first failing rule), or None."""
    blank = pc.or_kleene(pc.is_null(ids), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(ids)), 0))
    if pc.any(pc.fill_null(blank, True)).as_py():
        return "missing-example-id"
    if pc.any(pc.greater(pc.binary_length(ids), 256)).as_py():
        return "example-id-too-long"
    if pc.any(pc.fill_null(pc.match_substring_regex(ids, r"[\x00-\x1f\x7f]"), True)).as_py():
        return "invalid-example-id"
    return None


def _code(ids: pa.Array) -> str | None:
    try:
        check_ids(ids)
    except DomainError as exc:
        return exc.code
    return None


def test_fast_checks_refuse_what_the_plain_checks_refuse() -> None:
    rng = np.random.default_rng(5)
    for trial in range(400):
        n = int(rng.integers(1, 12))
        texts: list[str | None] = [
            "".join(rng.choice(PIECES, size=int(rng.integers(0, 4)))) or "x" for _ in range(n)
        ]
        bad = int(rng.integers(0, n))
        texts[bad] = None if trial % 17 == 0 else "".join(rng.choice(PIECES, size=int(rng.integers(0, 4))))
        whole = pa.array(["ok-1", *texts, "ok-2"], pa.string())
        for ids in (whole, whole.slice(1, n)):
            assert _code(ids) == _plain(ids), (trial, ids.to_pylist())


@pytest.mark.parametrize("at", [0, 3, 9])
def test_the_rows_with_control_characters_are_the_ones_named(at: int) -> None:
    texts = [f"id-{i}" for i in range(10)]
    texts[at] = "x\x01y"
    ids = pa.array(["first", *texts], pa.string()).slice(1)
    assert np.flatnonzero(_control_characters(ids)).tolist() == [at]
    with pytest.raises(DomainError) as info:
        check_ids(ids, offset=100)
    assert info.value.extra["rows"] == [101 + at]
