"""What decoding a Parquet upload would cost, read before Arrow decodes (or decompresses) anything —
for both parties' uploads (feature tables; labels, universes and non-sensitive rows).

A Parquet file states its sizes in two places: the footer (rows, row groups, and for each column
chunk its encodings and its compressed and uncompressed bytes) and a header before every page (its
compressed and uncompressed bytes: what the reader decompresses into). A hostile file can make the
footer small and the page headers huge, so both are read here, with a Thrift compact-protocol reader
of the few fields needed (everything else skipped, every offset bounds-checked, nesting bounded).
The footer is not read through pyarrow's metadata objects: some malformed footers that Arrow's reader
refuses cleanly make those objects abort the process.

A reader that decodes a whole file bounds its decoded size by every page decompressed, plus 8 bytes
per row of every column (numbers become float64; text is read dictionary-encoded, an int32 index per
row plus its offsets); one that streams a batch at a time bounds each page instead (``max_page_bytes``:
a page is decompressed whole, whatever the batch). Dictionary and run-length encodings expand no
further, because text is never read as plain strings and numbers are at most 8 bytes;
``DELTA_BYTE_ARRAY`` (each value a prefix of the last plus a suffix) can expand without bound inside
one page, so readers refuse text in it.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from labeldp.common.errors import DomainError

MAGIC = b"PAR1"
_DEPTH = 16  # nesting of structs and lists (honest footers and page headers: at most 6)
DELTA_BYTE_ARRAY = 7  # parquet-format's Encoding
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_INTEGERS = (_BYTE, _I16, _I32, _I64)


class ThriftError(Exception):
    """The bytes are not the Thrift struct they should be."""


class _Compact:
    """A Thrift compact-protocol reader over a buffer, between ``pos`` and ``end``."""

    def __init__(self, buf: mmap.mmap | bytes, pos: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, pos, end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise ThriftError
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ThriftError

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def integer(self, kind: int) -> int:
        if kind == _BYTE:
            value = self.byte()
            return value - 256 if value > 127 else value
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        raise ThriftError

    def binary(self) -> bytes:
        length = self.varint()  # read before the position moves past it
        if length > self.end - self.pos:
            raise ThriftError
        value = bytes(self.buf[self.pos : self.pos + length])
        self.pos += length
        return value

    def list_header(self) -> tuple[int, int]:
        """(element type, count) of a list or set."""
        head = self.byte()
        count = head >> 4 if head >> 4 != 15 else self.varint()
        if count > self.end - self.pos:  # every element takes at least a byte (booleans aside: bounded)
            raise ThriftError
        return head & 0x0F, count

    def fields(self) -> Iterator[tuple[int, int]]:
        """A struct's (field id, type), until its stop byte; the caller reads or ``skip``s each value."""
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > _DEPTH:
            raise ThriftError
        if kind in (_BOOL_TRUE, _BOOL_FALSE):  # a field's value is its type
            return
        if kind in _INTEGERS:
            self.integer(kind)
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            self.binary()
        elif kind in (_LIST, _SET):
            element, count = self.list_header()
            for _ in range(count):
                if element in (_BOOL_TRUE, _BOOL_FALSE):
                    self.byte()  # booleans in a list take a byte each
                else:
                    self.skip(element, depth + 1)
        elif kind == _MAP:
            count = self.varint()
            if count:
                types = self.byte()
                for _ in range(count):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            for _, inner in self.fields():
                self.skip(inner, depth + 1)
        else:
            raise ThriftError
        if self.pos > self.end:
            raise ThriftError

    def ints(self, wanted: frozenset[int]) -> dict[int, int]:
        """A struct's integer fields among ``wanted``; everything else skipped."""
        out: dict[int, int] = {}
        for fid, kind in self.fields():
            if fid in wanted and kind in _INTEGERS:
                out[fid] = self.integer(kind)
            else:
                self.skip(kind, 1)
        return out

    def structs(self, kind: int, read: Callable[[], object]) -> list[object]:
        if kind != _LIST:
            raise ThriftError
        element, count = self.list_header()
        if element != _STRUCT:
            raise ThriftError
        return [read() for _ in range(count)]


@dataclass
class Chunk:
    """A column chunk as its footer states it."""

    path: tuple[str, ...] = ()
    encodings: tuple[int, ...] = ()
    num_values: int = -1
    uncompressed: int = -1
    compressed: int = -1
    data_page_offset: int = -1
    dictionary_page_offset: int | None = None


@dataclass
class RowGroup:
    rows: int = -1
    chunks: list[Chunk] = field(default_factory=list)


@dataclass
class Footer:
    bytes: int
    rows: int = -1
    schema_elements: int = 0
    row_groups: list[RowGroup] = field(default_factory=list)


def _column_meta(r: _Compact, chunk: Chunk) -> None:
    for fid, kind in r.fields():
        if fid == 2 and kind == _LIST:  # encodings
            element, count = r.list_header()
            chunk.encodings = tuple(r.integer(element) for _ in range(count))
        elif fid == 3 and kind == _LIST:  # path_in_schema
            element, count = r.list_header()
            if element != _BINARY:
                raise ThriftError
            chunk.path = tuple(r.binary().decode("utf-8", "replace") for _ in range(count))
        elif fid in (5, 6, 7, 9, 11) and kind in _INTEGERS:
            value = r.integer(kind)
            if fid == 5:
                chunk.num_values = value
            elif fid == 6:
                chunk.uncompressed = value
            elif fid == 7:
                chunk.compressed = value
            elif fid == 9:
                chunk.data_page_offset = value
            else:
                chunk.dictionary_page_offset = value
        else:
            r.skip(kind, 1)


