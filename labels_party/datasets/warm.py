"""Imported by the file-work processes' fork server before it forks them (``Offload(preload=…)``): the
ID hash kernel is loaded here once — from numba's disk cache, or compiled the first time on a machine —
and every file-work process starts with it, instead of each loading it on its first upload."""

from __future__ import annotations

from labeldp.common.blake2b_batch import compiled

compiled()
