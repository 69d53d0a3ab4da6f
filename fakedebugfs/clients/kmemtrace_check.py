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


def check_data(data: bytes, cpu: int, abi: str | None):
    """``(records, errors)``: errors are ``(offset, message)``."""
    abi = abi or detect_abi(data)
    errors, records, prev = [], 0, None
    for item in decode(data, cpu, abi):
        if isinstance(item, Problem):
            errors.append((item.offset, item.message))
            continue
        records += 1
        errors += [(item.offset, m) for m in _record_errors(item, abi)]
        prev, message = _order(item, prev)
        if message:
            errors.append((item.offset, message))
    return records, errors


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
                data = fp.read()
        except OSError as err:
            print(f"{path}: {err.strerror}", file=sys.stderr)
            status = 1
            continue
        records, errors = check_data(data, cpu_of(path), args.abi)
        abi = args.abi or detect_abi(data)
        if errors:
            status = 1
            print(f"{path}: {records} records ({abi}), {len(errors)} errors")
            for off, message in errors[:MAX_LISTED]:
                print(f"  offset {off}: {message}")
        else:
            print(f"{path}: {records} records ({abi}), OK")
    return status
