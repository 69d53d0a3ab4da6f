"""Unit tests of the sans-I/O engine: ring-buffer pages, ktrace argument
packing, the kernel's strict_strtoul, jhash, and the ktrace tracer's
produced/consumed protocol.  No FUSE here.

Expected bytes are written out by hand from the layouts of
docs/tracefs.md#ring-buffer-page-format (and include/linux/ring_buffer.h),
not computed with the code under test.
"""

from __future__ import annotations

import errno
import struct
import subprocess

import pytest

from fakedebugfs.engine.core.engine import Engine
from fakedebugfs.engine.core.clock import VirtualClock
from fakedebugfs.engine.ktrace.tracer import (KTRACE_BUF_GET_CONSUMED, KTRACE_BUF_GET_PRODUCED,
    KTRACE_BUF_GET_SIZE, KTRACE_BUF_PUT_CONSUMED, KTRACE_BUF_PUT_PRODUCED, Ktrace, KtraceSite,
    jhash)
from fakedebugfs.engine.ktrace.format import KtraceFormat, parse_format
from fakedebugfs.engine.core.ringbuffer import CpuBuffer, event_length
from fakedebugfs.engine.core.ringbuffer_read import decode_page_events
from fakedebugfs.fs.fops import kernel_bool_write, strict_strtoul

PAGE = 4096
HDR = 16
DATA = PAGE - HDR  # 4080


def page_bytes(buf: CpuBuffer, pos: int) -> bytes:
    slot = buf.slot(pos)
    return bytes(buf.mem[slot * PAGE:(slot + 1) * PAGE])


def events_of(page: bytes):
    ts, commit = struct.unpack_from("<QQ", page)
    return list(decode_page_events(memoryview(page)[HDR:], commit & ((1 << 27) - 1), ts))


def u32(word_bytes, off=0):
    return struct.unpack_from("<I", word_bytes, off)[0]


# --- ioctl numbers --------------------------------------------------------------

def test_ioctl_numbers_match_asm_generic_ioctl():
    # _IOR(0xF5, n, __u32) = dir 2 << 30 | size 4 << 16 | type 0xF5 << 8 | n
    assert KTRACE_BUF_GET_SIZE == 0x8004F500
    assert KTRACE_BUF_GET_PRODUCED == 0x8004F501
    assert KTRACE_BUF_GET_CONSUMED == 0x8004F502
    assert KTRACE_BUF_PUT_PRODUCED == 0x4004F503  # _IOW: dir 1
    assert KTRACE_BUF_PUT_CONSUMED == 0x4004F504


# --- ring-buffer encoding ---------------------------------------------------------

@pytest.mark.parametrize("payload_len,size", [(0, 8), (1, 8), (4, 8), (5, 12), (8, 12),
                                              (112, 116), (113, 124), (116, 124), (200, 208)])
def test_event_length(payload_len, size):
    # rb_calculate_event_length: 4-byte header, payload rounded to 4; more
    # than 28 words needs type_len 0 and a length word (4 more bytes)
    assert event_length(payload_len) == size


def test_small_event_encoding():
    buf = CpuBuffer(0, 8192)
    assert buf.write(1000, b"\x01\x02\x03\x04\x05")  # 5 bytes -> type_len 2
    assert buf.write(1007, b"\xAA" * 8)  # delta 7, type_len 2
    page = page_bytes(buf, 0)
    ts, commit = struct.unpack_from("<QQ", page)
    assert (ts, commit) == (1000, 24)  # commit while writing: bytes of data
    assert u32(page, HDR) == 2 | (0 << 5)
    assert page[HDR + 4:HDR + 9] == b"\x01\x02\x03\x04\x05"
    assert page[HDR + 9:HDR + 12] == b"\0\0\0"  # the pad to a word
    assert u32(page, HDR + 12) == 2 | (7 << 5)
    assert page[HDR + 16:HDR + 24] == b"\xAA" * 8


