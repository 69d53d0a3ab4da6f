"""A raw capture: ``trace_pipe_raw`` pages per CPU plus the format files,
read into a :class:`Recording`.

The layout is what ``cat per_cpu/cpuN/trace_pipe_raw > DIR/cpuN`` scripts
produce, schedviz's collector (``traces/cpuN``, ``formats/…``) included::

    DIR/cpuN | DIR/traces/cpuN | DIR/per_cpu/cpuN/trace_pipe_raw   pages of CPU N
    DIR/events/header_page     (or DIR/formats/header_page)        required
    DIR/events/header_event                                        optional: the 2.6.31+ one
    DIR/events/<system>/<event>/format                             the recording's formats
    DIR/saved_cmdlines, DIR/kallsyms, DIR/printk_formats,
    DIR/trace_clock                                                optional

A ``.tar``/``.tar.gz`` of such a directory (schedviz's ``trace.tar.gz``) is
read the same way.  Pages are ``header_page``'s size (data offset + data
size); the missed-events flags of each page become :class:`LostEvents`.
The capture does not say its byte order: pass *endian*, or the first page
holding data decides (its commit word is valid in one order only).
"""

from __future__ import annotations

import os
import re
import tarfile

from fakedebugfs.sources.replay.errors import ReplayFormatError
from fakedebugfs.engine.ftrace.formatfile import (DEFAULT_HEADER_EVENT, FormatSyntaxError,
    parse_cmdlines, parse_format, parse_header_event, parse_header_page)
from fakedebugfs.sources.replay.recording import Buffer, CpuData, Recording
from fakedebugfs.sources.replay.tracedat_layouts import (RB_COMMIT_MASK, RB_MISSED_EVENTS,
    RB_MISSED_STORED)

_CPU = re.compile(r"^(?:traces/|per_cpu/)?cpu(\d+)(/trace_pipe_raw)?$")
_FORMAT = re.compile(r"^(events|formats)/([^/]+)/([^/]+)/format$")
_FLAGS = RB_MISSED_EVENTS | RB_MISSED_STORED


class _Files:
    """The files of a capture: a directory, or a tar archive read into memory."""

    def __init__(self, path: str, name: str | None = None):
        self.path = path
        self.name = name or os.path.basename(path.rstrip("/"))  # what messages call it
        self.files: dict[str, object] = {}
        if os.path.isdir(path):
            for root, _, names in os.walk(path):
                for name in names:
                    full = os.path.join(root, name)
                    self.files[os.path.relpath(full, path)] = full
        else:
            try:
                with tarfile.open(path) as tar:
                    for member in tar.getmembers():
                        if member.isfile():
                            fp = tar.extractfile(member)
                            self.files[os.path.normpath(member.name)] = fp.read()
            except (tarfile.TarError, EOFError, OSError) as err:
                raise ReplayFormatError(self.name, "tar archive", None,
                                        " ".join(str(err).split()),
                                        truncated=isinstance(err, EOFError)) from None
        self._strip_top_directory()

    def _strip_top_directory(self) -> None:
        tops = {p.split("/", 1)[0] for p in self.files}
        if len(tops) == 1 and all("/" in p for p in self.files):
            top = tops.pop() + "/"
            self.files = {p[len(top):]: v for p, v in self.files.items()}

    def label(self, rel: str) -> str:
        return os.path.join(self.name, rel)

    def read(self, rel: str) -> bytes:
        held = self.files[rel]
        if isinstance(held, bytes):
            return held
        with open(held, "rb") as fp:
            return fp.read()

    def text(self, rel: str) -> str | None:
        return self.read(rel).decode("utf-8", "replace") if rel in self.files else None


