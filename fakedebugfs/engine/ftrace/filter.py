"""Event filters (kernel/trace/trace_events_filter.c, 6.18).

``compile_filter(event, text)`` parses the filter language of
``events/<sys>/<ev>/filter`` as the kernel does, in bytes:

* ``calc_stack`` first counts predicates and parentheses: too many ``)``
  is errno 1 (EPERM, the kernel's raw -1), too many ``(`` errno 2
  (ENOENT, raw -2), an unterminated quote errno 3 (ESRCH, raw -3);
  no predicate at all is EINVAL;
* ``predicate_parse`` then reads ``[!](`` / predicates / ``&&`` ``||``
  ``)``: anything else after a predicate is "Too many terms" (EPERM);
  a predicate without a field name is EPERM with no message;
* ``parse_pred`` takes a field (common, event or ``CPU``/``COMM``), an
  operator (``~ != == <= < >= > &``) and a quoted string (string fields:
  ``== != ~``, globs) or a number (``kstrtoll``/``kstrtoull`` base 0 of
  the alphanumeric run, cast to the field's size and sign); each failure
  is EINVAL with its message and position;
* a field name may carry the two modifiers a filter takes: ``.ustring``
  (a user-space string) and ``.function`` (``==``/``!=`` a function name
  or address: the field, a ``long``, must lie inside that function of the
  engine's kallsyms).  Any other ``.suffix`` (the hist trigger's ``.hex``,
  ``.sym``, ``.log2``...) is "Invalid operator" where the field name
  ends, as in the kernel.

The errors carry the text the filter file then shows (``append_filter_err``)
and the ``error_log`` entry (``tracing_log_err``).  The compiled program is
the kernel's branch program (three passes), evaluated over a record dict.
"""

from __future__ import annotations

import errno
import fnmatch
from typing import Callable, Optional

from fakedebugfs.engine.ftrace.kstrto import kstrtoull

OPS = (b"~", b"!=", b"==", b"<=", b"<", b">=", b">", b"&")  # '<=' before '<'
ERRORS = (  # FILT_ERR_* of 6.18, in order
    "No error", "Invalid operator", "Too many '('", "Too few '('", "Missing matching quote",
    "Missing '{'", "Missing '}'", "Operand too long", "Expecting string field",
    "Expecting numeric field", "Illegal operation for field type", "Field not found",
    "Illegal integer value", "Couldn't find or set field in one of a subsystem's events",
    "Too many terms in predicate expression", "Meaningless filter expression",
    "Invalid cpulist", "Only 'ip' field is supported for function trace",
    "Invalid value (did you forget quotes)?", "Function not found", "Error", "No filter found",
)
(E_NONE, E_INVALID_OP, E_TOO_MANY_OPEN, E_TOO_MANY_CLOSE, E_MISSING_QUOTE,
 E_MISSING_BRACE_OPEN, E_MISSING_BRACE_CLOSE, E_OPERAND_TOO_LONG, E_EXPECT_STRING,
 E_EXPECT_DIGIT, E_ILLEGAL_FIELD_OP, E_FIELD_NOT_FOUND, E_ILLEGAL_INTVAL, E_BAD_SUBSYS_FILTER,
 E_TOO_MANY_PREDS, E_INVALID_FILTER, E_INVALID_CPULIST, E_IP_FIELD_ONLY, E_INVALID_VALUE,
 E_NO_FUNCTION, E_ERRNO, E_NO_FILTER) = range(22)
MAX_FILTER_STR_VAL = 256
# include/linux/trace_seq.h: PAGE_SIZE * 2 less the seq_buf (24 bytes), readpos and full
TRACE_SEQ_BUFFER_SIZE = 2 * 4096 - (24 + 8 + 4)
COMMON = {"common_type": (2, 0), "common_flags": (1, 0), "common_preempt_count": (1, 0),
          "common_pid": (4, 1)}

Pred = Callable[[dict], bool]


# lib/ctype.c: Latin-1 letters are alphanumeric, NBSP is a space (ctype.py)
from fakedebugfs.engine.ftrace.ctype import isalnum, isspace  # noqa: E402


