"""The reference ktrace reader (the 2009 ktrace RFC's interface,
docs/ktrace.md#the-buffer-protocol).

It knows only what a program on a kernel with the RFC applied would know:
``ktrace/info`` for names and formats, ``buffers/cpuN`` with poll, mmap and
the ``KTRACE_BUF_*`` ioctls, ``enabled`` and ``overflow``.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import re
import select
import sys
import time
from dataclasses import dataclass
from typing import Iterator

from fakedebugfs.engine.ktrace.tracer import (KTRACE_BUF_GET_CONSUMED, KTRACE_BUF_GET_PRODUCED,
    KTRACE_BUF_GET_SIZE, KTRACE_BUF_PUT_CONSUMED)
from fakedebugfs.engine.ktrace.format import KtraceFormat
from fakedebugfs.engine.core.layouts import (PAGE_SIZE, RB_COMMIT_MASK, buffer_data_page_header,
    ktrace_record_header, ktrace_u32, packer)
from fakedebugfs.engine.core.ringbuffer_read import decode_page_events

_INFO_LINE = re.compile(r"^name '(?P<name>.*)' format '(?P<format>.*)' id (?P<id>\d+) "
                        r"(?P<state>enabled|disabled)$")
_PAGE_HDR = packer(buffer_data_page_header)
_U32 = packer(ktrace_u32)  # the u32 of the KTRACE_BUF_* ioctls
_EVENT_ID = packer(ktrace_record_header)  # the u16 in front of every payload


@dataclass
class EventType:
    name: str
    codec: KtraceFormat
    enabled: bool


def parse_info(text: str) -> dict[int, EventType]:
    """Event id -> name and format, from the text of ``ktrace/info``."""
    types = {}
    for line in text.splitlines():
        m = _INFO_LINE.match(line)
        if m:
            types[int(m["id"])] = EventType(m["name"], KtraceFormat(m["format"]), m["state"] == "enabled")
    return types


@dataclass
class Record:
    cpu: int
    ts: int
    event_id: int
    name: str
    values: tuple
    text: str


class CpuReader:
    """One ``buffers/cpuN``: its mapping and the produced/consumed dance."""

    def __init__(self, path: str, cpu: int):
        self.cpu = cpu
        self.fd = os.open(path, os.O_RDONLY)
        self.size = self._ioctl(KTRACE_BUF_GET_SIZE)
        self.map = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ)

    def _ioctl(self, cmd: int, value: int = 0) -> int:
        out = fcntl.ioctl(self.fd, cmd, _U32.pack(value))
        return _U32.unpack(out)[0]

    def take_pages(self) -> list[bytes]:
        """Copy the complete pages and hand them back (PUT_CONSUMED)."""
        produced = self._ioctl(KTRACE_BUF_GET_PRODUCED)
        consumed = self._ioctl(KTRACE_BUF_GET_CONSUMED)
        count = ((produced - consumed) & 0xFFFFFFFF) // PAGE_SIZE
        pages = []
        for k in range(count):
            off = (consumed + k * PAGE_SIZE) % self.size
            pages.append(self.map[off:off + PAGE_SIZE])
        if count:
            fcntl.ioctl(self.fd, KTRACE_BUF_PUT_CONSUMED, _U32.pack(produced))
        return pages

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


def decode_page(page: bytes, cpu: int, types: dict[int, EventType]) -> Iterator[Record]:
    """The data events of one page, decoded with the formats from ``info``."""
    ts, commit = _PAGE_HDR.unpack_from(page)
    data = memoryview(page)[_PAGE_HDR.size:]
    for kind, when, _, _, payload in decode_page_events(data, commit & RB_COMMIT_MASK, ts):
        if kind != "data":
            continue
        event_id = _EVENT_ID.unpack_from(payload)[0]
        etype = types.get(event_id)
        if etype is None:
            yield Record(cpu, when, event_id, f"unknown-{event_id}", (), payload.hex())
            continue
        _, values = etype.codec.unpack(payload)
        yield Record(cpu, when, event_id, etype.name, values, etype.codec.render(values))


def read_all(mountpoint: str, follow: bool = False, idle: float = 0.2, disable: bool = False):
    """Yield records from every CPU until idle for *idle* seconds (or for
    ever with *follow*)."""
    base = os.path.join(mountpoint, "ktrace")
    if disable:
        with open(os.path.join(base, "enabled"), "w") as fp:
            fp.write("0")
    with open(os.path.join(base, "info")) as fp:
        types = parse_info(fp.read())
    names = sorted(os.listdir(os.path.join(base, "buffers")), key=lambda n: int(n[3:]))
    readers = [CpuReader(os.path.join(base, "buffers", n), int(n[3:])) for n in names]
    poller = select.poll()
    by_fd = {r.fd: r for r in readers}
    for r in readers:
        poller.register(r.fd, select.POLLIN)
    try:
        last = time.monotonic()
        while True:
            got = False
            ready = poller.poll(100)
            for fd, _ in ready or []:
                for page in by_fd[fd].take_pages():
                    got = True
                    yield from decode_page(page, by_fd[fd].cpu, types)
            if got:
                last = time.monotonic()
            elif not follow and time.monotonic() - last > idle:
                return
    finally:
        for r in readers:
            r.close()


def main(args) -> int:
    count = 0
    try:
        for rec in read_all(args.mountpoint, args.follow, args.timeout, args.disable):
            count += 1
            if args.json:
                print(json.dumps({"cpu": rec.cpu, "ts": rec.ts, "id": rec.event_id,
                                  "name": rec.name, "args": list(rec.values)}))
            else:
                print(f"cpu{rec.cpu} {rec.ts / 1e9:.9f} {rec.name}: {rec.text}")
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        raise  # our reader went (| head): the CLI ends quietly
    except OSError as err:
        print(f"fakedebugfs ktrace-read: {err.filename or args.mountpoint}: {err.strerror}",
              file=sys.stderr)
        return 1
    with open(os.path.join(args.mountpoint, "ktrace", "overflow")) as fp:
        overflow = int(fp.read())
    print(f"# {count} events read, {overflow} lost to overflow", file=sys.stderr)
    return 0
