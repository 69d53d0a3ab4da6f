"""Binary layouts of trace-cmd's trace.dat, versions 6 and 7, and of the
kernel's ring-buffer pages, defined once with ``construct``.

Each layout names the section of trace-cmd's
``Documentation/trace-cmd/trace-cmd.dat.v6.5.txt`` / ``.v7.5.txt`` (or the
kernel struct) it follows.  Numbers after the initial format are in the
file's endianness, so every endian-dependent layout comes from
:func:`dat_layouts` / :func:`page_layouts` for ``"little"`` or ``"big"``.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from types import SimpleNamespace

from construct import (
    Array,
    Const,
    CString,
    GreedyBytes,
    Int8ub,
    Int16ub,
    Int16ul,
    Int32ub,
    Int32ul,
    Int64ub,
    Int64ul,
    Struct,
    this,
)

# --- v6.5 / v7.5 "INITIAL FORMAT" (endian-independent part) ----------------
#   0x17 0x08 0x44, "tracing", "<version>\0", endian byte, long-size byte
TRACEDAT_MAGIC = b"\x17\x08\x44tracing"
initial_format = Struct(
    "magic" / Const(TRACEDAT_MAGIC),
    "version" / CString("ascii"),
    "endian" / Int8ub,  # 0 little, 1 big
    "long_size" / Int8ub,  # of the recording machine's user space: 4 or 8
)

# v6.5 "HEADER INFO FORMAT" / v7.5 "HEADER INFO SECTION" tags
HEADER_PAGE_TAG = b"header_page\0"
HEADER_EVENT_TAG = b"header_event\0"

# v6.5 "REST OF TRACE-CMD HEADER": 10-byte tags after the CPU count
TAG_OPTIONS = b"options  \0"
TAG_LATENCY = b"latency  \0"
TAG_FLYRECORD = b"flyrecord\0"

# v7.5 "FORMAT OF THE SECTION HEADER" flags
SECTION_COMPRESSED = 1

# v7.5 "OPTIONS SECTION": option ids (also the ids of the sections they point to)
OPTION_NAMES = {
    0: "done", 1: "date", 2: "cpustat", 3: "buffer", 4: "traceclock", 5: "uname",
    6: "hook", 7: "offset", 8: "cpucount", 9: "version", 10: "procmaps",
    11: "traceid", 12: "time_shift", 13: "guest", 14: "tsc2nsec", 15: "strings",
    16: "header_info", 17: "ftrace_events", 18: "event_formats", 19: "kallsyms",
    20: "printk", 21: "cmdlines", 22: "buffer_text", 23: "btf_file",
    24: "last_boot_info", 25: "modules_file",
}
OPTION_IDS = {name: num for num, name in OPTION_NAMES.items()}
# sections described by an option holding their 8-byte file offset
SECTION_OPTIONS = ("header_info", "ftrace_events", "event_formats", "kallsyms", "printk",
                   "cmdlines", "btf_file", "modules_file")


def _ints(endian: str) -> SimpleNamespace:
    if endian == "little":
        return SimpleNamespace(u16=Int16ul, u32=Int32ul, u64=Int64ul)
    if endian == "big":
        return SimpleNamespace(u16=Int16ub, u32=Int32ub, u64=Int64ub)
    raise ValueError(f"endian must be 'little' or 'big', not {endian!r}")


@lru_cache(maxsize=None)
def dat_layouts(endian: str) -> SimpleNamespace:
    """The trace.dat layouts whose numbers are in the file's *endian*."""
    i = _ints(endian)
    ns = SimpleNamespace(u16=i.u16, u32=i.u32, u64=i.u64)
    # "INITIAL FORMAT": the page size follows the long-size byte
    ns.page_size = Struct("page_size" / i.u32)
    # v7.5 "INITIAL FORMAT": compression header, then the first options offset
    ns.compression = Struct("name" / CString("ascii"), "version" / CString("ascii"))
    ns.first_options = Struct("offset" / i.u64)
    # v7.5 "FORMAT OF THE SECTION HEADER"
    ns.section_header = Struct(
        "id" / i.u16,
        "flags" / i.u16,
        "description" / i.u32,  # id of a string of a STRINGS section
        "size" / i.u64,  # in the file (compressed size if compressed)
    )
    # v7.5 "COMPRESSION FORMAT OF THE FILE SECTIONS" and, per chunk, "... OF THE TRACE DATA"
    ns.compressed_block = Struct("compressed_size" / i.u32, "size" / i.u32)
    ns.chunk_count = Struct("count" / i.u32)
    # v6.5 "HEADER INFO FORMAT" / v7.5 "HEADER INFO SECTION": after each tag,
    # the 8-byte size of the header_page / header_event text that follows
    ns.header_size = i.u64
    # "FTRACE EVENT FORMATS" / "EVENT FORMATS": counts, then 8-byte-size-prefixed files
    ns.count32 = Struct("count" / i.u32)
    ns.system_header = Struct("name" / CString("utf8"), "count" / i.u32)
    ns.format_size = i.u64
    # "KALLSYMS", "TRACE_PRINTK": a 4-byte size; "PROCESS INFORMATION" (v6) /
    # "SAVED COMMAND LINES" (v7): an 8-byte size; the text follows
    ns.kallsyms_size = i.u32
    ns.printk_size = i.u32
    ns.cmdlines_size = i.u64
    # v6.5 "REST OF TRACE-CMD HEADER": CPU count, then per CPU (offset, size)
    ns.cpu_count = Struct("cpus" / i.u32)
    ns.flyrecord_cpu = Struct("offset" / i.u64, "size" / i.u64)
    # "OPTIONS SECTION" / v6.5 options: id, size, data
    ns.option_id = Struct("id" / i.u16)
    ns.option_size = Struct("size" / i.u32)
    # v7.5 option BUFFER (id 3); v6 writes only the offset and the name
    ns.buffer_v6 = Struct("offset" / i.u64, "name" / CString("utf8"))
    ns.buffer_v7 = Struct(
        "offset" / i.u64,  # of the BUFFER FLYRECORD section header
        "name" / CString("utf8"),  # "" is the top instance
        "clock" / CString("utf8"),
        "page_size" / i.u32,
        "cpus" / i.u32,
        "cpu" / Array(this.cpus, Struct("cpu" / i.u32, "offset" / i.u64, "size" / i.u64)),
    )
    # v7.5 option BUFFER_TEXT (id 22)
    ns.buffer_text = Struct("offset" / i.u64, "name" / CString("utf8"),
                            "clock" / CString("utf8"))
    # v7.5 options TSC2NSEC (14), CPUCOUNT (8), TRACEID (11), DONE (0) and the section offsets
    ns.tsc2nsec = Struct("multiplier" / i.u32, "shift" / i.u32, "offset" / i.u64)
    ns.u32_option = Struct("value" / i.u32)
    ns.u64_option = Struct("value" / i.u64)
    # v7.5 option TIME_SHIFT (12): per CPU, count then times, offsets, scalings
    ns.time_shift = Struct(
        "peer_trace_id" / i.u64,
        "flags" / i.u32,
        "cpus" / i.u32,
        "cpu" / Array(this.cpus, Struct(
            "count" / i.u32,
            "times" / Array(this.count, i.u64),
            "offsets" / Array(this.count, i.u64),
            "scalings" / Array(this.count, i.u64),
        )),
        "rest" / GreedyBytes,  # optional fraction bits, per CPU
    )
    # v7.5 option GUEST (13)
    ns.guest = Struct(
        "name" / CString("utf8"),
        "trace_id" / i.u64,
        "cpus" / i.u32,
        "cpu" / Array(this.cpus, Struct("cpu" / i.u32, "pid" / i.u32)),
    )
    return ns


