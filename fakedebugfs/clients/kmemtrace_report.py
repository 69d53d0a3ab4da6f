"""``kmemtrace-report``: what kmemtrace-user's report printed (the July 2008
RFC's kmemtrace.txt): memory allocated and fragmentation per call site and per
allocation size, totals, cross-CPU allocations and frees, and inconsistent
behaviour (slab frees of the wrong kind, bytes_alloc < bytes_req, frees of
unknown pointers, double frees).

The ``cpuN.out`` files are merged into one history: by sequence number
(2008-08 layout) or by timestamp (2008-07).  Fragmentation is
``(allocated - requested) / allocated``.  Call sites are symbolised with the
simulated kernel's /proc/kallsyms, or with ``--kallsyms FILE``.
"""

from __future__ import annotations

import bisect
import heapq
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field

from fakedebugfs.engine.core.kallsyms import Kallsyms
from fakedebugfs.clients.kmemtrace_records import (Problem, Record, cpu_files, decode, detect_abi,
    seq_key)

KMALLOC, CACHE, PAGES = 0, 1, 2
ISSUES = {
    "kfree_of_cache": "kfree() of kmem_cache_alloc() memory",
    "cache_free_of_kmalloc": "kmem_cache_free() of kmalloc() memory",
    "free_type_mismatch": "other free of the wrong kind (pages/slab)",
    "alloc_lt_req": "bytes_alloc < bytes_req",
    "unknown_free": "free of a pointer never allocated while tracing",
    "double_free": "double free",
    "alloc_of_live": "allocation of a pointer already allocated (missed free)",
}


@dataclass
class Usage:
    """Allocations and bytes of one call site or size class."""

    allocs: int = 0
    frees: int = 0
    req: int = 0
    alloc: int = 0
    cross_frees: int = 0

    @property
    def waste(self) -> int:
        return self.alloc - self.req

    @property
    def frag(self) -> float:
        return 100.0 * self.waste / self.alloc if self.alloc else 0.0


@dataclass
class Analysis:
    sites: dict = field(default_factory=lambda: defaultdict(Usage))
    sizes: dict = field(default_factory=lambda: defaultdict(Usage))
    total: Usage = field(default_factory=Usage)
    cross_allocs: int = 0
    cross_frees: int = 0
    issues: dict = field(default_factory=lambda: defaultdict(list))
    problems: list = field(default_factory=list)
    live: dict = field(default_factory=dict)  # ptr -> alloc Record
    records: int = 0
    complete_until: int | None = None  # last sequence number before the first gap
    unchecked: int = 0  # records after that gap: no pointer checks


def load(directory: str, abi: str | None = None):
    """Records of every ``cpuN.out`` in global order, and decode problems."""
    streams, problems = [], []
    for cpu, path in cpu_files(directory):
        with open(path, "rb") as fp:
            data = fp.read()
        abi = abi or (detect_abi(data) if data else None)
        recs = []
        for item in decode(data, cpu, abi):
            (problems if isinstance(item, Problem) else recs).append(item)
        streams.append(recs)
    return list(heapq.merge(*(_keyed(s) for s in streams))), problems, abi or "2008-08"


def _keyed(records):
    """(order key, cpu, index, record): sequence number or timestamp."""
    prev = None
    for i, rec in enumerate(records):
        if rec.seq is not None:
            prev = seq_key(rec.seq, prev)
            key = prev
        else:
            key = rec.timestamp
        yield key, rec.cpu, i, rec


def complete_until(records) -> int | None:
    """The last sequence number before the first gap in the merged records,
    or None when they carry no sequence numbers (2008-07).

    A capture of a running system ends raggedly: each CPU's reader stops at
    its own moment, so past the first gap a pointer's alloc or free may be
    missing and its reuse would look like a double free."""
    expected = None
    for key, _, _, rec in records:
        if rec.seq is None:
            return None
        if expected is not None and key != expected:
            return expected - 1
        expected = key + 1
    return None if expected is None else expected - 1


def analyse(records) -> Analysis:
    an = Analysis()
    an.complete_until = complete_until(records)
    freed: dict[int, Record] = {}
    for key, _, _, rec in records:
        an.records += 1
        check = an.complete_until is None or key <= an.complete_until
        an.unchecked += not check
        if rec.alloc:
            _on_alloc(an, rec, freed, check)
        else:
            _on_free(an, rec, freed, check)
    return an


def _issue(an: Analysis, check: bool, kind: str, rec: Record) -> None:
    if check:
        an.issues[kind].append(rec)


def _on_alloc(an: Analysis, rec: Record, freed: dict, check: bool = True) -> None:
    for usage in (an.sites[rec.call_site], an.sizes[rec.bytes_alloc], an.total):
        usage.allocs += 1
        usage.req += rec.bytes_req
        usage.alloc += rec.bytes_alloc
    if rec.target_cpu not in (-1, rec.cpu):
        an.cross_allocs += 1
    if rec.bytes_alloc < rec.bytes_req:
        an.issues["alloc_lt_req"].append(rec)
    if rec.ptr in an.live:
        _issue(an, check, "alloc_of_live", rec)
    an.live[rec.ptr] = rec
    freed.pop(rec.ptr, None)


