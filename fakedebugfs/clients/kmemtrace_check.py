"""``kmemtrace-check``: is one ``cpuN.out`` file well formed? (kmemtrace_check
of the July 2008 kmemtrace RFC's usage guide: errors mean a relay bug, kmemtrace misusing relay,
or timestamps collected out of order.)

Checks every record: a known event id and type id; ``event_size`` equal to
the size ABI version 1 defines for that event (48/24, or 56); no zero bytes
where a record starts (relay padding must never reach readers); no
truncated record at the end; sequence numbers strictly increasing within
the file (2008-08, wrap-around allowed) or timestamps never decreasing
(2008-07); and what the ABI text says must hold: allocations with a
non-NULL pointer, nonzero bytes_req, bytes_alloc >= bytes_req.
"""

from __future__ import annotations

import sys

from fakedebugfs.clients.kmemtrace_records import (Problem, V07, V08_ALLOC, V08_CORE, cpu_of,
    decode, detect_abi, seq_key)

MAX_LISTED = 20
CHUNK = 1 << 20  # bytes read at a time: a file is checked as it is read, never held whole
MAX_CHECKED = 4 << 30  # bytes checked of one file (an endless pipe is refused at the limit)


class TooLong(Exception):
    """The input went on past :data:`MAX_CHECKED` bytes."""


class Findings:
    """What a check found: records, the number of errors, the first
    :data:`MAX_LISTED` of them as ``(offset, message)``, the layout."""

    def __init__(self, abi: str | None):
        self.records, self.count, self.listed, self.abi = 0, 0, [], abi

    def error(self, offset: int, message: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append((offset, message))


def check_data(data: bytes, cpu: int, abi: str | None) -> Findings:
    """The findings of *data*, whole in memory."""
    return check_stream(_Chunks(data), cpu, abi)


class _Chunks:
    def __init__(self, data: bytes):
        self.data, self.done = data, False

    def read(self, size: int) -> bytes:
        if self.done:
            return b""
        self.done = True
        return self.data


def check_stream(fp, cpu: int, abi: str | None, limit: int | None = None) -> Findings:
    """The findings of what *fp* (``read(n)``) gives, read in chunks of
    :data:`CHUNK` bytes and checked as it comes: at most one chunk and the
    record that crosses its end are held.  The check ends at the first
    bytes that are not a record (as :func:`decode` does) without reading
    the rest; TooLong past *limit* (:data:`MAX_CHECKED`) bytes."""
    limit = MAX_CHECKED if limit is None else limit
    found, prev = Findings(abi), None
    buf, base, total = b"", 0, 0
    while True:
        chunk = fp.read(CHUNK)
        total += len(chunk)
        if total > limit:
            raise TooLong(limit)
        eof = not chunk
        buf += chunk
        if found.abi is None and (len(buf) >= 4 or eof):
            found.abi = detect_abi(buf)
        if found.abi is None:
            continue
        used = 0
        for item in decode(buf, cpu, found.abi):
            if isinstance(item, Problem):
                if not eof and item.message.startswith("truncated record"):
                    break  # its end is in the next chunk
                found.error(base + item.offset, item.message)
                return found
            found.records += 1
            for message in _record_errors(item, found.abi):
                found.error(base + item.offset, message)
            prev, message = _order(item, prev)
            if message:
                found.error(base + item.offset, message)
            used = item.offset + item.event_size
        if eof:
            return found
        buf, base = buf[used:], base + used


def _record_errors(rec, abi):
    if rec.type_id not in (0, 1, 2):
        yield f"invalid type id {rec.type_id}"
    if abi == "2008-08":
        want = V08_CORE.size + (V08_ALLOC.size if rec.alloc else 0)
    else:
        want = V07.size
    if rec.event_size != want:
        yield f"event size {rec.event_size}, ABI version 1 defines {want}"
    if rec.alloc:
        if abi == "2008-07" and not rec.ptr:
            yield "allocation of a NULL pointer"
        if not rec.bytes_req:
            yield "allocation of 0 bytes"


def _order(rec, prev):
    """Sequence numbers increase; timestamps do not go back."""
    if rec.seq is not None:
        key = seq_key(rec.seq, prev)
        if prev is not None and key <= prev:
            return key, f"sequence number {rec.seq} after {prev & 0xFFFFFFFF}"
        return key, None
    if prev is not None and rec.timestamp < prev:
        return rec.timestamp, f"timestamp {rec.timestamp} before {prev}"
    return rec.timestamp, None


def main(args) -> int:
    status = 0
    for path in args.files:
        try:
            with open(path, "rb") as fp:
                found = check_stream(fp, cpu_of(path), args.abi)
        except OSError as err:
            print(f"{path}: {err.strerror}", file=sys.stderr)
            status = 1
            continue
        except TooLong as err:
            print(f"{path}: longer than {err.args[0]} bytes (the limit of a checked file)",
                  file=sys.stderr)
            status = 1
            continue
        if found.count == 1:  # one line (/dev/zero: the first bytes are no record)
            status = 1
            off, message = found.listed[0]
            print(f"{path}: {found.records} records ({found.abi}), 1 error: offset {off}: "
                  f"{message}")
        elif found.count:
            status = 1
            print(f"{path}: {found.records} records ({found.abi}), {found.count} errors")
            for off, message in found.listed:
                print(f"  offset {off}: {message}")
        else:
            print(f"{path}: {found.records} records ({found.abi}), OK")
    return status