class FilterError(OSError):
    """A refused filter: errno, the kernel's ``lasterr`` and position."""

    def __init__(self, code: int, lasterr: int = 0, pos: int = 0):
        super().__init__(code, ERRORS[lasterr] if lasterr else errno.errorcode.get(code, ""))
        self.lasterr = lasterr
        self.pos = pos

    def filter_text(self, text: bytes) -> bytes:
        """``append_filter_err``: what the filter file shows afterwards,
        made in a ``trace_seq``: each piece is kept whole or, once one does
        not fit, neither it nor any after it (a filter of some 4 KiB keeps
        no caret line and no error line)."""
        if self.lasterr > 0:
            pos = min(self.pos, len(text))
            pos = pos + 1 if pos else 0
            pieces = (b"\n" + b"^".rjust(pos),
                      f"\nparse_error: {ERRORS[self.lasterr]}\n".encode())
        else:
            pieces = (b"\nError: (0)\n",)  # lasterr never set: "(0)"
        out = text[:TRACE_SEQ_BUFFER_SIZE - 1]
        for piece in pieces:
            if len(out) + len(piece) >= TRACE_SEQ_BUFFER_SIZE:  # vsnprintf needs its NUL
                break
            out += piece
        return out

    def log_text(self) -> str:
        return ERRORS[self.lasterr] if self.lasterr > 0 else "Error"


def _fail(code: int, lasterr: int = 0, pos: int = 0) -> FilterError:
    return FilterError(code, lasterr, pos)


# --- fields --------------------------------------------------------------------------

class Field:
    __slots__ = ("name", "size", "signed", "kind")

    def __init__(self, name, size, signed, kind):
        self.name, self.size, self.signed, self.kind = name, size, signed, kind

    @property
    def is_string(self) -> bool:
        return self.kind in ("dyn", "static", "comm", "ptr")


def find_field(event, name: str) -> Optional[Field]:
    """``trace_find_event_field``: the event's own fields, the common ones,
    then ``CPU``/``cpu`` and ``COMM``/``comm``."""
    for ctype, fname, _off, size, signed in event.fields:
        if fname.split("[", 1)[0] != name:
            continue
        if "__data_loc" in ctype and "char" in ctype:
            return Field(name, size, signed, "dyn")
        if "[" in fname and "char" in ctype:
            return Field(name, size, signed, "static")
        if ctype.replace(" ", "") in ("char*", "constchar*"):
            return Field(name, size, signed, "ptr")
        return Field(name, size, signed, "other")
    if name in COMMON:
        size, signed = COMMON[name]
        return Field(name, size, signed, "other")
    if name in ("CPU", "cpu"):
        return Field(name, 4, 1, "cpu")
    if name in ("COMM", "comm"):
        return Field(name, 16, 0, "comm")
    return None


# --- calc_stack ------------------------------------------------------------------------

def calc_stack(s: bytes) -> tuple[int, int]:
    """(max parens, predicates), or FilterError as ``process_preds``."""
    is_pred, nr_preds, open_, max_open, quote, last_quote = False, 0, 1, 1, 0, 0
    i = 0
    for i, c in enumerate(s):
        if isspace(c):
            continue
        if quote:
            if c == quote:
                quote = 0
            continue
        if c in b"'\"":
            quote, last_quote = c, i
        elif c in b"|&" and s[i + 1:i + 2] == bytes([c]):
            is_pred = False
            continue
        elif c == 0x28:
            is_pred = False
            open_ += 1
            max_open = max(max_open, open_)
            continue
        elif c == 0x29:
            is_pred = False
            if open_ == 1:
                raise _fail(errno.EPERM, E_TOO_MANY_CLOSE, i)
            open_ -= 1
            continue
        if not is_pred:
            nr_preds += 1
            is_pred = True
    if quote:
        raise _fail(errno.ESRCH, E_MISSING_QUOTE, last_quote)
    if open_ != 1:
        level, j, quote = open_, i, 0
        while j > 0:  # find the bad open, from the end
            c = s[j]
            if quote:
                if c == quote:
                    quote = 0
            elif c == 0x28:
                if level == open_:
                    raise _fail(errno.ENOENT, E_TOO_MANY_OPEN, j)
                level -= 1
            elif c == 0x29:
                level += 1
            elif c in b"'\"":
                quote = c
            j -= 1
        raise _fail(errno.ENOENT, E_TOO_MANY_OPEN, 0)
    return max_open, nr_preds


