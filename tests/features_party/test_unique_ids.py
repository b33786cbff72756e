"""Counting repeated keys by sorting first words only must count exactly what a full sort counts,
also when first words tie without the rows being equal (which random keys almost never show)."""

from __future__ import annotations

import numpy as np

from features_party.receiver.unique_ids import _repeats


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
