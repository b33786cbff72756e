"""BLAKE2b of every string of an Arrow array at once: the same digests as ``hashlib.blake2b``.

Both parties hash every example ID (the labels party's ledger key and identity check, the receiver's
keyed duplicate check), and the stored keys are BLAKE2b digests that existing ledgers and files hold,
so the hash cannot change — only its speed. One ``hashlib`` call per ID costs about a microsecond of
interpreter per hash; here one compiled loop (numba, the optional ``fast`` extra that the image
installs, as for the optimizer) walks the array's own offsets and bytes, and computes every requested
variant of an ID (several personalizations, or one secret key) while its bytes are in cache.

Without numba, or for small arrays where compiling would cost more than it saves, the same digests
come from ``hashlib``: the result never depends on which path ran (``tests/common/test_blake2b_batch.py``
checks the kernel against ``hashlib`` on IDs of every length class, empty and multi-block ones too).
The kernel is compiled once per process (seconds the first time on a machine, then loaded from numba's
disk cache in a fraction of one; the services load it at start-up, ``labels_party/datasets/warm.py``
and the receiver's server) and releases the interpreter lock while it runs. A keyed hash's first
block (the key) is the same for every string: it is compressed once per call, not once per ID.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from functools import cache
from types import FunctionType
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

COMPILE_FROM = 20_000  # strings: below this, while the kernel is not loaded, hashlib finishes first
_COMPILING = threading.Lock()  # one compilation, however many threads ask at once

_IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    dtype=np.uint64,
)
_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    ],
    dtype=np.intp,
)


def _rotr(x: Any, n: int) -> Any:
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


def _g(a: Any, b: Any, c: Any, d: Any, x: Any, y: Any) -> tuple[Any, Any, Any, Any]:
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


def _compress_source() -> str:
    """BLAKE2b's compression function, its twelve rounds written out with the message words each
    round reads (``_SIGMA``) as names, so that the compiler keeps the state and the block in registers
    (a loop over rounds indexing the block through ``_SIGMA`` runs several times slower)."""
    columns = ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15))
    diagonals = ((0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))
    lines = [
        "def _compress(h, w, t, last):",
        "    " + ", ".join(f"m{i}" for i in range(16)) + " = " + ", ".join(f"w[{i}]" for i in range(16)),
        "    " + ", ".join(f"v{i}" for i in range(8)) + " = " + ", ".join(f"h[{i}]" for i in range(8)),
        "    " + ", ".join(f"v{i + 8}" for i in range(8)) + " = " + ", ".join(f"_IV[{i}]" for i in range(8)),
        "    v12 ^= t",
        "    if last:",
        "        v14 = ~v14",
    ]
    for r in range(12):
        s = _SIGMA[r]
        for g, (a, b, c, d) in enumerate(columns + diagonals):
            vs = f"v{a}, v{b}, v{c}, v{d}"
            lines.append(f"    {vs} = _g({vs}, m{s[2 * g]}, m{s[2 * g + 1]})")
    lines += [f"    h[{i}] ^= v{i} ^ v{i + 8}" for i in range(8)]
    return "\n".join(lines) + "\n"


_namespace: dict[str, Any] = {"_IV": _IV, "_g": _g}
exec(_compress_source(), _namespace)  # our own text, fixed at import
_compress: Callable[[Any, Any, Any, bool], None] = _namespace["_compress"]


def _hash_all(data: Any, offsets: Any, starts: Any, t0: Any, empty: Any, words: int, out: Any) -> None:
    """``out[i, j*words:(j+1)*words]``: the first ``words`` state words of variant ``j`` of string
    ``i``. ``starts[j]``: the state before the string's first block (after the parameter block, and
    after the key's block for a keyed hash: the same for every string, so compressed once), ``t0``
    the bytes hashed by then (0, or 128 with a key); ``empty[j]``: the digest of the empty string,
    whose one block is the last (the key's block, with a key)."""
    block = np.zeros(128, dtype=np.uint8)
    m = block.view(np.uint64)
    h = np.empty(8, dtype=np.uint64)
    for i in range(offsets.size - 1):
        lo, hi = offsets[i], offsets[i + 1]
        for j in range(starts.shape[0]):
            if hi == lo:
                for w in range(words):
                    out[i, j * words + w] = empty[j, w]
                continue
            h[:] = starts[j]
            t = t0
            at = lo
            while True:
                rest = hi - at
                if rest > 128:
                    block[:] = data[at : at + 128]
                    t += np.uint64(128)
                    _compress(h, m, t, False)
                    at += 128
                else:
                    block[:] = 0
                    block[:rest] = data[at:hi]
                    t += np.uint64(rest)
                    _compress(h, m, t, True)
                    break
            for w in range(words):
                out[i, j * words + w] = h[w]


@cache
def _compile() -> Callable[..., None] | None:
    """The batch kernel compiled by numba (once per process), or None without numba."""
    try:
        import numba
    except ImportError:
        return None

    def jit(fn: Callable[..., Any], **compiled_helpers: object) -> Any:
        # the same code object, resolving its helpers to their compiled twins
        assert isinstance(fn, FunctionType)
        twin = FunctionType(fn.__code__, dict(fn.__globals__, **compiled_helpers))
        # LLVM inlines the helpers; the kernel (helpers included) is cached on disk for the next process
        return numba.njit(nogil=True, cache=fn is _hash_all)(twin)

    rotr = jit(_rotr)
    g = jit(_g, _rotr=rotr)
    compress = jit(_compress, _g=g)
    kernel: Callable[..., None] = jit(_hash_all, _compress=compress)
    return kernel


def compiled() -> bool:
    """Load (or compile) the kernel now, ahead of the first large batch (a service's start-up does, in
    a thread); whether numba is here."""
    with _COMPILING:
        return _compile() is not None


def _start(digest_size: int, key: bytes, person: bytes) -> npt.NDArray[np.uint64]:
    """The chaining state after BLAKE2b's parameter block (no salt, sequential mode)."""
    h = _IV.copy()
    h[0] ^= np.uint64(0x01010000 | (len(key) << 8) | digest_size)
    personal = np.frombuffer(person.ljust(16, b"\0"), dtype="<u8")
    h[6] ^= personal[0]
    h[7] ^= personal[1]
    return h


def _buffers(strings: pa.Array) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The array's bytes and each string's offsets into them (no copy of the bytes)."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    if not pa.types.is_large_binary(strings.type):
        strings = strings.cast(pa.large_binary()) if not pa.types.is_large_string(strings.type) else strings
    _, offsets_buf, data_buf = strings.buffers()
    n = len(strings)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=n + 1, offset=8 * strings.offset)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, np.ascontiguousarray(offsets)


