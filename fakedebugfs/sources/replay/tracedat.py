"""trace-cmd's ``trace.dat``, versions 6 and 7, read into a :class:`Recording`.

Follows ``Documentation/trace-cmd/trace-cmd.dat.v6.5.txt`` and
``trace-cmd.dat.v7.5.txt`` (layouts in :mod:`.tracedat_layouts`): the
initial format, header_page/header_event, ftrace and event formats,
kallsyms, printk formats, saved cmdlines, options (v6: after the CPU
count; v7: chained OPTIONS sections) and flyrecord per-CPU data (v6: after
the options; v7: BUFFER options pointing at BUFFER FLYRECORD sections,
possibly compressed in chunks with zstd or zlib).  Every buffer (instance)
is read, and the whole file is validated before :func:`read_tracedat`
returns.

``python -m fakedebugfs.sources.replay.tracedat FILE|DIR`` prints a summary.
"""

from __future__ import annotations

import io
import mmap
import os
import sys

from construct import Const

from fakedebugfs.sources.replay.errors import ReplayFormatError
from fakedebugfs.engine.ftrace.formatfile import (FormatSyntaxError, parse_cmdlines, parse_format,
    parse_header_event, parse_header_page)
from fakedebugfs.sources.replay.recording import Buffer, CpuData, Recording
from fakedebugfs.sources.replay.tracedat_layouts import (HEADER_EVENT_TAG, HEADER_PAGE_TAG,
    OPTION_NAMES, SECTION_OPTIONS, TAG_FLYRECORD, TAG_LATENCY, TAG_OPTIONS, dat_layouts,
    initial_format)
from fakedebugfs.sources.replay.cursor import Cursor, Decompressor, _text
from fakedebugfs.sources.replay.tracedat_v7 import V7Sections