def _guess_endian(pages: list[bytes], commit_at: int, commit_size: int, psize: int,
                  capacity: int) -> str:
    """The byte order in which the first page holding data has a sane commit word."""
    for data in pages:
        for pos in range(0, len(data) - psize + 1, psize):
            raw = data[pos + commit_at:pos + commit_at + commit_size]
            if not any(raw):
                continue
            sane = []
            for endian in ("little", "big"):
                word = int.from_bytes(raw, endian)
                if (word & ~(_FLAGS | RB_COMMIT_MASK)) == 0 and (word & RB_COMMIT_MASK) <= capacity:
                    sane.append(endian)
            if len(sane) == 1:
                return sane[0]
    return "little"


def read_rawcapture(path, endian: str | None = None, page_size: int | None = None,
                    name: str | None = None) -> Recording:
    """Read and validate a raw capture directory (or tar of one); raise
    :class:`ReplayFormatError` naming the file, offset and what is wrong.
    *name*: what to call it (default: *path*'s last part)."""
    files = _Files(os.fspath(path), name and os.path.basename(name.rstrip("/")))
    source = files.name
    fmt_dir = "events" if any(p.startswith("events/") for p in files.files) else "formats"
    header_page = files.text(f"{fmt_dir}/header_page")
    if header_page is None:
        raise ReplayFormatError(source, "capture layout", None,
                                "no events/header_page (nor formats/header_page): "
                                "its commit size is needed to read the pages")
    header_event = files.text(f"{fmt_dir}/header_event") or DEFAULT_HEADER_EVENT
    try:
        page_header = parse_header_page(header_page)
    except FormatSyntaxError as err:
        raise ReplayFormatError(files.label(f"{fmt_dir}/header_page"), "header_page", 0,
                                str(err)) from None
    try:
        event_header = parse_header_event(header_event)
    except FormatSyntaxError as err:
        raise ReplayFormatError(files.label(f"{fmt_dir}/header_event"), "header_event", 0,
                                str(err)) from None
    cpu_files = {}
    for rel in files.files:
        m = _CPU.match(rel)
        if m:
            if int(m[1]) in cpu_files:
                raise ReplayFormatError(source, "capture layout", None,
                                        f"two files for CPU {m[1]}: {cpu_files[int(m[1])]} "
                                        f"and {rel}")
            cpu_files[int(m[1])] = rel
    if not cpu_files:
        raise ReplayFormatError(source, "capture layout", None,
                                "no per-CPU page files (cpuN, traces/cpuN or "
                                "per_cpu/cpuN/trace_pipe_raw)")
    psize = page_size or page_header.page_size
    data = {cpu: files.read(rel) for cpu, rel in cpu_files.items()}
    if endian is None:
        endian = _guess_endian([data[c] for c in sorted(data)], page_header.commit_offset,
                               page_header.commit_size, psize, psize - page_header.data_offset)
    rec = Recording(
        source=source, kind="raw capture", version=None, endian=endian,
        long_size=page_header.commit_size, page_size=psize, header_page=header_page,
        header_event=header_event, page_header=page_header, event_header=event_header,
        kallsyms=files.text("kallsyms") or "", printk_formats=files.text("printk_formats") or "",
        cmdlines=parse_cmdlines(files.text("saved_cmdlines") or ""),
    )
    for rel in sorted(files.files):
        m = _FORMAT.match(rel)
        if not m or m[1] != fmt_dir:
            continue
        try:
            rec.add_format(parse_format(files.text(rel), m[2]))
        except FormatSyntaxError as err:
            raise ReplayFormatError(files.label(rel), "event format", 0, str(err)) from None
    clock = files.text("trace_clock")
    buf = Buffer(rec, "", psize, clock=_current_clock(clock) if clock else None)
    for cpu in sorted(data):
        rel = cpu_files[cpu]
        buf.cpus[cpu] = CpuData(cpu, data[cpu], 0, files.label(rel),
                                f"trace_pipe_raw pages of CPU {cpu}")
    rec.buffers.append(buf)
    if clock:
        rec.options["traceclock"] = clock.strip()
    return rec.finish()


def _current_clock(text: str) -> str | None:
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else text.strip() or None
