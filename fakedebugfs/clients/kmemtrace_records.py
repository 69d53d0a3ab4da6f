"""Decoding kmemtrace relay data (the ``cpuN.out`` files ``kmemtraced`` saves).

Both ABIs of ``engine/core/layouts.py`` are understood: ``2008-08`` (August 2008:
event id 0 alloc / 1 free, 24-byte core, 24 more bytes for allocations) and
``2008-07`` (July 2008: event id 1 alloc / 2 free, 56 bytes each).  Both say
abi_version 1, so the layout is told by the first record's ``event_size``
(48 or 24 against 56) unless given.  Unknown trailing bytes of a larger
``event_size`` are skipped, as the ABI text asks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator, Optional

from fakedebugfs.engine.core.layouts import (kmemtrace_alloc_v2008_08, kmemtrace_event_v2008_07,
    kmemtrace_event_v2008_08, packer)

V08_CORE = packer(kmemtrace_event_v2008_08)
V08_ALLOC = packer(kmemtrace_alloc_v2008_08)
V07 = packer(kmemtrace_event_v2008_07)
ABIS = ("2008-08", "2008-07")
TYPE_NAMES = {0: "kmalloc", 1: "cache", 2: "pages"}
_CPU_FILE = re.compile(r"^cpu(\d+)(\.out)?$")


@dataclass(slots=True)
class Record:
    """One event, whichever the layout (``seq`` or ``timestamp`` is None)."""

    cpu: int
    offset: int
    alloc: bool
    event_id: int
    type_id: int
    event_size: int
    call_site: int
    ptr: int
    seq: Optional[int] = None
    timestamp: Optional[int] = None
    bytes_req: int = 0
    bytes_alloc: int = 0
    gfp_flags: int = 0
    target_cpu: int = -1


@dataclass(slots=True)
class Problem:
    """Bytes that are not a valid record; decoding stops or skips on it."""

    cpu: int
    offset: int
    message: str


def detect_abi(data: bytes) -> str:
    """The layout of *data*, from the ``event_size`` of its first record."""
    if len(data) >= 4 and int.from_bytes(data[2:4], "little") == V07.size:
        return "2008-07"
    return "2008-08"


def decode(data: bytes, cpu: int = 0, abi: Optional[str] = None) -> Iterator:
    """Yield a :class:`Record` per event and a :class:`Problem` per fault."""
    abi = abi or detect_abi(data)
    step = _decode_v07 if abi == "2008-07" else _decode_v08
    off, end = 0, len(data)
    while off < end:
        item, size = step(data, off, cpu)
        yield item
        if size <= 0:
            return
        off += size


def _bad(data, off, cpu, message):
    if not any(data[off:off + 8]):
        message = "zero bytes where a record should start (relay padding?)"
    return Problem(cpu, off, message), 0


def _decode_v08(data: bytes, off: int, cpu: int):
    if len(data) - off < V08_CORE.size:
        return Problem(cpu, off, f"truncated record: {len(data) - off} bytes left"), 0
    event_id, type_id, size, seq, site, ptr = V08_CORE.unpack_from(data, off)
    alloc = event_id == 0
    need = V08_CORE.size + (V08_ALLOC.size if alloc else 0)
    if event_id not in (0, 1):
        return _bad(data, off, cpu, f"invalid event id {event_id}")
    if size < need:
        return _bad(data, off, cpu, f"event size {size} < {need}")
    if len(data) - off < size:
        return Problem(cpu, off, f"truncated record: {len(data) - off} of {size} bytes"), 0
    rec = Record(cpu, off, alloc, event_id, type_id, size, site, ptr, seq=seq)
    if alloc:
        rec.bytes_req, rec.bytes_alloc, rec.gfp_flags, rec.target_cpu = \
            V08_ALLOC.unpack_from(data, off + V08_CORE.size)
    return rec, size


def _decode_v07(data: bytes, off: int, cpu: int):
    if len(data) - off < V07.size:
        return Problem(cpu, off, f"truncated record: {len(data) - off} bytes left"), 0
    event_id, type_id, size, node, site, ptr, req, alloc, gfp, ts = V07.unpack_from(data, off)
    if event_id not in (1, 2):
        return _bad(data, off, cpu, f"invalid event id {event_id}")
    if size < V07.size:
        return _bad(data, off, cpu, f"event size {size} < {V07.size}")
    if len(data) - off < size:
        return Problem(cpu, off, f"truncated record: {len(data) - off} of {size} bytes"), 0
    rec = Record(cpu, off, event_id == 1, event_id, type_id, size, site, ptr, timestamp=ts)
    if rec.alloc:
        rec.bytes_req, rec.bytes_alloc, rec.gfp_flags, rec.target_cpu = req, alloc, gfp, node
    return rec, size


def cpu_files(directory: str) -> list[tuple[int, str]]:
    """``(cpu, path)`` of the ``cpuN.out`` files in *directory*, by CPU."""
    found = []
    for name in os.listdir(directory):
        m = _CPU_FILE.match(name)
        if m and m[2]:
            found.append((int(m[1]), os.path.join(directory, name)))
    return sorted(found)


def cpu_of(path: str, default: int = 0) -> int:
    m = _CPU_FILE.match(os.path.basename(path))
    return int(m[1]) if m else default


def seq_key(seq: int, prev: Optional[int]) -> int:
    """Unwrap an ``s32`` sequence number against the previous unwrapped one."""
    if prev is None:
        return seq & 0xFFFFFFFF
    delta = (seq - prev) & 0xFFFFFFFF
    if delta >= 1 << 31:
        delta -= 1 << 32
    return prev + delta