# --- parse_pred ---------------------------------------------------------------------------

def _cast(value: int, size: int, signed: bool) -> int:
    bits = 8 * size if size in (1, 2, 4, 8) else 64
    value &= (1 << bits) - 1
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def _kstrtoll(text: bytes) -> int:
    neg = text[:1] == b"-"
    value = kstrtoull(text[1:] if neg else text, 0)
    if neg:
        if value > 1 << 63:
            raise OSError(errno.ERANGE, "ERANGE")
        return -value
    if value >= 1 << 63:
        raise OSError(errno.ERANGE, "ERANGE")
    return value


def parse_pred(s: bytes, start: int, pos: int, event, kallsyms=None) -> tuple[int, Pred]:
    """One predicate at ``s[start:]``: (its length, the test).  *pos* is
    the position the kernel reports from (one past the predicate's first
    character).  A field may carry the kernel's two modifiers: ``.ustring``
    (a user-space string: read the same here) and ``.function`` (the value
    is an address inside the function named or addressed, looked up in
    *kallsyms*)."""
    st = s[start:]
    i = 0
    while i < len(st) and isspace(st[i]):
        i += 1
    b = i
    while i < len(st) and (isalnum(st[i]) or st[i] == 0x5F):
        i += 1
    if i == b:
        raise _fail(errno.EPERM)  # return -1: no message
    field = find_field(event, st[b:i].decode("latin-1"))
    if field is None:
        raise _fail(errno.EINVAL, E_FIELD_NOT_FOUND, pos + i)
    if st.startswith(b".ustring", i):  # a user-space string: the same text here
        i += 8
    function = st.startswith(b".function", i)
    if function:
        i += 9
    while i < len(st) and isspace(st[i]):
        i += 1
    op = next((o for o in OPS if st.startswith(o, i)), None)
    if op is None:
        raise _fail(errno.EINVAL, E_INVALID_OP, pos + i)
    i += len(op)
    while i < len(st) and isspace(st[i]):
        i += 1
    b = i
    if function:
        return _function_pred(st, i, pos, op, field, kallsyms)
    c = st[i] if i < len(st) else 0
    if c in b"'\"" and c:
        return _string_pred(st, i, b, pos, op, field)
    if 0x30 <= c <= 0x39 or c == 0x2D:
        return _number_pred(st, i, b, pos, op, field)
    raise _fail(errno.EINVAL, E_INVALID_VALUE, pos + i)


def _function_pred(st: bytes, i: int, pos: int, op: bytes, field: Field, kallsyms):
    """``FILTER_PRED_FN_FUNCTION``: a ``long``-sized field, ``==``/``!=``,
    then an address (``kstrtoul`` base 0 of the alphanumeric run) or a
    function name (everything up to a space, as the kernel reads it);
    either must fall in a known function, whose whole body then matches."""
    b = i
    if field.size != 8:
        raise _fail(errno.EINVAL, E_ILLEGAL_FIELD_OP, pos + i)
    if op not in (b"==", b"!="):
        raise _fail(errno.EINVAL, E_INVALID_OP, pos + i)
    if i < len(st) and 0x30 <= st[i] <= 0x39:
        while i < len(st) and isalnum(st[i]):
            i += 1
        if i - b >= 24:
            raise _fail(errno.EINVAL, E_OPERAND_TOO_LONG, pos + i)
        try:
            ip = kstrtoull(st[b:i], 0)
        except OSError:
            raise _fail(errno.EINVAL, E_INVALID_VALUE, pos + i) from None
    else:
        while i < len(st) and not isspace(st[i]):
            i += 1
        name = st[b:i].decode("latin-1")
        ip = 0
        if kallsyms is not None and name in kallsyms.names:
            ip = kallsyms.addrs[kallsyms.names.index(name)]
        if not ip:
            raise _fail(errno.EINVAL, E_NO_FUNCTION, pos + i)
    found = kallsyms.lookup(ip) if kallsyms is not None else None
    if found is None:  # kallsyms_lookup_size_offset
        raise _fail(errno.EINVAL, E_NO_FUNCTION, pos + i)
    _name, offset, size = found
    start = ip - offset
    end = start + size
    key, eq = field.name, op == b"=="
    return i, (lambda r: (start <= _value(r.get(key, 0)) < end) == eq)