class TraceDatReader(V7Sections):
    """Reads one trace.dat file into a :class:`Recording`."""

    def __init__(self, path: str, name: str | None = None):
        self.path = os.fspath(path)
        self.source = os.path.basename(name or self.path)  # what messages call it
        self.decompress: Decompressor | None = None

    def read(self) -> Recording:
        with open(self.path, "rb") as fp:
            size = os.fstat(fp.fileno()).st_size
            mapped = mmap.mmap(fp.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            self.file = memoryview(mapped)
            stream = io.BufferedReader(io.FileIO(fp.fileno(), closefd=False))
            self.cur = Cursor(self.source, "initial format", stream, size)
            return self._read()

    # --- INITIAL FORMAT -----------------------------------------------------------

    def _read(self) -> Recording:
        cur = self.cur
        head = cur.parse(initial_format, "magic, version, endianness and long size")
        if head.version not in ("6", "7"):
            raise cur.error(10, f"trace.dat version {head.version!r} is not supported "
                            "(6 and 7 are)")
        if head.endian not in (0, 1):
            raise cur.error(10 + len(head.version) + 1, f"endianness byte {head.endian}, "
                            "not 0 (little) or 1 (big)")
        if head.long_size not in (4, 8):
            raise cur.error(10 + len(head.version) + 2, f"long size {head.long_size}, "
                            "not 4 or 8")
        self.version = int(head.version)
        self.endian = "big" if head.endian else "little"
        self.L = dat_layouts(self.endian)
        self.long_size = head.long_size
        self.page_size = cur.parse(self.L.page_size, "page size").page_size
        if not self.page_size or self.page_size & (self.page_size - 1):
            raise cur.error(cur.pos - 4, f"page size {self.page_size} is not a power of 2")
        self.options: dict = {}
        self.buffer_options: list = []
        if self.version == 6:
            rec = self._read_v6()
        else:
            rec = self._read_v7()
        rec.options = self.options
        return rec.finish()

    def _recording(self, headers: tuple, formats, kallsyms, printk, cmdlines) -> Recording:
        header_page, header_event, hcur, hstart = headers
        try:
            page_header = parse_header_page(_text(header_page))
            event_header = parse_header_event(_text(header_event))
        except FormatSyntaxError as err:
            raise hcur.error(hstart, str(err)) from None
        rec = Recording(
            source=self.source, kind=f"trace.dat v{self.version}", version=self.version,
            endian=self.endian, long_size=self.long_size, page_size=self.page_size,
            header_page=_text(header_page), header_event=_text(header_event),
            page_header=page_header, event_header=event_header,
            kallsyms=_text(kallsyms), printk_formats=_text(printk),
            cmdlines=parse_cmdlines(_text(cmdlines)),
            compression=(self.decompress.name, self.decompress.version)
            if self.decompress else None,
        )
        for fmt in formats:
            rec.add_format(fmt)
        return rec

    # --- metadata sections (same content in v6 and v7) ----------------------------

    def _header_info(self, cur: Cursor) -> tuple[bytes, bytes, Cursor, int]:
        cur = cur.sub("header_page/header_event")
        start = cur.pos
        cur.parse(Const(HEADER_PAGE_TAG), '"header_page" tag')
        page = cur.blob(self.L.header_size, "header_page")
        cur.parse(Const(HEADER_EVENT_TAG), '"header_event" tag')
        event = cur.blob(self.L.header_size, "header_event")
        return page, event, cur, start

    def _ftrace_formats(self, cur: Cursor) -> list:
        cur = cur.sub("ftrace event formats")
        count = cur.parse(self.L.count32, "count of ftrace formats").count
        return [self._format(cur, "ftrace", i) for i in range(count)]

    def _event_formats(self, cur: Cursor) -> list:
        cur = cur.sub("event formats")
        systems = cur.parse(self.L.count32, "count of event systems").count
        out = []
        for _ in range(systems):
            head = cur.parse(self.L.system_header, "event system name and count")
            for i in range(head.count):
                out.append(self._format(cur, head.name, i))
        return out

    def _format(self, cur: Cursor, system: str, index: int):
        start = cur.pos
        text = cur.blob(self.L.format_size, f"format file {index} of system {system!r}")
        try:
            return parse_format(_text(text), system)
        except FormatSyntaxError as err:
            raise cur.error(start, f"format file {index} of system {system!r}: {err}") \
                from None

    def _kallsyms(self, cur: Cursor) -> bytes:
        return cur.sub("kallsyms").blob(self.L.kallsyms_size, "kallsyms")

    def _printk(self, cur: Cursor) -> bytes:
        return cur.sub("printk formats").blob(self.L.printk_size, "printk formats")

    def _cmdlines(self, cur: Cursor) -> bytes:
        return cur.sub("saved cmdlines").blob(self.L.cmdlines_size, "saved cmdlines")

    # --- v6 ---------------------------------------------------------------------------

    def _read_v6(self) -> Recording:
        cur = self.cur
        headers = self._header_info(cur)
        formats = self._ftrace_formats(cur) + self._event_formats(cur)
        kallsyms, printk, cmdlines = self._kallsyms(cur), self._printk(cur), self._cmdlines(cur)
        rec = self._recording(headers, formats, kallsyms, printk, cmdlines)
        cpus = cur.sub("CPU count").parse(self.L.cpu_count, "CPU count").cpus
        rec.cpus = cpus
        top = self._v6_flyrecord(cur.sub("options"), rec, "", cpus, top=True)
        rec.buffers.append(top)
        for opt in self.buffer_options:
            bcur = cur.sub(f"flyrecord header of buffer {opt.name!r}")
            bcur.seek(opt.offset, f"buffer {opt.name!r}")
            rec.buffers.append(self._v6_flyrecord(bcur, rec, opt.name, cpus, top=False))
        if "cpucount" in self.options:
            rec.cpus = self.options["cpucount"]
        return rec

    def _v6_flyrecord(self, cur: Cursor, rec: Recording, name: str, cpus: int,
                      top: bool) -> Buffer:
        """v6.5 "REST OF TRACE-CMD HEADER": [options], then latency text or flyrecord."""
        tag = cur.take(10, "options/flyrecord/latency tag")
        if tag == TAG_OPTIONS:
            if top:
                self._v6_options(cur.sub("options"))
            else:  # options of a v6 instance: read past them
                self._v6_options(cur.sub(f"options of buffer {name!r}"), keep=False)
            tag = cur.take(10, "flyrecord/latency tag")
        buf = Buffer(rec, name, self.page_size,
                     clock=_current_clock(self.options.get("traceclock", "")))
        if tag == TAG_LATENCY:
            buf.latency_text = _text(cur.take(cur.left(), "latency text"))
            return buf
        if tag != TAG_FLYRECORD:
            raise cur.error(cur.pos - 10, f"tag {bytes(tag)!r}, not \"flyrecord\", "
                            "\"latency\" or \"options\"")
        section = "flyrecord" if not name else f"flyrecord of buffer {name!r}"
        fcur = cur.sub(f"{section} CPU table")
        entries = [fcur.parse(self.L.flyrecord_cpu, f"offset and size of CPU {c}")
                   for c in range(cpus)]
        for c, ent in enumerate(entries):
            buf.cpus[c] = self._raw_cpu(c, ent.offset, ent.size, f"{section} data of CPU {c}")
        return buf

    def _v6_options(self, cur: Cursor, keep: bool = True) -> None:
        """v6.5 options: ``id``, then (unless id 0 ends them) ``size`` and data."""
        while True:
            oid = cur.parse(self.L.option_id, "option id").id
            if oid == 0:
                return
            data, at = self._option_data(cur, oid)
            if keep:
                self._option(cur, oid, data, at)

    # --- v7 ---------------------------------------------------------------------------


    # --- options ------------------------------------------------------------------

    def _option_data(self, cur: Cursor, oid: int) -> tuple[bytes, int]:
        name = OPTION_NAMES.get(oid, f"option {oid}").upper()
        size = cur.parse(self.L.option_size, f"size of option {name}").size
        at = cur.pos
        return cur.take(size, f"option {name}"), at

    def _number(self, data: bytes, layout, cur: Cursor, at: int, name: str):
        if len(data) < layout.sizeof():
            raise cur.error(at, f"option {name} has {len(data)} bytes, not "
                            f"{layout.sizeof()}")
        return layout.parse(data).value

    def _option(self, cur: Cursor, oid: int, data: bytes, at: int) -> None:
        """Keep one option (v7.5 "OPTIONS SECTION" list; v6 uses the same ids)."""
        name = OPTION_NAMES.get(oid)
        L = self.L
        sub = Cursor(self.source, f"option {(name or str(oid)).upper()}", io.BytesIO(data),
                     len(data), base=cur.base + at if cur.packed_at is None else 0,
                     packed_at=cur.packed_at)
        if name in SECTION_OPTIONS:
            self.sections[name] = self._number(data, L.u64_option, cur, at, name.upper())
        elif name == "buffer":
            layout = L.buffer_v6 if self.version == 6 else L.buffer_v7
            self.buffer_options.append(sub.parse(layout, "BUFFER option"))
        elif name == "buffer_text":
            opt = sub.parse(L.buffer_text, "BUFFER_TEXT option")
            opt.latency = True
            self.buffer_options.append(opt)
        elif name in ("cpucount",):
            self.options[name] = self._number(data, L.u32_option, cur, at, name.upper())
        elif name == "traceid":
            self.options[name] = self._number(data, L.u64_option, cur, at, name.upper())
        elif name == "tsc2nsec":
            opt = sub.parse(L.tsc2nsec, "TSC2NSEC option")
            self.options[name] = {"multiplier": opt.multiplier, "shift": opt.shift,
                                  "offset": opt.offset}
        elif name == "time_shift":
            opt = sub.parse(L.time_shift, "TIME_SHIFT option")
            self.options[name] = {"peer_trace_id": opt.peer_trace_id, "flags": opt.flags,
                                  "cpus": [{"times": list(c.times), "offsets": list(c.offsets),
                                            "scalings": list(c.scalings)} for c in opt.cpu]}
        elif name == "guest":
            opt = sub.parse(L.guest, "GUEST option")
            self.options.setdefault(name, []).append(
                {"name": opt.name, "trace_id": opt.trace_id,
                 "cpus": {c.cpu: c.pid for c in opt.cpu}})
        elif name in ("cpustat", "hook", "procmaps", "last_boot_info"):
            self.options.setdefault(name, []).append(_cstring(data))
        elif name in ("date", "offset", "traceclock", "uname", "version"):
            self.options[name] = _cstring(data)
        elif name == "strings":
            pass  # v7 names of sections; the reader does not need them
        else:
            self.options.setdefault("unknown", []).append((oid, bytes(data)))

    # --- flyrecord data -------------------------------------------------------------

    def _raw_cpu(self, cpu: int, offset: int, size: int, section: str) -> CpuData:
        total = len(self.file)
        if size and offset + size > total:
            raise ReplayFormatError(self.source, section, offset,
                                    f"{size} bytes of pages run past the end of the file "
                                    f"(0x{total:x})", truncated=True)
        return CpuData(cpu, self.file[offset:offset + size] if size else b"", offset,
                       self.source, section)


def _cstring(data: bytes) -> str:
    return bytes(data).split(b"\0", 1)[0].decode("utf-8", "replace")


def _current_clock(text: str) -> str | None:
    """``[local] global ...``: the clock in brackets."""
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def read_tracedat(path, name: str | None = None) -> Recording:
    """Read and validate a trace.dat (v6 or v7); raise :class:`ReplayFormatError`.
    *name*: what to call it (default: *path*'s last part)."""
    return TraceDatReader(path, name).read()


def main(argv: list[str] | None = None) -> int:
    """``python -m fakedebugfs.sources.replay.tracedat FILE|DIR``: print a summary."""
    from fakedebugfs.sources.replay import open_recording

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m fakedebugfs.sources.replay.tracedat TRACE.DAT|RAW-CAPTURE-DIR",
              file=sys.stderr)
        return 2
    try:
        rec = open_recording(args[0])
    except (ReplayFormatError, OSError) as err:
        print(err, file=sys.stderr)
        return 1
    print(rec.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
