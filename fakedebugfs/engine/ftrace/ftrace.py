"""Dynamic ftrace's function records and their filters (kernel/trace/ftrace.c, 6.12).

* :class:`FtraceRecords` is the table of ``struct dyn_ftrace`` records:
  every function the kernel can trace, in the order of its ftrace pages,
  read from the profile's ``available_filter_functions_addrs`` (or
  ``available_filter_functions``) the first time something asks (43k
  lines for Debian 6.12: a mount that never looks does not pay for them).
* :func:`filter_parse_regex`, :func:`glob_match` and :func:`ftrace_match`
  are how a write names functions: ``foo``, ``foo*``, ``*foo``, ``*foo*``,
  a full glob, a 1-based index, ``!`` to remove.
* :class:`TraceParser` is ``struct trace_parser``: one word per write, a
  word cut between two writes continued by the next.
* :class:`FtraceOps` is one ``ftrace_ops``' pair of hashes (``filter_hash``,
  ``notrace_hash``) with the ``:mod:`` lists of the trace array it belongs
  to; :meth:`FtraceOps.process_regex` is ``ftrace_process_regex`` (a
  plain glob, ``:mod:``, or a function command of :mod:`.ftrace_probe`).

Errors are ``OSError`` with the kernel's errno: a glob that matches no
function is EINVAL.
"""

from __future__ import annotations

import errno
from typing import Optional

from fakedebugfs.engine.core.errors import einval, kernel_error
from fakedebugfs.engine.core.profile_files import profile_file, read_profile_file
from fakedebugfs.engine.ftrace.ctype import SPACES
from fakedebugfs.engine.ftrace.kstrto import kstrtoull

# FTRACE_BUFF_MAX: KSYM_SYMBOL_LEN (667 on x86_64) + 4, the parser's size
FTRACE_BUFF_MAX = 667 + 4
# enum regex_type
MATCH_FULL, MATCH_FRONT_ONLY, MATCH_MIDDLE_ONLY, MATCH_END_ONLY, MATCH_GLOB, MATCH_INDEX = \
    range(6)
ENTRIES_PER_PAGE = 4096 // 16  # struct dyn_ftrace records in a page


# --- globs (lib/glob.c, trace_events_filter.c) ---------------------------------------

def glob_match(pat: str, s: str) -> bool:
    """``glob_match``: ``*``, ``?``, ``[...]`` (ranges, ``!`` to negate; a
    malformed class is a literal ``[``), ``\\`` escaping the next
    character; on a mismatch, back to the last ``*`` one character later
    (one level of backtracking is enough, as the kernel's comment shows)."""
    back_pat = back_str = -1
    p = i = 0
    np_, ns = len(pat), len(s)
    while True:
        c = s[i] if i < ns else ""
        d = pat[p] if p < np_ else ""
        p += 1
        i += 1
        literal = True
        if d == "?":
            if not c:
                return False
            continue
        if d == "*":
            if p >= np_:
                return True
            back_pat, back_str = p, i - 1
            i -= 1
            continue
        if d == "[":
            if not c:
                return False
            inverted = pat[p:p + 1] == "!"
            k = p + inverted
            a = pat[k] if k < np_ else ""
            k += 1
            hit = False
            malformed = False
            while True:
                b = a
                if not a:
                    malformed = True
                    break
                if pat[k:k + 1] == "-" and pat[k + 1:k + 2] != "]":
                    b = pat[k + 1] if k + 1 < np_ else ""
                    if not b:
                        malformed = True
                        break
                    k += 2
                hit |= a <= c <= b
                a = pat[k] if k < np_ else ""
                k += 1
                if a == "]":
                    break
            if not malformed:
                if hit != inverted:
                    p = k
                    continue
                literal = False
        elif d == "\\":
            d = pat[p] if p < np_ else ""
            p += 1
        if literal and c == d:
            if not d:
                return True
            continue
        if not c or back_pat < 0:
            return False
        p = back_pat
        back_str += 1
        i = back_str