# --- kernel/trace/ring_buffer.c: struct buffer_data_page, ring_buffer_event --

RB_MISSED_EVENTS = 1 << 31  # events were lost before this page
RB_MISSED_STORED = 1 << 30  # ... and their count is stored as a long after the data
RB_COMMIT_MASK = (1 << 27) - 1  # (kbuffer's COMMIT_MASK) bytes of event data
TS_SHIFT = 27
TS_MSB = 0xF8 << 56  # kept from the page's time by an absolute TIME_STAMP


@lru_cache(maxsize=None)
def page_layouts(endian: str, commit_size: int) -> SimpleNamespace:
    """struct buffer_data_page { u64 time_stamp; local_t commit; data[] } and
    struct ring_buffer_event { u32 type_len:5, time_delta:27; u32 array[]; }
    for a kernel whose ``local_t`` (``header_page``'s commit) is *commit_size*."""
    i = _ints(endian)
    long_t = {8: i.u64, 4: i.u32}[commit_size]
    ns = SimpleNamespace()
    ns.page_header = Struct("time_stamp" / i.u64, "commit" / long_t)
    ns.lost_count = Struct("count" / long_t)  # after the data when RB_MISSED_STORED
    ns.event_header = Struct("type_len_ts" / i.u32)
    ns.array0 = Struct("array0" / i.u32)
    # struct-module twins of the same layouts, for the page walk's inner loop
    e = "<" if endian == "little" else ">"
    ns.u32 = struct.Struct(e + "I")
    ns.long = struct.Struct(e + ("Q" if commit_size == 8 else "I"))
    ns.u64 = struct.Struct(e + "Q")
    assert ns.u32.size == ns.event_header.sizeof() == ns.array0.sizeof()
    assert ns.long.size == ns.lost_count.sizeof()
    return ns