def test_large_event_uses_type_len_zero():
    payload = bytes(range(200))
    buf = CpuBuffer(0, 8192)
    buf.write(50, payload)
    page = page_bytes(buf, 0)
    assert u32(page, HDR) & 0x1F == 0
    assert u32(page, HDR + 4) == 200 + 4  # payload length + 4 (rounded to words)
    assert page[HDR + 8:HDR + 208] == payload
    (kind, ts, off, nxt, data), = events_of(page[:8] + struct.pack("<Q", 208) + page[16:])
    assert (kind, ts, nxt) == ("data", 50, 208) and data == payload
    # 113 bytes: one past the small limit of 28 words
    buf = CpuBuffer(0, 8192)
    buf.write(0, b"x" * 113)
    page = page_bytes(buf, 0)
    assert u32(page, HDR) & 0x1F == 0 and u32(page, HDR + 4) == 120
    # exactly 28 words still fits a small event
    buf = CpuBuffer(0, 8192)
    buf.write(0, b"y" * 112)
    assert u32(page_bytes(buf, 0), HDR) & 0x1F == 28


def test_time_extend():
    buf = CpuBuffer(0, 8192)
    buf.write(100, b"abcd")
    delta = (5 << 27) + 12345  # does not fit the 27-bit delta
    buf.write(100 + delta, b"efgh")
    page = page_bytes(buf, 0)
    # event 1 at 16..24, then the time extend (8 bytes), then event 2
    ext_lo, ext_hi = struct.unpack_from("<II", page, HDR + 8)
    assert ext_lo & 0x1F == 30
    assert ext_lo >> 5 == 12345 and ext_hi == 5
    assert u32(page, HDR + 16) == 1  # event 2: type_len 1, delta 0
    decoded = [e for e in events_of(page) if e[0] == "data"]
    assert [(ts, data) for _, ts, _, _, data in decoded] == [(100, b"abcd"), (100 + delta, b"efgh")]
    # a delta of exactly 2^27 - 1 still fits
    buf = CpuBuffer(0, 8192)
    buf.write(0, b"a")
    buf.write((1 << 27) - 1, b"b")
    assert u32(page_bytes(buf, 0), HDR + 8) == 1 | (((1 << 27) - 1) << 5)


def test_absolute_time_stamp_is_decoded():
    # type_len 31 (not written by the engine, but readers must take it)
    data = struct.pack("<II", 31 | (7 << 5), 3) + struct.pack("<I", 1 | (2 << 5)) + b"zzzz"
    decoded = list(decode_page_events(data, len(data), 999))
    assert decoded[0][:2] == ("time", (3 << 27) + 7)
    assert decoded[1][0] == "data" and decoded[1][1] == (3 << 27) + 9


def test_full_page_is_padded_and_commit_is_4080():
    buf = CpuBuffer(0, 8192)
    n = 0
    while buf.produced == 0:
        buf.write(n, b"\0" * 60)  # 64-byte events: 63 fit in 4080 bytes
        n += 1
    assert n == 64  # the 64th went to the next page
    page = page_bytes(buf, 0)
    assert struct.unpack_from("<Q", page, 8)[0] == DATA
    evs = events_of(page)
    assert [e[0] for e in evs].count("data") == 63
    kind, _, off, nxt, _ = evs[-1]
    assert kind == "pad" and off == 63 * 64 and nxt == DATA
    assert buf.page_entries[0] == 63


def test_padding_delta_zero_means_rest_of_page():
    data = struct.pack("<I", 1) + b"abcd" + struct.pack("<I", 29) + b"\xff" * 20
    decoded = list(decode_page_events(data, len(data), 0))
    assert [d[0] for d in decoded] == ["data"]


# --- accounting ----------------------------------------------------------------------

def drain_pages(buf: CpuBuffer) -> int:
    """Take every page with read_page; count the data events."""
    count = 0
    while True:
        page = buf.read_page()
        if page is None:
            return count
        count += sum(1 for e in events_of(page) if e[0] == "data")


@pytest.mark.parametrize("size", [8192, 16384, 65536])
def test_overwrite_accounting(size):
    buf = CpuBuffer(0, size, overwrite=True)
    written = 5000
    for i in range(written):
        assert buf.write(i, b"p" * (4 + i % 40))
    assert buf.overrun > 0 and buf.dropped == 0
    assert sum(1 for _ in buf.iter_unread()) + buf.overrun == written
    assert drain_pages(buf) + buf.overrun == written
    assert buf.empty()


def test_non_overwrite_accounting():
    buf = CpuBuffer(0, 8192, overwrite=False)
    written = 3000
    ok = sum(buf.write(i, b"q" * 20) for i in range(written))
    assert buf.dropped == written - ok > 0 and buf.overrun == 0
    assert drain_pages(buf) + buf.dropped == written
    # once read, there is room again
    assert buf.write(written, b"r" * 20)


