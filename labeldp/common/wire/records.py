"""Frames on disk, in one format for both parties: length-prefixed records (a signed header, then
the chunks), written atomically."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from labeldp.common.wire.format import LENGTH_PREFIX
from labeldp.v1 import delivery_pb2 as pb


def write_records(fh: BinaryIO, records: Iterable[bytes]) -> None:
    """Append length-prefixed records (the on-disk form of frames and spooled chunks)."""
    for data in records:
        fh.write(LENGTH_PREFIX.pack(len(data)))
        fh.write(data)


def read_records(path: Path) -> Iterator[bytes]:
    """The records of a file written by ``write_records``, one at a time (never loaded whole)."""
    with open(path, "rb") as fh:
        while prefix := fh.read(LENGTH_PREFIX.size):
            if len(prefix) != LENGTH_PREFIX.size:
                raise ValueError(f"{path} ends inside a record length")
            (size,) = LENGTH_PREFIX.unpack(prefix)
            data = fh.read(size)
            if len(data) != size:
                raise ValueError(f"{path} ends inside a record")
            yield data


def store_frames(path: Path, frames: Iterable[pb.ReleaseFrame]) -> None:
    """Write a message's frames atomically (temporary file, fsync, rename)."""
    records = (f.SerializeToString(deterministic=True) for f in frames)
    store_records(path, next(records), None, records)


def store_records(path: Path, first: bytes, spooled: Path | None, rest: Iterable[bytes] = ()) -> None:
    """Atomically write the record ``first``, then a spool file's records as they are, then ``rest``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            write_records(fh, [first])
            if spooled is not None:
                with open(spooled, "rb") as src:
                    shutil.copyfileobj(src, fh, 4 * 2**20)
            write_records(fh, rest)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def stored_header(path: Path) -> pb.ReleaseHeader:
    first = pb.ReleaseFrame.FromString(next(read_records(path)))
    return pb.ReleaseHeader.FromString(first.header.header)
