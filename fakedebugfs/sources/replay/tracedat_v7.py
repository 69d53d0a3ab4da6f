"""trace.dat version 7 as trace-cmd writes it (trace-cmd.dat.v7.5.txt):
the sections reached from the options chain, each maybe compressed in
blocks (zlib or zstd), and the per-CPU buffers found through the
BUFFER options."""

from __future__ import annotations

import io

from fakedebugfs.sources.replay.cursor import Cursor, Decompressor, _one_line, _text
from fakedebugfs.sources.replay.recording import Buffer, CpuData, Recording
from fakedebugfs.sources.replay.tracedat_layouts import OPTION_IDS, OPTION_NAMES, SECTION_COMPRESSED

MAX_OPTIONS_SECTIONS = 1 << 16  # a loop of DONE offsets is corruption


class V7Sections:
    """The v7 side of
    :class:`~fakedebugfs.sources.replay.tracedat.TraceDatReader`."""

    def _read_v7(self) -> Recording:
        cur = self.cur
        comp = cur.sub("compression header").parse(self.L.compression,
                                                   "compression name and version")
        if comp.name != "none":
            try:
                self.decompress = Decompressor(comp.name, comp.version)
            except ValueError as err:
                raise cur.error(cur.pos, str(err)) from None
        first = cur.sub("initial format").parse(self.L.first_options,
                                                "offset of the first options").offset
        self.sections: dict[str, int] = {}
        sections_start = cur.pos
        self._v7_options_chain(first)
        missing = [s for s in ("header_info",) if s not in self.sections]
        if missing:
            raise cur.error(first, "no HEADER_INFO option: the file has no header_page")
        headers = self._header_info(self._section("header_info"))
        formats = []
        for name, reader in (("ftrace_events", self._ftrace_formats),
                             ("event_formats", self._event_formats)):
            if name in self.sections:
                formats += reader(self._section(name))
        blobs = {}
        for name, reader in (("kallsyms", self._kallsyms), ("printk", self._printk),
                             ("cmdlines", self._cmdlines)):
            blobs[name] = reader(self._section(name)) if name in self.sections else b""
        rec = self._recording(headers, formats, blobs["kallsyms"], blobs["printk"],
                              blobs["cmdlines"])
        rec.cpus = self.options.get("cpucount", 0)
        for opt in self.buffer_options:
            rec.buffers.append(self._v7_buffer(rec, opt))
        rec.buffers.sort(key=lambda b: b.name != "")
        self._walk_sections(sections_start)
        return rec

    def _walk_sections(self, pos: int) -> None:
        """The sections follow each other to the end of the file (trace-cmd
        walks them so to find the STRINGS sections): check each one fits,
        and that compressed STRINGS sections uncompress."""
        cur = self.cur.sub("sections")
        end = cur.size
        while pos < end:
            cur.seek(pos, "section")
            hdr = cur.parse(self.L.section_header, "section header")
            name = OPTION_NAMES.get(hdr.id, f"id {hdr.id}").replace("_", " ")
            if hdr.size > cur.left():
                raise cur.error(pos, f"section {hdr.id} ({name}) of {hdr.size} bytes runs past "
                                f"the end ({cur.left()} bytes left)", truncated=True)
            if hdr.id == OPTION_IDS["strings"]:
                self._section_data(cur.sub("strings"), hdr, "strings")
            pos = cur.pos + hdr.size

    def _section_header(self, offset: int, want: int, what: str):
        cur = self.cur.sub(f"{what} section header")
        cur.seek(offset, f"{what} section")
        hdr = cur.parse(self.L.section_header, f"{what} section header")
        if hdr.id != want:
            raise cur.error(offset, f"section id {hdr.id}, the option pointing here "
                            f"says {want} ({what})")
        return cur, hdr

    def _section(self, name: str) -> Cursor:
        """A cursor on the (uncompressed) data of the section an option points to."""
        offset = self.sections[name]
        what = name.replace("_", " ")
        cur, hdr = self._section_header(offset, OPTION_IDS[name], what)
        return self._section_data(cur, hdr, what)

    def _section_data(self, cur: Cursor, hdr, what: str) -> Cursor:
        start = cur.pos
        if not hdr.flags & SECTION_COMPRESSED:
            if hdr.size > cur.left():
                raise cur.error(start, f"{what} section of {hdr.size} bytes runs past the end "
                                f"({cur.left()} bytes left)", truncated=True)
            return Cursor(self.source, what, io.BytesIO(cur.take(hdr.size, what)), hdr.size,
                          base=start)
        if self.decompress is None:
            raise cur.error(start - 14, f"{what} section is compressed but the file says "
                            "compression \"none\"")
        data = self._block(cur.sub(what), what)
        return Cursor(self.source, what, io.BytesIO(data), len(data), packed_at=start)

    def _block(self, cur: Cursor, what: str) -> bytes:
        """v7.5 "COMPRESSION FORMAT OF THE FILE SECTIONS": sizes, then the data."""
        start = cur.pos
        blk = cur.parse(self.L.compressed_block, f"compression header of {what}")
        packed = cur.take(blk.compressed_size, f"compressed {what}")
        try:
            return self.decompress(packed, blk.size)
        except Exception as err:  # zstd/zlib errors have no common base
            raise cur.error(start, f"{what} does not uncompress: {_one_line(err)}") from None

    def _v7_options_chain(self, offset: int) -> None:
        seen = set()
        while offset:
            if offset in seen or len(seen) > MAX_OPTIONS_SECTIONS:
                raise self.cur.error(offset, "options sections loop back")
            seen.add(offset)
            cur, hdr = self._section_header(offset, 0, "options")
            data = self._section_data(cur, hdr, "options")
            offset = self._v7_options(data)

    def _v7_options(self, cur: Cursor) -> int:
        """v7.5 "OPTIONS SECTION"; returns the next section's offset (DONE)."""
        while True:
            oid = cur.parse(self.L.option_id, "option id").id
            data, at = self._option_data(cur, oid)
            if oid == 0:
                return self._number(data, self.L.u64_option, cur, at, "DONE")
            self._option(cur, oid, data, at)

    def _v7_buffer(self, rec: Recording, opt) -> Buffer:
        name = opt.name
        label = "flyrecord" if not name else f"flyrecord of buffer {name!r}"
        what = "buffer flyrecord" if not getattr(opt, "latency", False) else "buffer text"
        cur, hdr = self._section_header(opt.offset, 22 if what == "buffer text" else 3,
                                        f"{what} {name!r}" if name else what)
        compressed = bool(hdr.flags & SECTION_COMPRESSED)
        if compressed and self.decompress is None:
            raise cur.error(opt.offset, f"{label} is compressed but the file says "
                            "compression \"none\"")
        if getattr(opt, "latency", False):
            buf = Buffer(rec, name, self.page_size, clock=opt.clock)
            text = self._chunks(cur, "latency text")[0] if compressed else \
                cur.take(hdr.size, "latency text")
            buf.latency_text = _text(text)
            return buf
        buf = Buffer(rec, name, opt.page_size or self.page_size, clock=opt.clock)
        for ent in opt.cpu:
            section = f"{label} data of CPU {ent.cpu}"
            if ent.cpu in buf.cpus:
                raise cur.error(opt.offset, f"CPU {ent.cpu} listed twice in buffer {name!r}")
            if not compressed:
                buf.cpus[ent.cpu] = self._raw_cpu(ent.cpu, ent.offset, ent.size, section)
                continue
            if not ent.size:
                buf.cpus[ent.cpu] = CpuData(ent.cpu, b"", ent.offset, self.source, section)
                continue
            ccur = self.cur.sub(section)
            ccur.seek(ent.offset, section)
            if ent.offset + ent.size > ccur.size:
                raise ccur.error(ent.offset, f"{ent.size} bytes of compressed pages run past "
                                 f"the end of the file (0x{ccur.size:x})", truncated=True)
            data, chunks = self._chunks(ccur, section)
            buf.cpus[ent.cpu] = CpuData(ent.cpu, data, ent.offset, self.source, section,
                                        chunks)
        return buf

    def _chunks(self, cur: Cursor, what: str) -> tuple[bytes, list[tuple[int, int]]]:
        """v7.5 "COMPRESSION FORMAT OF THE TRACE DATA": a count, then blocks."""
        count = cur.parse(self.L.chunk_count, f"chunk count of {what}").count
        parts, chunks, pos = [], [], 0
        for i in range(count):
            at = cur.pos
            data = self._block(cur, f"{what} chunk {i}")
            chunks.append((pos, at))
            parts.append(data)
            pos += len(data)
        return b"".join(parts), chunks
