"""A keystream the test chooses word by word, for the exact arithmetic of the samplers: which words keep
a label, which are rejected. It lives under tests/ like every other non-secure stream."""

from __future__ import annotations

import numpy as np

from labeldp.mechanisms.rng import SecureRandom


class ScriptedRandom(SecureRandom):
    """Hands out the given bytes in order and fails loudly if a sampler asks for more."""

    def __init__(self, stream: bytes) -> None:
        super().__init__()
        self.stream = stream

    @classmethod
    def of(cls, *parts: np.ndarray) -> ScriptedRandom:
        """A stream of little-endian words (each array's dtype says its width), in order."""
        return cls(
            b"".join(np.asarray(p).astype(np.asarray(p).dtype.newbyteorder("<")).tobytes() for p in parts)
        )

    def random_bytes(self, n: int) -> bytes:
        if n > len(self.stream):
            raise AssertionError(f"the sampler asked for {n} bytes, the script has {len(self.stream)} left")
        out, self.stream = self.stream[:n], self.stream[n:]
        return out
