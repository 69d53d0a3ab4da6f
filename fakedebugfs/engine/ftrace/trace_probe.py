"""What every probe event shares (kernel/trace/trace_probe.c, 6.18).

* :class:`ProbeLog` is ``trace_probe_log``: the command's words and the
  index of the word being parsed; :meth:`ProbeLog.err` is
  ``__trace_probe_log_err``, which raises :class:`ProbeError` carrying the
  ``error_log`` entry (the command re-joined with single spaces, the caret
  at the word's start plus the offset; past the last word: after it).
* :func:`parse_event_name` is ``traceprobe_parse_event_name``
  (``[GROUP/][EVENT]``, ``GROUP.EVENT`` too).
* :func:`~.trace_probe_parse.parse_probe_arg` is ``traceprobe_parse_probe_arg``:
  ``NAME=FETCHARG[:TYPE]``
  with the fetch args ``$retval $stackN $stack $comm $argN %reg @addr
  @+foffs @sym +|-[u]offs(FETCHARG) \\imm \\"str"``, the types of
  ``probe_fetch_types`` (``u8``..``x64``, ``char``, ``string``, ``ustring``,
  ``symstr``, ``symbol``, ``b<width>@<offset>/<container>``) and arrays
  ``TYPE[N]``.  Only what decides acceptance and the event's layout is
  kept of the fetch program (its ops), as the fake never reads memory.
* :mod:`.trace_probe_tmpl` makes the event: ``traceprobe_define_arg_fields``,
  ``__set_print_fmt``, ``trace_probe_print_args``.
* :class:`ProbeFacts` is what differs between the kernels a profile can
  be: the error texts of its version, ``CONFIG_PROBE_EVENTS_BTF_ARGS``.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass, field
from typing import Optional

from fakedebugfs.engine.ftrace.kstrto import kstrtoull
from fakedebugfs.engine.ftrace.kversion import has

MAX_TRACE_ARGS = 128
MAX_ARGSTR_LEN = 63
MAX_ARRAY_LEN = 64
MAX_ARG_NAME_LEN = 32
MAX_EVENT_NAME_LEN = 64
FETCH_INSN_MAX = 16
PARAM_MAX_STACK = 16384 // 8  # THREAD_SIZE / sizeof(long), x86_64
FIELD_STRING_IP, FIELD_STRING_RETIP, FIELD_STRING_FUNC = "__probe_ip", "__probe_ret_ip", \
    "__probe_func"
RESERVED = ("common_type", "common_flags", "common_preempt_count", "common_pid", "common_tgid",
            FIELD_STRING_IP, FIELD_STRING_RETIP, FIELD_STRING_FUNC)

# TPARG_FL_*
FL_RETURN, FL_KERNEL, FL_FENTRY, FL_TEVENT, FL_USER, FL_FPROBE, FL_TPOINT = (
    1, 2, 4, 8, 16, 32, 64)
FL_LOC_MASK = 31

# trace_probe.h's ERRORS, in order (TP_ERR_<name> -> text)
ERRORS = {
    "FILE_NOT_FOUND": "Failed to find the given file",
    "NO_REGULAR_FILE": "Not a regular file",
    "BAD_REFCNT": "Invalid reference counter offset",
    "REFCNT_OPEN_BRACE": "Reference counter brace is not closed",
    "BAD_REFCNT_SUFFIX": "Reference counter has wrong suffix",
    "BAD_UPROBE_OFFS": "Invalid uprobe offset",
    "BAD_MAXACT_TYPE": "Maxactive is only for function exit",
    "BAD_MAXACT": "Invalid maxactive number",
    "MAXACT_TOO_BIG": "Maxactive is too big",
    "BAD_PROBE_ADDR": "Invalid probed address or symbol",
    "NON_UNIQ_SYMBOL": "The symbol is not unique",
    "BAD_RETPROBE": "Retprobe address must be an function entry",
    "NO_TRACEPOINT": "Tracepoint is not found",
    "BAD_TP_NAME": "Invalid character in tracepoint name",
    "BAD_ADDR_SUFFIX": "Invalid probed address suffix",
    "NO_GROUP_NAME": "Group name is not specified",
    "GROUP_TOO_LONG": "Group name is too long",
    "BAD_GROUP_NAME": "Group name must follow the same rules as C identifiers",
    "NO_EVENT_NAME": "Event name is not specified",
    "EVENT_TOO_LONG": "Event name is too long",
    "BAD_EVENT_NAME": "Event name must follow the same rules as C identifiers",
    "EVENT_EXIST": "Given group/event name is already used by another event",
    "RETVAL_ON_PROBE": "$retval is not available on probe",
    "NO_RETVAL": "This function returns 'void' type",
    "BAD_STACK_NUM": "Invalid stack number",
    "BAD_ARG_NUM": "Invalid argument number",
    "BAD_VAR": "Invalid $-valiable specified",
    "BAD_REG_NAME": "Invalid register name",
    "BAD_MEM_ADDR": "Invalid memory address",
    "BAD_IMM": "Invalid immediate value",
    "IMMSTR_NO_CLOSE": "String is not closed with '\"'",
    "FILE_ON_KPROBE": "File offset is not available with kprobe",
    "BAD_FILE_OFFS": "Invalid file offset value",
    "SYM_ON_UPROBE": "Symbol is not available with uprobe",
    "TOO_MANY_OPS": "Dereference is too much nested",
    "DEREF_NEED_BRACE": "Dereference needs a brace",
    "BAD_DEREF_OFFS": "Invalid dereference offset",
    "DEREF_OPEN_BRACE": "Dereference brace is not closed",
    "COMM_CANT_DEREF": "$comm can not be dereferenced",
    "BAD_FETCH_ARG": "Invalid fetch argument",
    "ARRAY_NO_CLOSE": "Array is not closed",
    "BAD_ARRAY_SUFFIX": "Array has wrong suffix",
    "BAD_ARRAY_NUM": "Invalid array size",
    "ARRAY_TOO_BIG": "Array number is too big",
    "BAD_TYPE": "Unknown type is specified",
    "BAD_STRING": "String accepts only memory argument",
    "BAD_SYMSTRING": "Symbol String doesn't accept data/userdata",
    "BAD_BITFIELD": "Invalid bitfield",
    "ARG_NAME_TOO_LONG": "Argument name is too long",
    "NO_ARG_NAME": "Argument name is not specified",
    "BAD_ARG_NAME": "Argument name must follow the same rules as C identifiers",
    "USED_ARG_NAME": "This argument name is already used",
    "ARG_TOO_LONG": "Argument expression is too long",
    "NO_ARG_BODY": "No argument expression",
    "BAD_INSN_BNDRY": "Probe point is not an instruction boundary",
    "FAIL_REG_PROBE": "Failed to register probe event",
    "DIFF_PROBE_TYPE": "Probe type is different from existing probe",
    "DIFF_ARG_TYPE": "Argument type or name is different from existing probe",
    "SAME_PROBE": "There is already the exact same probe event",
    "NO_EVENT_INFO": "This requires both group and event name to attach",
    "BAD_ATTACH_EVENT": "Attached event does not exist",
    "BAD_ATTACH_ARG": "Attached event does not have this field",
    "NO_EP_FILTER": "No filter rule after 'if'",
    "NOSUP_BTFARG": "BTF is not available or not supported",
    "NO_BTFARG": "This variable is not found at this probe point",
    "NO_BTF_ENTRY": "No BTF entry for this probe point",
    "BAD_VAR_ARGS": "$arg* must be an independent parameter without name etc.",
    "NOFENTRY_ARGS": "$arg* can be used only on function entry or exit",
    "DOUBLE_ARGS": "$arg* can be used only once in the parameters",
    "ARGS_2LONG": "$arg* failed because the argument list is too long",
    "ARGIDX_2BIG": "$argN index is too big",
    "NO_PTR_STRCT": "This is not a pointer to union/structure.",
    "NOSUP_DAT_ARG": "Non pointer structure/union argument is not supported.",
    "BAD_HYPHEN": "Failed to parse single hyphen. Forgot '>''?",
    "NO_BTF_FIELD": "This field is not found.",
    "BAD_BTF_TID": "Failed to get BTF type info.",
    "BAD_TYPE4STR": "This type does not fit for string.",
    "NEED_STRING_TYPE": "$comm and immediate-string only accepts string type",
    "TOO_MANY_ARGS": "Too many arguments are specified",
    "TOO_MANY_EARGS": "Too many entry arguments specified",
}

# 6.12's texts where they differ from the table above (trace_probe.h of
# 6.12: "variable" spelled right, one quote less, EVENT_TOO_BIG, no
# TOO_MANY_ARGS/TOO_MANY_EARGS: too many arguments there are a bare E2BIG)
ERRORS_6_12 = {**{k: v for k, v in ERRORS.items()
                  if k not in ("TOO_MANY_ARGS", "TOO_MANY_EARGS")},
               "BAD_VAR": "Invalid $-variable specified",
               "BAD_HYPHEN": "Failed to parse single hyphen. Forgot '>'?",
               "EVENT_TOO_BIG": "Event too big (too many fields?)"}
MAX_PROBE_EVENT_SIZE = 3072


@dataclass(frozen=True)
class ProbeFacts:
    """What the probe code of the profile's kernel is: its error texts,
    whether it logs too many arguments (6.18) or answers a bare E2BIG
    (6.12), ``CONFIG_PROBE_EVENTS_BTF_ARGS`` (its README's
    ``<argname>[->field`` line) and the BTF of its functions (None: none
    captured; see :mod:`.trace_btf`)."""

    errors: dict = field(default_factory=lambda: ERRORS)
    log_too_many_args: bool = True
    event_too_big: bool = False
    btf_args: bool = False
    btf: object = None
    group_chars: str = "."  # what a group name may have beyond a C identifier's

    def log(self, subsystem: str, argv: list) -> "ProbeLog":
        return ProbeLog(subsystem, argv, self.errors)


def probe_facts(profile, btf=None) -> ProbeFacts:
    """The :class:`ProbeFacts` of a kernel profile (None: 6.18's); *btf*
    its BTF (:func:`.trace_btf.btf_of`).  What follows the kernel's version
    is read from :mod:`.kversion`'s table."""
    if profile is None:
        return ProbeFacts(btf=btf)
    readme = profile.files.get("README") or ""
    btf_args = "<argname>[->field" in readme
    new_errors = has(profile, "probe_errors_logged_6_13")
    return ProbeFacts(ERRORS if new_errors else ERRORS_6_12, log_too_many_args=new_errors,
                      event_too_big=not new_errors, btf_args=btf_args, btf=btf,
                      group_chars="." if has(profile, "probe_group_dots") else "-")


# x86_64 pt_regs names regs_query_register_offset knows
REGISTERS = ("r15", "r14", "r13", "r12", "bp", "bx", "r11", "r10", "r9", "r8", "ax", "cx", "dx",
             "si", "di", "orig_ax", "ip", "cs", "flags", "sp", "ss")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SYSTEM = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


class ProbeError(OSError):
    """A refused probe command: the errno and, when the kernel logs one,
    ``(subsystem, command, message, position)`` for ``error_log``."""

    def __init__(self, code: int, log: Optional[tuple] = None):
        super().__init__(code, log[2] if log else errno.errorcode.get(code, ""))
        self.log = log


class ProbeLog:
    """``trace_probe_log`` of one command (*errors*: the kernel's texts)."""

    def __init__(self, subsystem: str, argv: list, errors: Optional[dict] = None):
        self.subsystem, self.argv, self.index = subsystem, argv, 0
        self.errors = errors or ERRORS

    def err(self, offset: int, name: str, code: int = errno.EINVAL) -> ProbeError:
        """``__trace_probe_log_err``: the error to raise."""
        pos = sum(len(a) + 1 for a in self.argv[:self.index])
        if self.index >= len(self.argv):
            pos, offset = sum(len(a) + 1 for a in self.argv), 0
        return ProbeError(code, (self.subsystem, " ".join(self.argv), self.errors[name],
                                 pos + offset))


def is_good_name(name: str) -> bool:
    return bool(_NAME.match(name))


def is_good_system_name(name: str, extra: str = ".") -> bool:
    """``is_good_system_name``: like a C identifier, ``.`` allowed after the
    first (6.18); 6.12's ``__is_good_name(name, true)`` allows ``-``, anywhere."""
    if extra == ".":
        return bool(_SYSTEM.match(name))
    return bool(name) and (name[0].isalpha() or name[0] in "_" + extra) and all(
        c.isalnum() or c in "_" + extra for c in name) and name.isascii()


def parse_event_name(event: str, log: ProbeLog, offset: int, facts=None):
    """``traceprobe_parse_event_name``: ``(group or None, event or None)``."""
    group = None
    slash = event.find("/")
    if slash < 0:
        slash = event.find(".")
    if slash >= 0:
        if slash == 0:
            raise log.err(offset, "NO_GROUP_NAME")
        if slash + 1 > MAX_EVENT_NAME_LEN:
            raise log.err(offset, "GROUP_TOO_LONG")
        group = event[:slash]
        if not is_good_system_name(group, facts.group_chars if facts else "."):
            raise log.err(offset, "BAD_GROUP_NAME")
        offset += slash + 1
        event = event[slash + 1:]
    if not event:
        if slash >= 0:
            return group, None
        raise log.err(offset, "NO_EVENT_NAME")
    if len(event) >= MAX_EVENT_NAME_LEN:
        raise log.err(offset, "EVENT_TOO_LONG")
    if not is_good_name(event):
        raise log.err(offset, "BAD_EVENT_NAME")
    return group, event


# --- fetch types (probe_fetch_types) -----------------------------------------------------

@dataclass(frozen=True)
class FetchType:
    name: str
    size: int
    signed: int
    fmt: str  # the print fmt conversion
    fmttype: str  # the type the format file shows
    is_string: bool = False


FETCH_TYPES = {t.name: t for t in (
    FetchType("string", 4, 1, '\\"%s\\"', "__data_loc char[]", True),
    FetchType("ustring", 4, 1, '\\"%s\\"', "__data_loc char[]", True),
    FetchType("symstr", 4, 1, '\\"%s\\"', "__data_loc char[]", True),
    FetchType("u8", 1, 0, "%u", "u8"), FetchType("u16", 2, 0, "%u", "u16"),
    FetchType("u32", 4, 0, "%u", "u32"), FetchType("u64", 8, 0, "%Lu", "u64"),
    FetchType("s8", 1, 1, "%d", "s8"), FetchType("s16", 2, 1, "%d", "s16"),
    FetchType("s32", 4, 1, "%d", "s32"), FetchType("s64", 8, 1, "%Ld", "s64"),
    FetchType("x8", 1, 0, "0x%x", "u8"), FetchType("x16", 2, 0, "0x%x", "u16"),
    FetchType("x32", 4, 0, "0x%x", "u32"), FetchType("x64", 8, 0, "0x%Lx", "u64"),
    FetchType("char", 1, 0, "'%c'", "u8"), FetchType("symbol", 8, 0, "%pS", "u64"),
)}


def find_fetch_type(name: Optional[str], flags: int) -> Optional[FetchType]:
    """``find_fetch_type``: None (``x64``) by default; a bitfield is its
    container's ``u*``; ``symbol``/``symstr`` not for uprobes."""
    if name and flags & FL_USER and name in ("symbol", "symstr"):
        return None
    if not name:
        name = "x64"
    if name[0] == "b":
        at = name.find("/")
        if at < 0:
            return None
        try:
            bits = kstrtoull(name[at + 1:].encode(), 0)
        except OSError:
            return None
        return FETCH_TYPES.get({8: "u8", 16: "u16", 32: "u32", 64: "u64"}.get(bits, ""))
    return FETCH_TYPES.get(name)


# --- fetch args ---------------------------------------------------------------------------

@dataclass
class ProbeArg:
    """``struct probe_arg``."""

    name: str
    comm: str  # the fetch arg as written
    type: FetchType
    count: int = 0  # array length (0: not an array)
    offset: int = 0  # in the entry's argument data
    ops: list = field(default_factory=list)  # the fetch program's ops

    @property
    def fmttype(self) -> str:
        return f"{self.type.fmttype}[{self.count}]" if self.count else self.type.fmttype

    @property
    def size(self) -> int:
        return self.type.size * (self.count or 1)


class ProbeHits:
    """What probes on another tracepoint share (event probes, tracepoint
    probes): attached when their event is enabled in some trace array,
    detached when the last one disables it, and the sources that feed only
    what is recorded (``--mirror``, ``run``'s watcher) told of the
    tracepoint as of an enable.  A subclass says which probe an event is
    (:meth:`probe_for`) and attaches it (:meth:`_attach`)."""

    def __init__(self, dyn):
        self.dyn, self.ft = dyn, dyn.ft
        self.attached: dict = {}  # probe event key -> (tracepoint, probe)
        self.ft.on_enable_change.append(self.enable_change)

    def probe_for(self, key: str):
        raise NotImplementedError

    def _attach(self, probe) -> None:
        raise NotImplementedError

    def enable_change(self, key: str, on: bool) -> None:
        probe = self.probe_for(key)
        if probe is None:
            return
        if on and key not in self.attached:
            self._attach(probe)
        elif not on and key in self.attached \
                and sum(key in tr.enabled for tr in self.ft.arrays()) <= 1:
            tp, hook = self.attached.pop(key)
            tp.unregister(hook)
            self._tell(tp.key, False)

    def _tell(self, key: str, on: bool) -> None:
        for hook in tuple(self.ft.on_enable_change):
            if hook == self.enable_change:
                continue
            try:
                hook(key, on)
            except OSError:
                pass


__all__ = ["ProbeHits", "ERRORS", "ERRORS_6_12", "FETCH_TYPES", "MAX_TRACE_ARGS", "MAX_EVENT_NAME_LEN",
           "ProbeArg", "ProbeError", "ProbeFacts", "ProbeLog", "find_fetch_type",
           "is_good_name", "parse_event_name", "probe_facts"]
