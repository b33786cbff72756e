"""Counting repeated keys by sorting first words only must count exactly what a full sort counts,
also when first words tie without the rows being equal (which random keys almost never show); and a
message's IDs, kept in memory or spilled to disk in blocks sharded as they arrive, repeat exactly as
often as counting them says."""

from __future__ import annotations

import collections
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from features_party.receiver import unique_ids
from features_party.receiver.unique_ids import UniqueIds, _repeats


def _by_full_sort(keys: np.ndarray) -> int:
    ordered = keys[np.lexsort((keys[:, 1], keys[:, 0]))]
    return int(np.all(ordered[1:] == ordered[:-1], axis=1).sum())


def test_repeats_equal_a_full_sort_with_tied_first_words() -> None:
    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(0, 400))
        # few distinct first and second words: ties of the first word with and without equal rows
        keys = rng.integers(0, 1 + trial % 13, size=(n, 2)).astype(np.uint64)
        keys[:, 0] *= np.uint64(0x9E3779B97F4A7C15)  # spread over the top bits too
        assert _repeats(keys) == _by_full_sort(keys), trial


def test_distinct_keys_repeat_nothing() -> None:
    keys = np.random.default_rng(4).integers(0, 2**63, size=(100_000, 2)).astype(np.uint64)
    assert _repeats(keys) == 0 == _by_full_sort(keys)
    assert _repeats(np.concatenate([keys, keys[:7]])) == 7


@pytest.mark.parametrize(("in_memory_up_to", "block"), [(10**6, 1 << 20), (0, 1 << 20), (0, 997), (0, 1)])
def test_repeats_count_what_a_counter_counts_in_memory_and_spilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_memory_up_to: int, block: int
) -> None:
    """Chunks of uneven sizes, repeats within a chunk, across chunks and across spilled blocks; blocks
    of one key, of a prime number of keys and of more keys than the message."""
    monkeypatch.setattr(unique_ids, "IN_MEMORY_UP_TO", in_memory_up_to)
    monkeypatch.setattr(unique_ids, "_SLICE", block)
    rng = np.random.default_rng(5)
    for trial in range(6):
        ids = [f"e{i}" for i in rng.integers(0, 6000 if trial % 2 else 10**9, size=5000)]
        expected = sum(c - 1 for c in collections.Counter(ids).values())
        seen = UniqueIds(len(ids), tmp_path / "spill")
        cuts = sorted({0, len(ids), *rng.integers(0, len(ids), size=7).tolist()})
        for a, b in itertools.pairwise(cuts):
            seen.add(pa.array(ids[a:b], pa.string()))
        assert seen.repeats() == expected, trial
        seen.close()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # the spill files had no name