def test_oversized_event_is_dropped_and_counted():
    buf = CpuBuffer(0, 8192)
    assert not buf.write(0, b"x" * DATA)  # header + payload > 4080
    assert buf.dropped == 1 and buf.entries == 0


def test_read_page_missed_events_flags():
    buf = CpuBuffer(0, 8192, overwrite=True)
    for i in range(200):  # 64-byte events: 63 a page, 2 pages: overwrites
        buf.write(i, b"\0" * 60)
    lost = buf.overrun
    assert lost == 63 * (200 // 63 - 1)  # every full page but the last complete one
    page = buf.read_page()
    ts, commit = struct.unpack_from("<QQ", page)
    assert commit & (1 << 31)  # RB_MISSED_EVENTS
    data_len = commit & ((1 << 27) - 1)
    if commit & (1 << 30):  # RB_MISSED_STORED: the count follows the data
        assert struct.unpack_from("<Q", page, HDR + data_len)[0] == lost
    # the next page carries no flag
    page = buf.read_page()
    assert page is not None
    assert not struct.unpack_from("<Q", page, 8)[0] & (3 << 30)


def test_read_page_of_partial_tail_then_rest():
    buf = CpuBuffer(0, 8192)
    for i in range(3):
        buf.write(10 + i, b"abcd")
    page = buf.read_page()
    ts, commit = struct.unpack_from("<QQ", page)
    assert (ts, commit) == (10, 24)
    assert buf.read_page() is None  # nothing new
    buf.write(20, b"efgh")
    page = buf.read_page()
    ts, commit = struct.unpack_from("<QQ", page)
    # only the new event; its page stamp is the time before it, so its
    # delta still lands on 20
    assert commit == 8
    (kind, ets, _, _, data), = events_of(page)
    assert (kind, ets, data) == ("data", 20, b"efgh")
    assert buf.consumed_events == 4


def test_reset_empties_and_clears_counters():
    buf = CpuBuffer(0, 8192)
    for i in range(500):
        buf.write(i, b"z" * 30)
    buf.reset()
    assert buf.empty() and buf.overrun == buf.entries == buf.produced == buf.consumed == 0
    assert not any(buf.mem)


# --- ktrace argument packing ---------------------------------------------------------

def test_parse_format_sizes():
    fields = parse_format("a %c b %hd c %d d %ld e %lld f %llu g %p h %s i %x j %lx k %u %%")
    assert [(f.conv, f.size, f.signed) for f in fields] == [
        ("c", 1, True), ("d", 2, True), ("d", 4, True), ("d", 8, True), ("d", 8, True),
        ("u", 8, False), ("p", 8, False), ("s", 0, False), ("x", 4, False), ("x", 8, False),
        ("u", 4, False)]


def test_pack_fixed_layout_by_hand():
    fmt = KtraceFormat("type_id %d call_site %lu ptr %lu")
    payload = fmt.pack(1, (2, 0xFFFFFFFF81000000, 0xFFFF888100000040))
    assert payload == (b"\x01\x00" + b"\x02\x00\x00\x00"
                       + bytes.fromhex("00000081ffffffff") + bytes.fromhex("4000000081" "88ffff"))
    assert len(payload) == 2 + 4 + 8 + 8
    assert fmt.unpack(payload) == (1, (2, 0xFFFFFFFF81000000, 0xFFFF888100000040))


def test_pack_wraps_like_c():
    fmt = KtraceFormat("%hd %d %c %u")
    payload = fmt.pack(0x10005, (70000, -1, 300, -1))  # id is a u16 in the buffer
    assert payload == (b"\x05\x00" + struct.pack("<h", 70000 - 65536) + struct.pack("<i", -1)
                       + struct.pack("<b", 300 - 256) + struct.pack("<I", 0xFFFFFFFF))
    assert fmt.unpack(payload) == (5, (4464, -1, 44, 0xFFFFFFFF))


def test_pack_strings_inline():
    fmt = KtraceFormat("filename %s pid %d dev %s")
    payload = fmt.pack(7, ("/usr/bin/find", 4242, "sda"))
    assert payload == b"\x07\x00/usr/bin/find\x00" + struct.pack("<i", 4242) + b"sda\x00"
    assert fmt.unpack(payload) == (7, ("/usr/bin/find", 4242, "sda"))
    # a string stops at its first NUL (strlen), and may be empty
    assert fmt.pack(7, ("a\0b", 1, "")) == b"\x07\x00a\x00" + struct.pack("<i", 1) + b"\x00"
    assert fmt.render(("/bin/sh", 5, "sdb")) == "filename /bin/sh pid 5 dev sdb"


def test_render_formats():
    fmt = KtraceFormat("nr %d arg0 %lx ptr %p pct 100%%")
    assert fmt.render((3, 0xBEEF, 0xFFFF8880)) == "nr 3 arg0 beef ptr 0xffff8880 pct 100%"


# --- strict_strtoul (lib/vsprintf.c as of 2.6.29) -------------------------------------

@pytest.mark.parametrize("text,value", [
    (b"0", 0), (b"1", 1), (b"1\n", 1), (b"42", 42), (b"007", 7),
    (b"\n", 0),  # no digits, then the one allowed newline: accepted in 2009
    (b"5\0trailing", 5),  # the buffer is a C string
    (b"18446744073709551616", 0),  # simple_strtoul wraps silently
])
def test_strict_strtoul_accepts(text, value):
    assert strict_strtoul(text) == value


@pytest.mark.parametrize("text", [b"", b"\0", b" 1", b"1 ", b"-1", b"+1", b"abc", b"1a",
                                  b"0x10", b"1\n\n", b"\n1", b"1\r\n", b"1.0"])
def test_strict_strtoul_rejects(text):
    with pytest.raises(OSError) as exc:
        strict_strtoul(text)
    assert exc.value.errno == errno.EINVAL


def test_strict_strtoul_base16():
    assert strict_strtoul(b"ff", 16) == 255
    assert strict_strtoul(b"1F\n", 16) == 31


def test_kernel_bool_write_limit():
    assert kernel_bool_write(b"0" * 62 + b"1") is True  # 63 bytes: cnt < sizeof(buf)
    assert kernel_bool_write(b"2") is True and kernel_bool_write(b"0\n") is False
    with pytest.raises(OSError) as exc:
        kernel_bool_write(b"0" * 63 + b"1")
    assert exc.value.errno == errno.EINVAL


# --- jhash ----------------------------------------------------------------------------

JHASH_KEYS = ["", "a", "abc", "kmemtrace_alloc", "syscall_entry", "sched_switch",
              "process_exec", "exactly12chr", "thirteen_char", "a_rather_long_event_name_42"]


def test_jhash_against_c_lookup2(cc):
    """The Python port against Bob Jenkins' lookup2 compiled from C."""
    binary = cc("jhash_lookup2.c")
    for init in (0, 0xDEADBEEF):
        out = subprocess.run([str(binary), "--init", str(init), *JHASH_KEYS[1:]],
                             capture_output=True, text=True, check=True).stdout
        for line, key in zip(out.splitlines(), JHASH_KEYS[1:]):
            name, value = line.rsplit(" ", 1)
            assert name == key
            assert jhash(key.encode(), init) == int(value), key
    out = subprocess.run([str(binary), ""], capture_output=True, text=True, check=True).stdout
    assert jhash(b"") == int(out.split()[-1])


# --- the ktrace tracer: registry, info, ioctl protocol ---------------------------------

def make_ktrace(nr_cpus=2, size=8192):
    engine = Engine(nr_cpus, VirtualClock())
    tp = engine.define("test", "ev", ("a", "b"))
    kt = Ktrace(engine, size)
    kt.add_site(KtraceSite("test_ev", "a %d b %s", tp.key))
    return engine, tp, kt


def test_info_format_and_ids():
    engine, tp, kt = make_ktrace()
    tp2 = engine.define("test", "ev2", ("x",))
    kt.add_site(KtraceSite("second", "x %lu", tp2.key))
    info = kt.info().splitlines()
    assert info[0] == "version 1.0.0"
    assert sorted(info[1:]) == ["name 'second' format 'x %lu' id 1 disabled",
                                "name 'test_ev' format 'a %d b %s' id 0 disabled"]
    with pytest.raises(ValueError):
        kt.add_site(KtraceSite("second", "x %d", tp2.key))  # a format may not change


def test_probe_writes_payload_only_when_enabled():
    engine, tp, kt = make_ktrace()
    engine.emit(tp, 1, 100, (5, "hi"))
    assert kt.buffers[1].entries == 0
    kt.set_event_enabled("test_ev", True)
    engine.emit(tp, 1, 100, (5, "hi"))
    assert kt.buffers[1].entries == 0  # global switch still off
    kt.set_enabled(True)
    engine.emit(tp, 1, 100, (5, "hi"))
    assert kt.buffers[1].entries == 1
    (ev,) = list(kt.buffers[1].iter_unread())
    assert ev.payload[:2 + 4 + 3] == b"\x00\x00" + struct.pack("<i", 5) + b"hi\x00"


def test_ioctl_protocol_and_flush_on_disable():
    engine, tp, kt = make_ktrace(size=16384)
    kt.set_event_enabled("test_ev", True)
    kt.set_enabled(True)
    assert kt.ioctl(0, KTRACE_BUF_GET_SIZE, None) == 16384
    for i in range(10):
        engine.emit(tp, 0, 1, (i, "x"))
    assert kt.ioctl(0, KTRACE_BUF_GET_PRODUCED, None) == 0  # the tail page is not complete
    kt.set_enabled(False)  # finishes the tail page
    produced = kt.ioctl(0, KTRACE_BUF_GET_PRODUCED, None)
    assert produced == PAGE and kt.ioctl(0, KTRACE_BUF_GET_CONSUMED, None) == 0
    assert kt.ioctl(0, KTRACE_BUF_PUT_CONSUMED, produced) is None
    assert kt.ioctl(0, KTRACE_BUF_GET_CONSUMED, None) == PAGE
    assert kt.buffers[0].consumed_events == 10
    with pytest.raises(LookupError):
        kt.ioctl(0, KTRACE_BUF_PUT_PRODUCED, 0)
    with pytest.raises(LookupError):
        kt.ioctl(0, 0, None)
    # beyond produced: clamped
    kt.ioctl(0, KTRACE_BUF_PUT_CONSUMED, 100 * PAGE)
    assert kt.ioctl(0, KTRACE_BUF_GET_CONSUMED, None) == PAGE


def test_pinned_pages_are_not_overwritten():
    """Between GET_PRODUCED and PUT_CONSUMED the writer must not recycle the
    reader's pages: events that find no page are lost and counted."""
    engine, tp, kt = make_ktrace(size=8192)
    kt.set_event_enabled("test_ev", True)
    kt.set_enabled(True)
    for i in range(400):
        engine.emit(tp, 0, 1, (i, "abc"))
    produced = kt.ioctl(0, KTRACE_BUF_GET_PRODUCED, None)
    consumed = kt.ioctl(0, KTRACE_BUF_GET_CONSUMED, None)
    buf = kt.buffers[0]
    snapshot = page_bytes(buf, consumed)
    before = kt.overflow()
    for i in range(400):
        engine.emit(tp, 0, 1, (i, "abc"))
    assert page_bytes(buf, consumed) == snapshot  # untouched while pinned
    assert kt.ioctl(0, KTRACE_BUF_GET_CONSUMED, None) == consumed
    assert kt.overflow() > before
    kt.ioctl(0, KTRACE_BUF_PUT_CONSUMED, produced)
    read = buf.consumed_events
    kt.set_enabled(False)
    while buf.read_page() is not None:
        pass
    assert buf.consumed_events + kt.overflow() == 800
    assert read > 0


def test_module_entries_survive_unload():
    engine, tp, kt = make_ktrace()
    changes = []
    kt.on_change.append(lambda what, name: changes.append((what, name)))
    mod_tp = engine.define("ktrace", "modev", ("arg0",))
    kt.add_site(KtraceSite("modev", "v %d", mod_tp.key))
    first_id = kt.entries["modev"].event_id
    kt.set_event_enabled("modev", True)
    kt.remove_sites([mod_tp.key])
    assert changes == [("add", "modev"), ("remove", "modev")]
    assert "name 'modev' format 'v %d' id 1 disabled" in kt.info()
    kt.remove_sites([mod_tp.key])  # nothing more happens
    assert len(changes) == 2
    kt.add_site(KtraceSite("modev", "v %d", mod_tp.key))
    assert kt.entries["modev"].event_id == first_id
    assert changes[-1] == ("add", "modev")
