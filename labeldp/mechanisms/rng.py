"""Cryptographically secure randomness for every privacy-critical draw.

Each ``SecureRandom`` is a ChaCha20 keystream keyed with 256 fresh bits from ``os.urandom``; the
mechanisms create one per call, so no state survives between releases and nothing can be replayed.
There is deliberately no seed argument: reproducible streams exist only in the test suite, which
subclasses this class and overrides ``_key_material`` (``tests/support/seeded.py``).

Draws are integers (uniform 64-bit words, unbiased bounded integers, exact rational Bernoullis), so
privacy-relevant probabilities are compared against exact integer thresholds rather than floats.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from labeldp.mechanisms._types import IntArray, UIntArray

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)
_BUFFER_BYTES = 1 << 16


class SecureRandom:
    """A fresh ChaCha20 keystream keyed from the OS CSPRNG."""

    def __init__(self) -> None:
        key, nonce = self._key_material()
        self._encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        self._small = b""  # buffered keystream for scalar draws (``randbelow``)

    def _key_material(self) -> tuple[bytes, bytes]:
        """A 256-bit key and a nonce whose 32-bit block counter starts at zero."""
        return os.urandom(32), bytes(4) + os.urandom(12)

    # -- bulk draws -------------------------------------------------------------------------
    def random_bytes(self, n: int) -> bytes:
        """``n`` keystream bytes (the keystream is ChaCha20 applied to zeros)."""
        if n <= 0:
            return b""
        zeros = np.zeros(n, dtype=np.uint8)
        out = bytearray(n)
        written = self._encryptor.update_into(zeros.data, out)
        if written != n:  # stream ciphers return exactly what they are given
            raise RuntimeError("keystream came back short")
        return bytes(out)

    def uint64(self, n: int) -> UIntArray:
        """``n`` independent uniform 64-bit words."""
        return np.frombuffer(self.random_bytes(8 * n), dtype=np.uint64)

    def uint32(self, n: int) -> UIntArray:
        return np.frombuffer(self.random_bytes(4 * n), dtype=np.uint32)

    def integers_below(self, bound: int, n: int) -> IntArray:
        """``n`` uniform integers in ``[0, bound)``, exactly unbiased (Lemire's multiply-shift with
        rejection), for ``1 <= bound <= 2**32``."""
        if not 1 <= bound <= 1 << 32:
            raise ValueError(f"bound must be in [1, 2**32], got {bound}")
        if bound == 1:
            return np.zeros(n, dtype=np.int64)
        s = np.uint64(bound)
        reject_below = np.uint64((1 << 32) % bound)  # low words under this would bias the result
        out = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            prod = self.uint32(todo.size).astype(np.uint64) * s
            ok = (prod & _MASK32) >= reject_below
            out[todo[ok]] = (prod[ok] >> _SHIFT32).astype(np.int64)
            todo = todo[~ok]
        return out

    def uniform01(self, n: int) -> np.ndarray:
        """``n`` floats uniform on the open interval (0, 1), with 53 random bits each.

        Only the comparison baselines use floats; the production mechanisms draw integers.
        """
        words = self.uint64(n) >> np.uint64(11)
        return (words.astype(np.float64) + 0.5) * 2.0**-53

    def standard_normal(self, n: int) -> np.ndarray:
        """``n`` standard normal floats, for DP-SGD's Gaussian noise (the only float-noise mechanism).

        Box–Muller on 53-bit uniforms; each output is the sum of four such normals halved, which
        keeps the distribution exactly N(0, 1) while hiding the low-order bits of any single draw
        (the mitigation of Holohan & Braghin against floating-point attacks, as Opacus's secure mode).
        """
        u = self.uniform01(8 * n).reshape(4, 2, n)
        normals = np.sqrt(-2.0 * np.log(u[:, 0])) * np.cos(2.0 * np.pi * u[:, 1])
        return normals.sum(axis=0) / 2.0

    # -- scalar draws (exact, for the discrete Laplace sampler) --------------------------------
    def randbelow(self, bound: int) -> int:
        """One uniform integer in ``[0, bound)`` for any positive ``bound`` (rejection sampling)."""
        if bound <= 0:
            raise ValueError("bound must be positive")
        if bound == 1:
            return 0
        nbits = (bound - 1).bit_length()
        nbytes = (nbits + 7) // 8
        excess = 8 * nbytes - nbits
        while True:
            value = int.from_bytes(self._take(nbytes), "little") >> excess
            if value < bound:
                return value

    def bernoulli(self, p: Fraction) -> bool:
        """True with probability exactly ``p`` (a rational in [0, 1])."""
        if p <= 0:
            return False
        if p >= 1:
            return True
        return self.randbelow(p.denominator) < p.numerator

    def _take(self, n: int) -> bytes:
        if len(self._small) < n:
            self._small += self.random_bytes(max(n, _BUFFER_BYTES))
        out, self._small = self._small[:n], self._small[n:]
        return out