def filter_parse_regex(buff: str) -> tuple[int, str, bool]:
    """``filter_parse_regex``: ``(type, search, not)``."""
    neg = buff.startswith("!")
    if neg:
        buff = buff[1:]
    if buff[:1].isdigit():
        return MATCH_INDEX, buff, neg
    kind = MATCH_FULL
    n = len(buff)
    for i, ch in enumerate(buff):
        if ch == "*":
            if not i:
                kind = MATCH_END_ONLY
            elif i == n - 1:
                kind = MATCH_MIDDLE_ONLY if kind == MATCH_END_ONLY else MATCH_FRONT_ONLY
                buff = buff[:i]
                break
            else:
                return MATCH_GLOB, buff, neg
        elif ch in "[?\\":
            return MATCH_GLOB, buff, neg
    if buff.startswith("*"):
        buff = buff[1:]
    return kind, buff, neg


def ftrace_match(name: str, kind: int, search: str) -> bool:
    """``ftrace_match`` of one name."""
    if kind == MATCH_FULL or kind == MATCH_INDEX:
        return name == search
    if kind == MATCH_FRONT_ONLY:
        return name.startswith(search)
    if kind == MATCH_MIDDLE_ONLY:
        return search in name
    if kind == MATCH_END_ONLY:
        return name.endswith(search)
    return glob_match(search, name)


# --- struct ftrace_hash's order ---------------------------------------------------------

GOLDEN_RATIO_64 = 0x61C8864680B583EB
FTRACE_HASH_DEFAULT_BITS, FTRACE_HASH_MAX_BITS = 10, 12


def _bucket(ip: int, bits: int) -> int:
    """``ftrace_hash_key``: ``hash_long(ip, bits)``, 0 for a one-bucket hash."""
    return ((ip * GOLDEN_RATIO_64) & 0xFFFFFFFFFFFFFFFF) >> (64 - bits) if bits else 0


def _rehash(seq, bits: int) -> list:
    """*seq* added one by one at the head of their buckets
    (``__add_hash_entry``), then read bucket by bucket."""
    buckets: dict = {}
    for ip in seq:
        buckets.setdefault(_bucket(ip, bits), []).insert(0, ip)
    return [ip for b in sorted(buckets) for ip in buckets[b]]