def blake2b_batch(
    strings: pa.Array, digest_size: int, *, persons: Sequence[bytes] = (b"",), key: bytes = b""
) -> npt.NDArray[np.uint64]:
    """``(n, len(persons) * digest_size // 8)`` words: for each string (its UTF-8 or raw bytes) and
    each personalization, ``hashlib.blake2b(s, digest_size=…, person=…, key=key)`` read as
    little-endian 64-bit words. ``digest_size`` is 8 or 16; nulls are not allowed (the callers'
    validation refused them)."""
    if digest_size not in (8, 16) or len(key) > 64 or any(len(p) > 16 for p in persons):
        raise ValueError("digest_size must be 8 or 16, keys at most 64 bytes, persons at most 16")
    if strings.null_count:
        raise ValueError("null strings have no digest")
    words = digest_size // 8
    n = len(strings)
    out = np.empty((n, len(persons) * words), dtype=np.uint64)
    # a small batch takes hashlib only while the kernel is not loaded yet (compiling would cost more);
    # once it is, the kernel is the faster path at any size (an upload's last batch of each row group)
    loaded = _compile.cache_info().currsize > 0
    kernel = _compile() if n and (n >= COMPILE_FROM or loaded) and compiled() else None
    if kernel is None:
        flat = out.reshape(-1)
        at = 0
        values = strings.cast(pa.binary()) if pa.types.is_string(strings.type) else strings
        for raw in values.to_pylist():
            for person in persons:
                digest = hashlib.blake2b(raw, digest_size=digest_size, person=person, key=key).digest()
                flat[at : at + words] = np.frombuffer(digest, dtype="<u8")
                at += words
        return out
    data, offsets = _buffers(strings)
    starts = np.stack([_start(digest_size, key, p) for p in persons])
    t0 = np.uint64(0)
    if key:  # the key's block is every string's first: compressed once, here
        block = np.frombuffer(key.ljust(128, b"\0"), dtype="<u8")
        with np.errstate(over="ignore"):
            for h in starts:
                _compress(h, block, np.uint64(128), False)
        t0 = np.uint64(128)
    empty = np.stack(
        [
            np.frombuffer(hashlib.blake2b(b"", digest_size=digest_size, person=p, key=key).digest(), "<u8")
            for p in persons
        ]
    )
    kernel(data, offsets, starts, t0, empty, words, out)
    return out
