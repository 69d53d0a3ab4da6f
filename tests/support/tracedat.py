"""trace.dat files and ring-buffer pages written by the tests (both byte
orders, 4-byte longs, zlib, instances), laid out as trace-cmd's
trace-cmd.dat.v6.5.txt / v7.5.txt describe them."""

from __future__ import annotations

import struct
from pathlib import Path


FMT = """name: probe
ID: 77
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:u32 value;\toffset:12;\tsize:4;\tsigned:0;
\tfield:s16 delta;\toffset:8;\tsize:2;\tsigned:1;
\tfield:char tag[6];\toffset:16;\tsize:6;\tsigned:0;
\tfield:__data_loc char[] msg;\toffset:24;\tsize:4;\tsigned:0;

print fmt: "value=%u", REC->value
"""


def header_page(commit: int, page: int = 4096) -> str:
    data = 8 + commit
    return (f"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
            f"\tfield: local_t commit;\toffset:8;\tsize:{commit};\tsigned:1;\n"
            f"\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
            f"\tfield: char data;\toffset:{data};\tsize:{page - data};\tsigned:0;\n")


class Pages:
    """Writes ring-buffer pages as kernel/trace/ring_buffer.c lays them out."""

    def __init__(self, endian: str, commit: int, page: int = 4096):
        self.e = "<" if endian == "little" else ">"
        self.big = endian == "big"
        self.commit, self.page = commit, page

    def word(self, type_len: int, delta: int) -> bytes:
        w = (type_len << 27 | delta) if self.big else (delta << 5 | type_len)
        return struct.pack(self.e + "I", w)

    def payload(self, pid: int, value: int, delta16: int, tag: bytes, msg: bytes) -> bytes:
        body = struct.pack(self.e + "HBBihHI6s2xI", 77, 0, 0, pid, delta16, 0, value, tag,
                           len(msg) << 16 | 28)
        return body + msg

    def event(self, delta: int, payload: bytes, force_long: bool = False) -> bytes:
        pad = payload + b"\0" * (-len(payload) % 4)
        if len(pad) <= 112 and not force_long:
            return self.word(len(pad) // 4, delta) + pad
        return self.word(0, delta) + struct.pack(self.e + "I", len(payload) + 4) + pad

    def extend(self, delta: int) -> bytes:
        return self.word(30, delta & ((1 << 27) - 1)) + struct.pack(self.e + "I", delta >> 27)

    def absolute(self, ts: int) -> bytes:
        return self.word(31, ts & ((1 << 27) - 1)) + struct.pack(self.e + "I",
                                                                 (ts >> 27) & 0xFFFFFFFF)

    def discarded(self, delta: int, length: int) -> bytes:
        return self.word(29, delta) + struct.pack(self.e + "I", length) + b"\0" * (length - 4)

    def build(self, ts: int, data: bytes, lost: int | None = None) -> bytes:
        flags = 0 if lost is None else (1 << 31) | ((1 << 30) if lost >= 0 else 0)
        long_t = "Q" if self.commit == 8 else "I"
        page = struct.pack(self.e + "Q" + long_t, ts, len(data) | flags) + data
        if lost is not None and lost >= 0:
            page += struct.pack(self.e + long_t, lost)
        return page + b"\0" * (self.page - len(page))


def built_pages(pg: "Pages") -> dict[int, bytes]:
    """Two CPUs: small and large events, time extend, absolute time stamp, a
    discarded event, missed events counted and not counted, an empty page."""
    long_msg = b"x" * 150 + b"\0"
    cpu0 = pg.build(1000, pg.event(5, pg.payload(10, 1, -3, b"alpha", b"hi\0"))
                    + pg.extend(1 << 30) + pg.event(7, pg.payload(11, 2, 4, b"beta", b"\0"))
                    + pg.discarded(3, 12)
                    + pg.event(1, pg.payload(12, 3, 0, b"gamma", long_msg)))
    cpu0 += pg.build(1 << 40, pg.absolute((1 << 40) + 999)
                     + pg.event(0, pg.payload(13, 4, 1, b"delta", b"z\0"), force_long=True),
                     lost=42)
    cpu1 = pg.build(0, b"") + pg.build(2000, pg.event(9, pg.payload(20, 5, -1, b"eps", b"\0")),
                                       lost=-1)
    return {0: cpu0, 1: cpu1}


class DatWriter:
    """Writes a trace.dat as trace-cmd.dat.v6.5.txt / v7.5.txt lay it out,
    with two buffers: the top one (pages of :func:`built_pages`) and "inst"."""

    HEADER_EVENT = ("# compressed entry header\n\ttype_len    :    5 bits\n"
                    "\ttime_delta  :   27 bits\n\tarray       :   32 bits\n\n"
                    "\tpadding     : type == 29\n\ttime_extend : type == 30\n"
                    "\ttime_stamp : type == 31\n\tdata max type_len  == 28\n")

    def __init__(self, version: int, endian: str, long_size: int, compression: str = "none"):
        self.version, self.long_size, self.compression = version, long_size, compression
        self.e = "<" if endian == "little" else ">"
        self.endian = endian
        self.pages = Pages(endian, long_size)

    def n(self, fmt: str, *v) -> bytes:
        return struct.pack(self.e + fmt, *v)

    def pack(self, data: bytes) -> bytes:
        if self.compression == "zlib":
            import zlib
            return zlib.compress(data)
        import zstandard
        return zstandard.ZstdCompressor().compress(data)

    def meta(self) -> dict:
        hp, he = header_page(self.long_size).encode(), self.HEADER_EVENT.encode()
        fmt = FMT.encode()
        return {
            16: b"header_page\0" + self.n("Q", len(hp)) + hp
                + b"header_event\0" + self.n("Q", len(he)) + he,
            17: self.n("I", 0),
            18: self.n("I", 1) + b"test\0" + self.n("I", 1) + self.n("Q", len(fmt)) + fmt,
            19: self.n("I", len(KALLSYMS)) + KALLSYMS,
            20: self.n("I", len(PRINTK)) + PRINTK,
            21: self.n("Q", len(CMDLINES)) + CMDLINES,
        }

    def options(self) -> list[tuple[int, bytes]]:
        return [(8, self.n("I", 2)), (4, b"[local] global\0"), (5, b"Linux test 6.0 x\0"),
                (7, b"12345\0"), (14, self.n("IIQ", 3, 1, 99))]

    def cpu_pages(self) -> dict[str, dict[int, bytes]]:
        pg = self.pages
        top = built_pages(pg)
        inst = {1: pg.build(5000, pg.event(2, pg.payload(30, 6, 2, b"inst", b"i\0")))}
        return {"": top, "inst": inst}

    def write(self, path: Path) -> Path:
        head = b"\x17\x08\x44tracing" + f"{self.version}\0".encode() + \
            bytes([self.endian == "big", self.long_size]) + self.n("I", 4096)
        out = bytearray(head)
        (self.v6 if self.version == 6 else self.v7)(out)
        path.write_bytes(bytes(out))
        return path

    def v6(self, out: bytearray) -> None:
        meta = self.meta()
        for sid in (16, 17, 18, 19, 20, 21):
            out += meta[sid]
        out += self.n("I", 2) + b"options  \0"
        buf_patch = len(out) + 6  # offset field of the BUFFER option for "inst"
        for oid, data in [(3, self.n("Q", 0) + b"inst\0")] + self.options():
            out += self.n("HI", oid, len(data)) + data
        out += self.n("H", 0) + b"flyrecord\0"
        tables = {"": len(out)}
        out += b"\0" * 32
        out[buf_patch:buf_patch + 8] = self.n("Q", len(out))
        out += b"flyrecord\0"
        tables["inst"] = len(out)
        out += b"\0" * 32
        for name, cpus in self.cpu_pages().items():
            for cpu in range(2):
                data = cpus.get(cpu, b"")
                out += b"\0" * (-len(out) % 4096)
                out[tables[name] + 16 * cpu:tables[name] + 16 * cpu + 16] = \
                    self.n("QQ", len(out) if data else 0, len(data))
                out += data

    def section(self, out: bytearray, sid: int, data: bytes, compress: bool) -> int:
        at = len(out)
        if compress:
            packed = self.pack(data)
            body = self.n("II", len(packed), len(data)) + packed
        else:
            body = data
        out += self.n("HHIQ", sid, int(compress), 0, len(body)) + body
        return at

    def v7(self, out: bytearray) -> None:
        z = self.compression != "none"
        out += (b"none\0\0" if not z else f"{self.compression}\0x\0".encode())
        first = len(out)
        out += b"\0" * 8
        opts = [(sid, self.n("Q", self.section(out, sid, data, z)))
                for sid, data in self.meta().items()]
        for name, cpus in self.cpu_pages().items():
            at = len(out)
            out += self.n("HHIQ", 3, int(z), 0, 0)
            entries = []
            for cpu in range(2):
                data = cpus.get(cpu, b"")
                out += b"\0" * (-len(out) % 4096)
                start = len(out)
                if data and z:
                    packed = self.pack(data)
                    out += self.n("I", 1) + self.n("II", len(packed), len(data)) + packed
                else:
                    out += data
                entries.append(self.n("IQQ", cpu, start if data else 0, len(out) - start))
            out[at + 8:at + 16] = self.n("Q", len(out) - at - 16)
            opts.append((3, self.n("Q", at) + name.encode() + b"\0local\0"
                         + self.n("II", 4096, 2) + b"".join(entries)))
        body = b"".join(self.n("HI", oid, len(d)) + d for oid, d in opts + self.options())
        body += self.n("HI", 0, 8) + self.n("Q", 0)
        out[first:first + 8] = self.n("Q", self.section(out, 0, body, False))


KALLSYMS = b"ffffffff81000000 T _stext\nffffffff81000100 T probe_fn\n"


PRINTK = b"0xffffffff82000000 : \"hello\\n\"\n"


CMDLINES = b"10 alpha\n20 eps\n30 inst-task\n"
