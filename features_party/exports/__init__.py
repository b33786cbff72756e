"""A received release's training set out of the service — the joined rows with their released bins and
values, or the released values alone — streamed as Parquet or Arrow IPC a row group at a time, with the
description a trainer needs to correct for the release (``labeldp_model``).

``Exports`` checks a request and returns an ``Export`` to stream; ``plan`` fixes the row groups in
advance (resumable by offset), ``partitions`` finds each row's released bin in bounded memory,
``formats`` writes the bytes, ``description`` the JSON that travels with them.
"""

from features_party.exports.formats import MEDIA_TYPES
from features_party.exports.service import Export, Exports, TooManyExportsError

__all__ = ["MEDIA_TYPES", "Export", "Exports", "TooManyExportsError"]