def _string_pred(st: bytes, i: int, b: int, pos: int, op: bytes, field: Field):
    q = st[i]
    if op not in (b"!=", b"~", b"=="):
        raise _fail(errno.EINVAL, E_ILLEGAL_FIELD_OP, pos + i)
    if not field.is_string:
        raise _fail(errno.EINVAL, E_EXPECT_DIGIT, pos + i)
    j = st.find(bytes([q]), i + 1)
    if j == -1:
        raise _fail(errno.EINVAL, E_MISSING_QUOTE, pos + len(st))
    pattern = st[b + 1:j]
    if len(pattern) >= MAX_FILTER_STR_VAL:
        raise _fail(errno.EINVAL, E_OPERAND_TOO_LONG, pos + j)
    match = _regex(pattern, op == b"~")
    not_ = op == b"!="
    if op == b"~" and pattern[:1] == b"!":
        not_ = True
    name = field.name
    return j + 1, (lambda r: match(_text(r.get(name))) != not_)


def _regex(pattern: bytes, glob: bool):
    """``filter_build_regex``: full match, or for ``~`` a front/middle/end
    match or a full glob."""
    if not glob:
        return lambda v: v == pattern
    if pattern[:1] == b"!":
        pattern = pattern[1:]
    n = len(pattern)
    for k, c in enumerate(pattern):
        if c == 0x2A:
            if k == 0:
                continue
            if k == n - 1:
                body = pattern[1:-1] if pattern[:1] == b"*" else pattern[:-1]
                if pattern[:1] == b"*":
                    return lambda v: body in v
                return lambda v: v.startswith(body)
            return _glob(pattern)
        if c in b"[?\\":
            return _glob(pattern)
    if pattern[:1] == b"*":
        body = pattern[1:]
        return lambda v: v.endswith(body)
    return lambda v: v == pattern


def _glob(pattern: bytes):
    text = pattern.decode("latin-1")
    return lambda v: fnmatch.fnmatchcase(v.decode("latin-1"), text)


def _number_pred(st: bytes, i: int, b: int, pos: int, op: bytes, field: Field):
    if field.is_string:
        raise _fail(errno.EINVAL, E_EXPECT_STRING, pos + i)
    if op == b"~":
        raise _fail(errno.EINVAL, E_ILLEGAL_FIELD_OP, pos + i)
    if st[i] == 0x2D:
        i += 1
    while i < len(st) and isalnum(st[i]):
        i += 1
    num = st[b:i]
    if len(num) >= 24:
        raise _fail(errno.EINVAL, E_OPERAND_TOO_LONG, pos + i)
    try:
        val = _kstrtoll(num) if field.signed else kstrtoull(num, 0)
    except OSError:
        raise _fail(errno.EINVAL, E_ILLEGAL_INTVAL, pos + b) from None
    name = field.name
    if field.kind == "cpu":
        test = _num_test(op, val)
        return i, (lambda r: test(r.get("CPU", 0)))
    want = _cast(val, field.size, field.signed)
    test = _num_test(op, want)
    size, signed = field.size, field.signed
    return i, (lambda r: test(_cast(_value(r.get(name, 0)), size, signed)))


def _num_test(op: bytes, want: int):
    return {
        b"==": lambda v: v == want, b"!=": lambda v: v != want, b"<": lambda v: v < want,
        b"<=": lambda v: v <= want, b">": lambda v: v > want, b">=": lambda v: v >= want,
        b"&": lambda v: bool(v & want),
    }[op]


def _value(v) -> int:
    if isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v[:8], "little")
    return int(v or 0)


def _text(v) -> bytes:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).split(b"\0", 1)[0]
    return ("" if v is None else str(v)).encode(errors="surrogateescape")


# --- predicate_parse ------------------------------------------------------------------

