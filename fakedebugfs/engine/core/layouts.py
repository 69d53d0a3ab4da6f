"""Every binary layout fakedebugfs serves, defined once.

Each layout is a ``construct`` definition next to the kernel struct it
mirrors.  The engine's hot paths use :func:`packer`, a ``struct.Struct``
derived from the same definition, so the bytes written and the bytes
parsed by clients and tests come from one place.

All layouts are native-endian as on x86_64 (little endian), like the
kernel's.
"""

from __future__ import annotations

import struct

from construct import (
    Bytes,
    Int8ul,
    Int16ul,
    Int32sl,
    Int32ul,
    Int64sl,
    Int64ul,
    Struct,
)

PAGE_SIZE = 4096

# --- kernel/trace/ring_buffer.c -------------------------------------------

# struct buffer_data_page { u64 time_stamp; local_t commit; unsigned char data[]; }
# (header_page: "field: u64 timestamp; offset:0; size:8",
#  "field: local_t commit; offset:8; size:8", "field: char data; offset:16")
buffer_data_page_header = Struct(
    "time_stamp" / Int64ul,
    "commit" / Int64ul,
)
BUF_PAGE_HDR_SIZE = buffer_data_page_header.sizeof()  # 16
BUF_PAGE_SIZE = PAGE_SIZE - BUF_PAGE_HDR_SIZE  # 4080 bytes of event data

buffer_data_page = Struct(
    "time_stamp" / Int64ul,
    "commit" / Int64ul,
    "data" / Bytes(BUF_PAGE_SIZE),
)

# commit flags, set only on pages handed to readers (ring_buffer_read_page)
RB_MISSED_EVENTS = 1 << 31  # events were lost before this page
RB_MISSED_STORED = 1 << 30  # the lost count is stored as a long after the data
RB_COMMIT_MASK = (1 << 27) - 1  # low bits: bytes of event data

# struct ring_buffer_event { u32 type_len:5, time_delta:27; u32 array[]; }
ring_buffer_event_header = Struct("type_len_ts" / Int32ul)
RB_EVNT_HDR_SIZE = 4
RB_EVNT_MIN_SIZE = 8
RB_ALIGNMENT = 4
RB_MAX_SMALL_DATA = 28 * RB_ALIGNMENT  # 112: larger payloads use type_len 0
TS_SHIFT = 27
TS_MASK = (1 << TS_SHIFT) - 1

# enum ring_buffer_type
RINGBUF_TYPE_DATA_TYPE_LEN_MAX = 28
RINGBUF_TYPE_PADDING = 29
RINGBUF_TYPE_TIME_EXTEND = 30
RINGBUF_TYPE_TIME_STAMP = 31

# --- include/linux/trace_events.h -----------------------------------------

# struct trace_entry: the common fields of every tracefs event payload
trace_entry = Struct(
    "common_type" / Int16ul,
    "common_flags" / Int8ul,
    "common_preempt_count" / Int8ul,
    "common_pid" / Int32sl,
)

# --- 2009 ktrace RFC (include/linux/ktrace.h, kernel/ktrace.c) -------------

# ring_buffer_probe(): a u16 event id in front of the packed probe arguments
ktrace_record_header = Struct("event_id" / Int16ul)

# KTRACE_BUF_* ioctls carry one u32
ktrace_u32 = Struct("value" / Int32ul)

# --- kmemtrace relay ABI, July 2008 RFC (include/linux/kmemtrace.h) -------

# struct kmemtrace_event { u8 event_id; u8 type_id; u16 event_size; s32 node;
#   u64 call_site; u64 ptr; u64 bytes_req; u64 bytes_alloc; u64 gfp_flags;
#   s64 timestamp; } __attribute__((packed));
kmemtrace_event_v2008_07 = Struct(
    "event_id" / Int8ul,  # 1 alloc, 2 free, 0 is invalid
    "type_id" / Int8ul,
    "event_size" / Int16ul,
    "node" / Int32sl,  # target CPU, -1: same as origin
    "call_site" / Int64ul,
    "ptr" / Int64ul,
    "bytes_req" / Int64ul,
    "bytes_alloc" / Int64ul,
    "gfp_flags" / Int64ul,
    "timestamp" / Int64sl,
)

# --- kmemtrace relay ABI, August 2008 (Documentation/ABI) -----------------

# core part of every event
kmemtrace_event_v2008_08 = Struct(
    "event_id" / Int8ul,  # 0 alloc, 1 free
    "type_id" / Int8ul,
    "event_size" / Int16ul,
    "seq_num" / Int32sl,
    "call_site" / Int64ul,
    "ptr" / Int64ul,
)
# follows the core part of KMEMTRACE_EVENT_ALLOC events
kmemtrace_alloc_v2008_08 = Struct(
    "bytes_req" / Int64ul,
    "bytes_alloc" / Int64ul,
    "gfp_flags" / Int32ul,
    "target_cpu" / Int32sl,
)

_FMT = {
    Int8ul: "B", Int16ul: "H", Int32ul: "I", Int32sl: "i",
    Int64ul: "Q", Int64sl: "q",
}


def packer(layout: Struct) -> struct.Struct:
    """A ``struct.Struct`` with the same byte layout as *layout*.

    Only fixed-size integer and ``Bytes`` fields are allowed; the result is
    little endian and unpadded, exactly as the construct definition.
    """
    fmt = "<"
    for sub in layout.subcons:
        inner = sub.subcon
        if inner in _FMT:
            fmt += _FMT[inner]
        elif isinstance(getattr(inner, "length", None), int):
            fmt += f"{inner.length}s"
        else:
            raise TypeError(f"field {sub.name} has no fixed struct format")
    packed = struct.Struct(fmt)
    if packed.size != layout.sizeof():
        raise AssertionError(f"{fmt} is {packed.size} bytes, layout {layout.sizeof()}")
    return packed


