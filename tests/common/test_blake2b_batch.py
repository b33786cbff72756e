"""The compiled batch BLAKE2b gives exactly ``hashlib``'s digests: the ledger keys, checks and user keys
stored in existing ledgers and files, and the receiver's keyed duplicate check, must not change with
the path that computed them."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from labeldp.common import blake2b_batch as batch
from labels_party.budget.ledger_keys import example_key, key_pairs, user_keys

pytest.importorskip("numba")

PERSONS = (b"labeldp-example", b"labeldp-check", b"labeldp-user")


def _ids() -> list[str]:
    """Every length class: empty, short, one block exactly (128), one byte over, several blocks,
    multi-byte UTF-8, and random bytes as text; repeated past the compile threshold."""
    rng = np.random.default_rng(7)
    fixed = ["", "a", "é" * 64, "x" * 127, "y" * 128, "z" * 129, "w" * 255, "v" * 256, "u" * 257, "ü" * 300]
    random = [os.urandom(int(n)).hex()[: int(n)] for n in rng.integers(0, 400, 4_000)]
    ids = fixed + random
    return (ids * (batch.COMPILE_FROM // len(ids) + 1))[: batch.COMPILE_FROM + 11]


def _reference(ids: list[str], size: int, person: bytes = b"", key: bytes = b"") -> np.ndarray:
    raw = b"".join(
        hashlib.blake2b(s.encode(), digest_size=size, person=person, key=key).digest() for s in ids
    )
    return np.frombuffer(raw, dtype="<u8").reshape(len(ids), size // 8)


def test_the_kernel_equals_hashlib_for_every_personalization() -> None:
    ids = _ids()
    out = batch.blake2b_batch(pa.array(ids, pa.string()), 8, persons=PERSONS)
    for j, person in enumerate(PERSONS):
        assert np.array_equal(out[:, j : j + 1], _reference(ids, 8, person=person)), person


@pytest.mark.parametrize("key_size", [1, 16, 64])
def test_the_keyed_kernel_equals_hashlib(key_size: int) -> None:
    ids, key = _ids(), os.urandom(key_size)
    out = batch.blake2b_batch(pa.array(ids, pa.string()), 16, key=key)
    assert np.array_equal(out, _reference(ids, 16, key=key))


def test_sliced_and_chunked_arrays_hash_their_own_strings() -> None:
    ids = _ids()
    whole = pa.array(ids, pa.string())
    sliced = whole.slice(5, batch.COMPILE_FROM)
    assert np.array_equal(batch.blake2b_batch(sliced, 16), _reference(ids[5 : 5 + batch.COMPILE_FROM], 16))
    chunked = pa.chunked_array([whole.slice(0, 100), whole.slice(100)])
    assert np.array_equal(batch.blake2b_batch(chunked, 8), _reference(ids, 8))


def test_small_arrays_take_hashlib_and_agree() -> None:
    ids = _ids()[:50]
    assert np.array_equal(
        batch.blake2b_batch(pa.array(ids), 8, persons=PERSONS[:1]), _reference(ids, 8, PERSONS[0])
    )


def test_ledger_keys_checks_and_users_are_the_stored_ones() -> None:
    """The values existing ledgers hold: ``example_key`` (one ID, hashlib) for every ID of a batch."""
    ids = _ids()
    keys, checks = key_pairs(pa.array(ids, pa.string()))
    assert keys.tolist() == [example_key(e) for e in ids]
    assert np.array_equal(checks.view(np.uint64), _reference(ids, 8, b"labeldp-check")[:, 0])
    users = pa.array([f"user-{i % 25_000}" if i % 3 else None for i in range(len(ids))], pa.string())
    got = user_keys(users, keys)
    named = np.array([u is not None for u in users.to_pylist()])
    expected = _reference([u for u in users.to_pylist() if u is not None], 8, b"labeldp-user")[:, 0]
    assert np.array_equal(got[named].view(np.uint64), expected)


def test_nulls_and_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        batch.blake2b_batch(pa.array(["a", None]), 8)
    with pytest.raises(ValueError):
        batch.blake2b_batch(pa.array(["a"]), 32)


def test_small_batches_take_the_loaded_kernel_and_hash_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the kernel is loaded (a large batch loads it), batches below ``COMPILE_FROM`` use it too
    (hashlib is then asked only for the empty string's digest, not once a string): every length class,
    one string and a few at a time, equal hashlib's digests."""
    ids = _ids()
    batch.blake2b_batch(pa.array(ids, pa.string()), 8)  # loads the kernel
    if not batch.compiled():
        pytest.skip("numba is not installed: hashlib serves every size")
    assert batch._compile.cache_info().currsize == 1
    key = os.urandom(16)
    asked: list[bytes] = []

    class Counting:
        @staticmethod
        def blake2b(data: bytes, **kw: Any) -> Any:
            asked.append(data)
            return hashlib.blake2b(data, **kw)

    monkeypatch.setattr(batch, "hashlib", Counting)
    for start, size in [(0, 1), (1, 1), (3, 2), (0, 10), (10, 37)]:
        part = ids[start : start + size]
        asked.clear()
        out = batch.blake2b_batch(pa.array(part, pa.string()), 16, key=key)
        assert asked == [b""], (start, size)  # the empty string's digest only: the kernel hashed them
        assert np.array_equal(out, _reference(part, 16, key=key)), (start, size)
    assert batch.blake2b_batch(pa.array([], pa.string()), 8).shape == (0, 1)