def predicate_parse(s: bytes, nr_parens: int, nr_preds: int, event, kallsyms=None,
                    rejects_incomplete: bool = True):
    """The kernel's first pass, then the branch program's second and third
    passes: a list of (pred, when_to_branch, target) and the TRUE/FALSE
    ends.  *rejects_incomplete*: a text whose last predicate is followed by
    '&&', '||' or '!' is "Meaningless" (EINVAL, under its end), as kernels
    with that fix have it (kversion.py); before it, such a text ends as a
    complete one (and ``a || b &&`` fails the third pass: "Error: (0)")."""
    nr_preds += 2
    stack = [0]
    prog: list = []  # [pred, when_to_branch, target]
    inverts: list = []
    invert = 0
    INVERT, AND, OR = 1, 2, 4
    p, n = 0, len(s)
    while p < n:
        c = s[p]
        p += 1
        if isspace(c):
            continue
        if c == 0x28:
            if len(stack) - 1 > nr_parens:
                raise _fail(errno.EINVAL)
            stack.append(invert)
            continue
        if c == 0x21 and s[p:p + 1] not in (b"=", b"~"):
            invert = 1 - invert
            continue
        if len(prog) >= nr_preds:
            raise _fail(errno.EPERM, E_TOO_MANY_PREDS, p - 1)
        inverts.append(invert)
        length, pred = parse_pred(s, p - 1, p, event, kallsyms)
        prog.append([pred, 0, len(prog) - 1])
        p = p - 1 + length
        N = len(prog)
        while True:
            c = s[p] if p < n else 0
            p += 1
            if c and isspace(c):
                continue
            if c in (0x29, 0):
                pass
            elif c in (0x26, 0x7C) and p < n and s[p] == c:
                p += 1
            else:
                raise _fail(errno.EPERM, E_TOO_MANY_PREDS, p - 1)
            invert = stack[-1] & INVERT
            if stack[-1] & AND:
                _update(prog, N - 1, invert)
                stack[-1] &= ~AND
            if c == 0x26:
                stack[-1] |= AND
                break
            if stack[-1] & OR:
                _update(prog, N - 1, 1 - invert)
                stack[-1] &= ~OR
            if c == 0x7C:
                stack[-1] |= OR
                break
            if not c:
                return _finish(prog, inverts, stack, p)
            if len(stack) == 1:
                raise _fail(errno.EPERM, E_TOO_MANY_CLOSE, p)
            stack.pop()
    if prog and rejects_incomplete:  # only the inner loop completes an expression
        raise _fail(errno.EINVAL, E_INVALID_FILTER, min(p, n))
    return _finish(prog, inverts, stack, p)


def _update(prog, N: int, invert: int) -> None:
    t = prog[N][2]
    s = prog[t][2]
    prog[t][1] = invert
    prog[t][2] = N
    prog[N][2] = s


def _finish(prog, inverts, stack, p):
    if len(stack) != 1:
        raise _fail(errno.EPERM, E_TOO_MANY_OPEN, p)
    N = len(prog)
    ends = [[None, 0, 1], [None, 0, 0]]  # TRUE, FALSE
    full = prog + ends
    full[N - 1][2] = N
    full[N - 1][1] = 0
    for i in range(N - 2, -1, -1):
        target = full[i][2]
        if full[i][1] == full[target][1]:
            full[i][2] = full[target][2]
    for i in range(N):
        full[i][1] = inverts[i] ^ full[i][1]
        if full[i][2] <= i:
            raise _fail(errno.EINVAL)
    return full


def run_program(full, rec: dict) -> bool:
    """``filter_match_preds``."""
    i = 0
    while full[i][0] is not None:
        pred, when, target = full[i]
        if int(bool(pred(rec))) == when:
            i = target  # then the loop's i++: the entry after the label
        i += 1
    return bool(full[i][2])


def compile_filter(event, text, kallsyms=None, rejects_incomplete: bool = True) -> Pred:
    """``process_preds`` of *text* (str or bytes, already cut at a NUL and
    right-stripped) on *event*: the match function, or FilterError.
    *kallsyms* (the engine's :class:`~fakedebugfs.engine.core.kallsyms.Kallsyms`)
    resolves ``.function`` operands; without it none is found.
    *rejects_incomplete*: see :func:`predicate_parse`."""
    s = text if isinstance(text, bytes) else text.encode(errors="surrogateescape")
    nr_parens, nr_preds = calc_stack(s)
    if not nr_preds:
        raise _fail(errno.EINVAL)
    full = predicate_parse(s, nr_parens, nr_preds, event, kallsyms, rejects_incomplete)
    return lambda rec: run_program(full, rec)


__all__ = ["compile_filter", "FilterError", "ERRORS", "E_BAD_SUBSYS_FILTER", "find_field"]