def _on_free(an: Analysis, rec: Record, freed: dict, check: bool = True) -> None:
    an.total.frees += 1
    origin = an.live.pop(rec.ptr, None)
    if origin is None:
        _issue(an, check, "double_free" if rec.ptr in freed else "unknown_free", rec)
        freed[rec.ptr] = rec
        return
    freed[rec.ptr] = rec
    site = an.sites[origin.call_site]
    site.frees += 1
    if origin.cpu != rec.cpu:
        an.cross_frees += 1
        site.cross_frees += 1
    if origin.type_id != rec.type_id:
        if rec.type_id == KMALLOC and origin.type_id == CACHE:
            an.issues["kfree_of_cache"].append(rec)
        elif rec.type_id == CACHE and origin.type_id == KMALLOC:
            an.issues["cache_free_of_kmalloc"].append(rec)
        else:
            an.issues["free_type_mismatch"].append(rec)


# --- output ------------------------------------------------------------------

def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f}" if whole else "0.00"


def render(an: Analysis, syms, top: int = 0, examples: int = 3) -> str:
    out = []
    sites = sorted(an.sites.items(), key=lambda kv: (-kv[1].alloc, kv[0]))
    if top:
        sites = sites[:top]
    out.append("Per call site:")
    out.append(f"  {'call site':<34} {'allocs':>8} {'frees':>8} {'bytes req':>12} "
               f"{'bytes alloc':>12} {'waste':>10} {'frag%':>7}")
    for addr, u in sites:
        out.append(f"  {syms(addr):<34} {u.allocs:>8} {u.frees:>8} {u.req:>12} "
                   f"{u.alloc:>12} {u.waste:>10} {u.frag:>7.2f}")
    out.append("")
    out.append("Per allocation size:")
    out.append(f"  {'bytes alloc':>11} {'allocs':>8} {'bytes req':>12} {'bytes alloc':>12} {'frag%':>7}")
    for size, u in sorted(an.sizes.items()):
        out.append(f"  {size:>11} {u.allocs:>8} {u.req:>12} {u.alloc:>12} {u.frag:>7.2f}")
    t = an.total
    out += ["", "Totals:",
            f"  records:               {an.records}",
            f"  allocations:           {t.allocs}",
            f"  frees:                 {t.frees}",
            f"  bytes requested:       {t.req}",
            f"  bytes allocated:       {t.alloc}",
            f"  fragmentation:         {t.frag:.2f}%",
            f"  live at end:           {len(an.live)} ({sum(r.bytes_alloc for r in an.live.values())} bytes)",
            "", "Cross-CPU:",
            f"  allocations:           {an.cross_allocs} ({_pct(an.cross_allocs, t.allocs)}%)",
            f"  frees:                 {an.cross_frees} ({_pct(an.cross_frees, t.frees)}%)",
            "", "Inconsistencies:"]
    if an.unchecked:
        out.append(f"  (the capture ends raggedly: {an.unchecked} records after sequence number "
                   f"{an.complete_until}, the first gap, are not checked for pointer misuse)")
    for key, text in ISSUES.items():
        found = an.issues.get(key, [])
        out.append(f"  {text + ':':<58} {len(found)}")
        for rec in found[:examples]:
            out.append(f"      cpu{rec.cpu} @{rec.offset}: {syms(rec.call_site)} ptr 0x{rec.ptr:x}"
                       + (f" req {rec.bytes_req} alloc {rec.bytes_alloc}" if rec.alloc else ""))
    if an.problems:
        out += ["", f"Undecodable data: {len(an.problems)} places (run kmemtrace-check)"]
    return "\n".join(out) + "\n"


def as_json(an: Analysis, syms) -> str:
    return json.dumps({
        "sites": {syms(a): vars(u) for a, u in an.sites.items()},
        "sizes": {str(s): vars(u) for s, u in an.sizes.items()},
        "total": vars(an.total), "records": an.records,
        "cross_allocs": an.cross_allocs, "cross_frees": an.cross_frees,
        "live": len(an.live),
        "complete_until": an.complete_until, "unchecked": an.unchecked,
        "issues": {k: len(an.issues.get(k, [])) for k in ISSUES},
        "problems": len(an.problems),
    }, indent=1)


def symbolizer(kallsyms_path: str | None, raw: bool = False):
    """``addr -> text``: ``name+0xoff`` from a /proc/kallsyms-format table
    (the simulated kernel's unless *kallsyms_path* is given), or hex."""
    if raw:
        return lambda addr: f"0x{addr:x}"
    if kallsyms_path:
        with open(kallsyms_path) as fp:
            funcs = sorted((int(f[0], 16), f[2]) for f in (line.split() for line in fp)
                           if len(f) >= 3 and int(f[0], 16))
    else:
        ks = Kallsyms()
        funcs = list(zip(ks.addrs, ks.names))
    addrs = [a for a, _ in funcs]

    def sym(addr: int) -> str:
        i = bisect.bisect_right(addrs, addr) - 1
        return f"{funcs[i][1]}+0x{addr - addrs[i]:x}" if i >= 0 else f"0x{addr:x}"

    return sym


def main(args) -> int:
    from fakedebugfs.clients import kmemtrace_chart

    try:
        if not cpu_files(args.directory):
            print(f"kmemtrace-report: no cpuN.out files in {args.directory}", file=sys.stderr)
            return 1
        records, problems, _ = load(args.directory, args.abi)
        syms = symbolizer(args.kallsyms, args.raw)
    except OSError as err:
        print(f"kmemtrace-report: {err.filename}: {err.strerror}", file=sys.stderr)
        return 1
    an = analyse(records)
    an.problems = problems
    sys.stdout.write(as_json(an, syms) + "\n" if args.json else render(an, syms, args.top))
    if args.chart:
        try:
            kmemtrace_chart.write(args.chart, an, syms, args.top or 20)
        except (OSError, RuntimeError) as err:
            print(f"kmemtrace-report: {args.chart}: {err}", file=sys.stderr)
            return 1
    return 0