def hash_order(order: list, added: list) -> list:
    """The order a hash lists its entries in after an update: the old
    entries (*order*, as listed) copied into a new hash
    (``alloc_and_copy_ftrace_hash``), the *added* ones (record order)
    entered, then all moved into a hash of about half their count's bits
    (``__move_hash``)."""
    seq = _rehash(list(order) + list(added), FTRACE_HASH_DEFAULT_BITS)
    return _rehash(seq, min((len(seq) // 2).bit_length(), FTRACE_HASH_MAX_BITS))


# --- the records ------------------------------------------------------------------------

class FtraceRecords:
    """``ftrace_pages``: the profile kernel's traceable functions, in
    order; each a ``(name, module or None, address)``.  Loaded when
    first used."""

    def __init__(self, path):
        self.path = path  # the profile directory
        self._names: Optional[list] = None

    def _load(self) -> None:
        names, mods, addrs = [], [], []
        addrs_file = profile_file(self.path, "available_filter_functions_addrs")  # or its .xz
        plain = addrs_file is None
        src = self.path / "available_filter_functions" if plain else addrs_file
        text = read_profile_file(src).decode("utf-8", errors="surrogateescape")
        for n, line in enumerate(text.splitlines()):
            parts = line.split()
            if not parts:
                continue
            if plain:
                addrs.append(0xFFFFFFFF81000000 + 16 * n)
            else:
                addrs.append(int(parts.pop(0), 16))
            names.append(parts[0])
            mods.append(parts[1][1:-1] if len(parts) > 1 else None)
        self.mods, self.addrs = mods, addrs
        self.exact = not plain  # the kernel's addresses (else made up, 16 bytes apart)
        self.modules = {m for m in mods if m}
        self._names = names

    @property
    def names(self) -> list:
        if self._names is None:
            self._load()
        return self._names

    def __len__(self) -> int:
        return len(self.names)

    def show(self, i: int) -> str:
        """``print_rec``: the name, `` [module]`` for a module's."""
        mod = self.mods[i] if self._names is not None else None
        return self.names[i] + (f" [{mod}]" if mod else "")

    def index_of(self, name: str) -> Optional[int]:
        """The first record of function *name*."""
        idx = self.__dict__.get("_by_name")
        if idx is None:
            idx = self._by_name = {}
            for i, n in enumerate(self.names):
                idx.setdefault(n, i)
        return idx.get(name)

    def match(self, func: Optional[str], mod: Optional[str]) -> tuple[list, bool]:
        """``match_records``: the indices of the records *func* (a glob,
        maybe ``!``-led) names within module glob *mod* (None: any), and
        whether it removes (``!``)."""
        names = self.names
        kind, search, neg = filter_parse_regex(func) if func else (MATCH_FULL, "", False)
        if kind == MATCH_INDEX:
            try:
                index = kstrtoull(search.encode(), 0) - 1
            except OSError:
                return [], neg
            return ([index] if 0 <= index < len(names) else []), neg
        if mod is None:
            if kind == MATCH_FULL:
                return [i for i, n in enumerate(names) if n == search], neg
            return [i for i, n in enumerate(names) if ftrace_match(n, kind, search)], neg
        mkind, msearch, exclude = filter_parse_regex(mod)
        out = []
        for i, n in enumerate(names):
            m = self.mods[i]
            if not msearch:
                if (not exclude) == (not m):  # blank module: modname xor exclude_mod
                    continue
            else:
                hit = bool(m) and ftrace_match(m, mkind, msearch)
                if hit == exclude:
                    continue
            if not search or ftrace_match(n, kind, search):
                out.append(i)
        return out, neg

    def total_info(self) -> str:
        """``dyn_ftrace_total_info``: records, pages and page groups (a
        group per 2^k pages allocated at once; one here)."""
        n = len(self)
        pages = -(-n // ENTRIES_PER_PAGE)
        return f"{n} pages:{pages} groups: {max(1, pages.bit_length() - 1)}\n"


# --- trace_parser ------------------------------------------------------------------------

class TraceParser:
    """``struct trace_parser`` and ``trace_get_user``: one word per write;
    a word the write ends inside of is continued by the next (``cont``)."""

    def __init__(self, size: int = FTRACE_BUFF_MAX):
        self.size = size
        self.buffer = bytearray()
        self.cont = False
        self.done = False  # a word was ended (trace_parser_loaded && !cont)

    def get_user(self, data: bytes, pos: int) -> int:
        """Bytes consumed of *data*; the word in :attr:`buffer`."""
        if not pos:
            self.buffer.clear()
            self.cont = False
        i, n = 0, len(data)
        if not self.cont:
            while i < n and data[i] in SPACES:
                i += 1
            self.buffer.clear()
            if i == n or data[i] == 0:
                self.done = False
                return min(i + 1, n)
        while i < n and data[i] not in SPACES and data[i] != 0:
            if len(self.buffer) >= self.size - 1:
                raise einval("word too long")
            self.buffer.append(data[i])
            i += 1
        if i < n:  # a space or a NUL ends the word
            self.cont = False
            self.done = bool(self.buffer)
            return i + 1
        self.cont = True
        self.done = False
        return i

    def word(self) -> str:
        return self.buffer.decode(errors="surrogateescape")

    @property
    def loaded(self) -> bool:
        return bool(self.buffer)


# --- one ftrace_ops' hashes ------------------------------------------------------------

class FtraceOps:
    """The filter and notrace hashes of one ``ftrace_ops`` (a trace array's
    ``tr->ops``, the graph tracer's, the stack tracer's) and, for a trace
    array's, its cached ``:mod:`` commands (``mod_trace``/``mod_notrace``)
    and function probes (``func_probes``)."""

    def __init__(self, records: FtraceRecords, tr=None, commands=None):
        self.records = records
        self.tr = tr
        self.commands = commands or {}
        self.filter: set = set()
        self.notrace: set = set()
        self.mod_trace: list = []  # (func, module), newest first (list_add)
        self.mod_notrace: list = []
        self.probes: list = []  # ftrace_probe.FuncProbe, newest first
        self.on_change: list = []

    def hash(self, enable: bool) -> set:
        return self.filter if enable else self.notrace

    def traces(self, i: int) -> bool:
        """``ftrace_ops_test``: record *i* hooked by this ops."""
        if i in self.notrace:
            return False
        if self.filter:
            return i in self.filter
        return not self.mod_trace  # an empty filter with cached mods traces nothing

    def hooked(self) -> set:
        """Every record this ops hooks."""
        if self.filter:
            return self.filter - self.notrace
        if self.mod_trace:
            return set()
        return set(range(len(self.records))) - self.notrace

    def clear(self, enable: bool) -> None:
        """``O_TRUNC``: an empty hash, the cached mods dropped."""
        self.hash(enable).clear()
        (self.mod_trace if enable else self.mod_notrace).clear()
        self.changed()

    def changed(self) -> None:
        for callback in self.on_change:
            callback()

    def process_regex(self, word: str, enable: bool) -> None:
        """``ftrace_process_regex``: ``func``, ``func:mod:module`` or
        ``func:command[:param]``."""
        func, sep, rest = word.partition(":")
        if not sep:
            idx, neg = self.records.match(func, None)
            if not idx:
                raise einval(f"no function matches {func!r}")
            self._enter(idx, neg, enable)
            return
        command, sep, param = rest.partition(":")
        param = param if sep else None
        if command == "mod":
            if self.tr is None and self.commands:  # ftrace_mod_callback: no trace array
                raise kernel_error(errno.ENODEV)
            self._mod(func, param or "", enable)
            return
        run = self.commands.get(command)
        if run is None:
            raise einval(f"no command {command!r}")
        if self.tr is None:
            raise kernel_error(errno.ENODEV)
        run(self, func, command, param, enable)

    def _enter(self, idx, neg: bool, enable: bool) -> None:
        h = self.hash(enable)
        if neg:
            h.difference_update(idx)
        else:
            h.update(idx)
        self.changed()

    def _mod(self, func: str, module: str, enable: bool) -> None:
        """``ftrace_mod_callback``: the functions of a loaded module, or
        the command kept for when it loads (``cache_mod``)."""
        idx, neg = self.records.match(func, module)
        if idx:
            self._enter(idx, neg, enable)
            return
        head = self.mod_trace if enable else self.mod_notrace
        if func.startswith("!"):  # remove a cached one; EINVAL if none
            name = func[1:]
            keep = [(f, m) for f, m in head if m != module or not (name == "*" or f == name)]
            if len(keep) == len(head):
                raise einval("no cached module command")
            head[:] = keep
            self.changed()
            return
        if module in self.records.modules:
            raise einval(f"module {module} has no function {func!r}")
        head.insert(0, (func, module))
        self.changed()

    # --- what the files show ------------------------------------------------------------

    def show(self, enable: bool) -> list:
        """``set_ftrace_filter``/``set_ftrace_notrace`` (``t_show``): the
        hash's functions in record order, or the line saying it is empty;
        then the cached ``:mod:`` commands; then (filter only) the probes."""
        h = self.hash(enable)
        if h:
            lines = [self.records.show(i) + "\n" for i in sorted(h)]
        else:
            lines = ["#### no functions disabled ####\n" if not enable
                     else "#### all functions enabled ####\n"]
        for func, module in (self.mod_trace if enable else self.mod_notrace):
            lines.append(f"{func or '*'}:mod:{module}\n")
        if enable:
            for probe in self.probes:
                lines.extend(probe.show(self.records))
        return lines


__all__ = ["FtraceRecords", "FtraceOps", "TraceParser", "filter_parse_regex", "glob_match",
           "ftrace_match", "FTRACE_BUFF_MAX"]