def _column_chunk(r: _Compact) -> Chunk:
    chunk = Chunk()
    for fid, kind in r.fields():
        if fid == 1 and kind == _BINARY:  # file_path: the data lives in another file
            if r.binary():
                raise DomainError("unparseable-upload", "a column chunk names another file")
        elif fid == 3 and kind == _STRUCT:
            _column_meta(r, chunk)
        else:
            r.skip(kind, 1)
    return chunk


def _row_group(r: _Compact) -> RowGroup:
    group = RowGroup()
    for fid, kind in r.fields():
        if fid == 1:
            group.chunks = [c for c in r.structs(kind, lambda: _column_chunk(r)) if isinstance(c, Chunk)]
        elif fid == 3 and kind in _INTEGERS:
            group.rows = r.integer(kind)
        else:
            r.skip(kind, 1)
    return group


def read_footer(path: Path, max_footer_bytes: int, too_large: str = "table-too-large") -> Footer:
    """The file's footer — rows, row groups, each column chunk's path, encodings, sizes and offsets —
    read only once its stated length is within ``max_footer_bytes`` (413 ``too_large`` otherwise)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size < 12 or fh.read(4) != MAGIC:
            raise DomainError("unparseable-upload", "the body is not a Parquet file")
        fh.seek(size - 8)
        tail = fh.read(8)
        length = struct.unpack("<I", tail[:4])[0]
        if tail[4:] != MAGIC or length > size - 12:
            raise DomainError(
                "unparseable-upload", "the body is not a Parquet file (or its footer is encrypted)"
            )
        if length > max_footer_bytes:
            raise DomainError(
                too_large,
                f"the Parquet footer is {length} bytes; at most {max_footer_bytes} are read "
                "(write fewer row groups)",
                status=413,
            )
        fh.seek(size - 8 - length)
        data = fh.read(length)
    footer = Footer(length)
    r = _Compact(data, 0, len(data))
    try:
        for fid, kind in r.fields():
            if fid == 2 and kind == _LIST:  # the schema: counted here, read by Arrow
                element, count = r.list_header()
                for _ in range(count):
                    r.skip(element, 1)
                footer.schema_elements = count
            elif fid == 3 and kind in _INTEGERS:
                footer.rows = r.integer(kind)
            elif fid == 4:
                footer.row_groups = [
                    g for g in r.structs(kind, lambda: _row_group(r)) if isinstance(g, RowGroup)
                ]
            else:
                r.skip(kind, 1)
    except ThriftError as exc:
        raise DomainError("unparseable-upload", "the Parquet footer is malformed") from exc
    return footer


_PAGE_FIELDS = frozenset({1, 2, 3})  # type, uncompressed_page_size, compressed_page_size


@dataclass
class PageSizes:
    pages: int = 0
    uncompressed: int = 0  # every page, as it will be decompressed


def page_sizes(
    path: Path,
    footer: Footer,
    max_pages: int,
    *,
    columns: Collection[str] | None = None,
    max_page_bytes: int | None = None,
    too_large: str = "table-too-large",
) -> PageSizes:
    """Walk the pages of every column chunk (of the top-level ``columns`` only, when given) by their
    headers (what a reader decompresses), within the chunk's byte range as the footer states it;
    ``DomainError`` for a malformed walk, for more than ``max_pages`` pages or for a page that
    decompresses to more than ``max_page_bytes`` (413 ``too_large``)."""
    out = PageSizes()
    size = path.stat().st_size
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for g, group in enumerate(footer.row_groups):
            for c, chunk in enumerate(group.chunks):
                if columns is not None and (not chunk.path or chunk.path[0] not in columns):
                    continue
                where = f"column chunk {c} of row group {g}"
                start = chunk.data_page_offset
                dictionary = chunk.dictionary_page_offset
                if dictionary is not None and 0 < dictionary < start:
                    start = dictionary
                end = start + chunk.compressed
                if start < 4 or chunk.compressed < 0 or end > size:
                    raise DomainError("unparseable-upload", f"{where} is outside the file")
                pos = start
                while pos < end:
                    out.pages += 1
                    if out.pages > max_pages:
                        raise DomainError(too_large, f"the file has more than {max_pages} pages", status=413)
                    reader = _Compact(buf, pos, end)
                    try:
                        header = reader.ints(_PAGE_FIELDS)
                    except ThriftError:
                        header = {}
                    compressed, uncompressed = header.get(3, -1), header.get(2, -1)
                    if compressed < 0 or uncompressed < 0:
                        raise DomainError("unparseable-upload", f"a page of {where} is malformed")
                    if max_page_bytes is not None and uncompressed > max_page_bytes:
                        raise DomainError(
                            too_large,
                            f"a page of column {'.'.join(chunk.path)!r} decompresses to {uncompressed} "
                            f"bytes; at most {max_page_bytes} (write smaller pages)",
                            status=413,
                        )
                    out.uncompressed += uncompressed
                    pos = reader.pos + compressed
    return out
