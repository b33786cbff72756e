"""The only seeded randomness in the project: a reproducible ChaCha20 stream for tests.

It lives under tests/ (not shipped in the wheel), so production code cannot construct it.
"""

import hashlib

from labeldp.mechanisms.rng import SecureRandom


class SeededRandom(SecureRandom):
    def __init__(self, seed: int) -> None:
        self._seed = seed
        super().__init__()

    def _key_material(self) -> tuple[bytes, bytes]:
        digest = hashlib.sha512(f"labeldp-test-seed:{self._seed}".encode()).digest()
        return digest[:32], bytes(4) + digest[32:44]
