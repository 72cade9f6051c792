"""Raw row readers: JSONL and CSV files (optionally gzipped) → (location, row) pairs.

Each reader yields ``(location, row)``: ``location`` is ``"line N"`` (1-based, the first
physical line of the record; ``"item i"``, 0-based, in a ``.json`` array) and ``row`` is a
``dict``, or a :class:`DataError` (kind ``malformed``) for a record that cannot be read, so
that the loader decides whether to stop or skip.  Blank lines are not rows.  Text that is not
valid UTF-8, or a ``.gz`` file that is not gzip or is cut short, stops the read with an error
naming the file (and the line).

    for location, row in read_rows("prefs.csv"):
        ...
"""

from __future__ import annotations

import csv
import errno
import gzip
import json
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from nlhf.data.errors import DataError

RawRow = tuple[str, Mapping[str, Any] | DataError]

#: What reading a damaged ``.gz`` file raises: not gzip at all, corrupt, or cut short.
GZIP_ERRORS = (gzip.BadGzipFile, zlib.error, EOFError)


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _gzip_error(path: Path, err: Exception, after_line: int | None = None) -> DataError:
    where = f" after line {after_line}" if after_line else ""
    return DataError("malformed", f"not a readable gzip file{where} ({err})", source=str(path))


def _read(path: Path, size: int = -1) -> bytes:
    """The first ``size`` bytes (all: -1) of ``path``, decompressed if it is ``.gz``."""
    with _open_binary(path) as raw:
        try:
            return raw.read(size)
        except GZIP_ERRORS as err:
            raise _gzip_error(path, err) from None


def _binary_lines(path: Path, raw: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``raw``; a damaged gzip stream stops them with an error naming ``path``."""
    lines, number = iter(raw), 0
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except GZIP_ERRORS as err:
            raise _gzip_error(path, err, number) from None
        number += 1
        yield line


def _format_of(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _decoded_lines(path: Path, raw: IO[bytes]) -> Iterator[str]:
    for number, line in enumerate(_binary_lines(path, raw), start=1):
        try:
            yield line.decode("utf-8-sig" if number == 1 else "utf-8")  # drop a leading BOM
        except UnicodeDecodeError as err:
            raise DataError(
                "malformed",
                f"not valid UTF-8 ({err.reason})",
                source=str(path),
                location=f"line {number}",
            ) from None


def read_jsonl(path: str | Path) -> Iterator[RawRow]:
    """Rows of a JSON-lines file: one JSON object per line."""
    path = Path(path)
    with _open_binary(path) as raw:
        for number, line in enumerate(_decoded_lines(path, raw), start=1):
            if not line.strip():
                continue
            location = f"line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                yield (
                    location,
                    DataError("malformed", f"invalid JSON ({err.msg} at column {err.colno})"),
                )
                continue
            if not isinstance(row, dict):
                yield (
                    location,
                    DataError("malformed", f"expected a JSON object, got {type(row).__name__}"),
                )
                continue
            yield location, row


def read_json(path: str | Path) -> Iterator[RawRow]:
    """A ``.json`` file: a JSON array of objects (rows ``"item i"``, 0-based) or JSON lines."""
    path = Path(path)
    if not _read(path, 4096).lstrip().startswith(b"["):
        yield from read_jsonl(path)
        return
    try:
        items = json.loads(_read(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError("malformed", f"invalid JSON array ({err})", source=str(path)) from None
    for index, item in enumerate(items):
        location = f"item {index}"
        if isinstance(item, dict):
            yield location, item
        else:
            yield (
                location,
                DataError("malformed", f"expected a JSON object, got {type(item).__name__}"),
            )


def read_csv(path: str | Path, *, delimiter: str = ",") -> Iterator[RawRow]:
    """Rows of a CSV file with a header line (RFC 4180 quoting; fields may span lines)."""
    path = Path(path)
    with _open_binary(path) as raw:
        reader = csv.reader(_decoded_lines(path, raw), delimiter=delimiter, strict=True)
        header: list[str] | None = None
        previous_line = 0
        while True:
            location = f"line {previous_line + 1}"
            try:
                record = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                previous_line = reader.line_num
                if header is None:
                    raise DataError(
                        "malformed",
                        f"unreadable header ({err})",
                        source=str(path),
                        location=location,
                    ) from None
                yield location, DataError("malformed", f"unreadable CSV record ({err})")
                continue
            location = f"line {previous_line + 1}"
            previous_line = reader.line_num
            if not record:
                continue  # blank line
            if header is None:
                header = _check_header(record, path, location)
                continue
            if len(record) != len(header):
                yield (
                    location,
                    DataError(
                        "malformed", f"{len(record)} fields where the header has {len(header)}"
                    ),
                )
                continue
            yield location, dict(zip(header, record, strict=True))


def _check_header(record: list[str], path: Path, location: str) -> list[str]:
    header = [name.strip() for name in record]
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise DataError(
            "malformed", f"duplicate header names {duplicates}", source=str(path), location=location
        )
    return header


def read_rows(path: str | Path, *, delimiter: str | None = None) -> Iterator[RawRow]:
    """Rows of ``.jsonl``, ``.json``, ``.csv`` or ``.tsv`` files, each optionally ``.gz``.

    A missing file or a directory is an ``OSError`` naming the path; another suffix a
    :class:`DataError`.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "a directory, not a data file", str(path))
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "no such data file", str(path))
    kind = _format_of(path)
    if kind in (".jsonl", ".ndjson"):
        return read_jsonl(path)
    if kind == ".json":
        return read_json(path)
    if kind in (".csv", ".tsv"):
        return read_csv(path, delimiter=delimiter or ("\t" if kind == ".tsv" else ","))
    raise DataError(
        "malformed",
        f"unknown data format {kind or '(no suffix)'!r}; expected .jsonl, .json, .csv or .tsv "
        "(optionally .gz)",
        source=str(path),
    )


def enumerate_records(records: Iterable[Mapping[str, Any]]) -> Iterator[RawRow]:
    """In-memory rows (a list of dicts, a datasets.Dataset) located as ``"row i"`` (0-based)."""
    for index, row in enumerate(records):
        if not isinstance(row, Mapping):
            yield (
                f"row {index}",
                DataError("malformed", f"expected a mapping, got {type(row).__name__}"),
            )
            continue
        yield f"row {index}", row
