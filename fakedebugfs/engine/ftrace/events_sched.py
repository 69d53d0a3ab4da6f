"""tracefs events of the scheduler and raw system calls (include/trace/events/
sched.h, syscalls.h), as the 6.18 kernel lays them out (``fixtures/tracefs/
events/{sched,raw_syscalls}``), fed by the catalogue's tracepoints.
"""

from __future__ import annotations

import struct

from fakedebugfs.engine.core.batch import char_array
from fakedebugfs.engine.ftrace.events import EventType
from fakedebugfs.engine.core.gfp import print_flags

# TASK_REPORT states of sched_switch's prev_state (__print_flags table)
TASK_STATES = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"), (0x20, "Z"),
               (0x40, "P"), (0x80, "I"))
TASK_REPORT_MAX = 0x100
SCHED_SWITCH_FMT = (
    '"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next'
    '_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000'
    '000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00'
    '000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 |'
    ' 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1)'
    ' - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008,'
    ' "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I"'
    ' }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00'
    '000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, RE'
    'C->next_pid, REC->next_prio'
)


def _f(ctype, name, off, size, signed=0):
    return (ctype, name, off, size, signed)


def _comm(value) -> bytes:
    """A ``char comm[16]`` field: ``strscpy`` of the name, NUL padded."""
    return value.encode()[:15].ljust(16, b"\0")


def _str(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _prev_state(state: int) -> str:
    """``prev_state=%s%s``: the state letters (``R`` when none), ``+`` if preempted."""
    mask = TASK_REPORT_MAX - 1
    letters = print_flags(state & mask, TASK_STATES) if state & mask else "R"
    return letters + ("+" if state & TASK_REPORT_MAX else "")


def _show_switch(r, out):
    return (f"prev_comm={_str(r['prev_comm'])} prev_pid={r['prev_pid']} "
            f"prev_prio={r['prev_prio']} prev_state={_prev_state(r['prev_state'])} ==> "
            f"next_comm={_str(r['next_comm'])} next_pid={r['next_pid']} next_prio={r['next_prio']}")


def _enc_switch(v):
    prev_comm, prev_pid, prev_prio, prev_state, next_comm, next_pid, next_prio = v
    return {"prev_comm": _comm(prev_comm), "prev_pid": prev_pid, "prev_prio": prev_prio,
            "prev_state": prev_state, "next_comm": _comm(next_comm), "next_pid": next_pid,
            "next_prio": next_prio}


def _enc_switch_columns(cols) -> dict:
    """:func:`_enc_switch` of many events at once (the batch path)."""
    prev_comm, prev_pid, prev_prio, prev_state, next_comm, next_pid, next_prio = cols
    return {"prev_comm": char_array(prev_comm, 16, 15), "prev_pid": prev_pid,
            "prev_prio": prev_prio, "prev_state": prev_state,
            "next_comm": char_array(next_comm, 16, 15), "next_pid": next_pid,
            "next_prio": next_prio}


def _show_fork(r, out):
    return (f"comm={r['parent_comm']} pid={r['parent_pid']} child_comm={r['child_comm']} "
            f"child_pid={r['child_pid']}")


def _enc_fork(v):
    return dict(zip(("parent_comm", "parent_pid", "child_comm", "child_pid"), v))


def _show_exit(r, out):
    return (f"comm={_str(r['comm'])} pid={r['pid']} prio={r['prio']} "
            f"group_dead={'true' if r['group_dead'] else 'false'}")


def _enc_exit(v):
    comm, pid, prio = v[:3]
    return {"comm": _comm(comm), "pid": pid, "prio": prio, "group_dead": 1}


def _show_exec(r, out):
    return f"filename={r['filename']} pid={r['pid']} old_pid={r['old_pid']}"


def _enc_exec(v):
    return dict(zip(("filename", "pid", "old_pid"), v))


_ARGS6 = struct.Struct("<6Q")


def _show_sys_enter(r, out):
    args = ", ".join(f"{a:x}" for a in _ARGS6.unpack(r["args"]))
    return f"NR {r['id']} ({args})"


def _enc_sys_enter(v):
    nr, args = v
    args = tuple(a & 0xFFFFFFFFFFFFFFFF for a in tuple(args)[:6]) + (0,) * (6 - len(args))
    return {"id": nr, "args": _ARGS6.pack(*args)}


def _show_sys_exit(r, out):
    return f"NR {r['id']} = {r['ret']}"


def _enc_sys_exit(v):
    return {"id": v[0], "ret": v[1]}


SCHED_EVENTS = (
    EventType("sched", "sched_switch", 372, (
        _f("char", "prev_comm[16]", 8, 16), _f("pid_t", "prev_pid", 24, 4, 1),
        _f("int", "prev_prio", 28, 4, 1), _f("long", "prev_state", 32, 8, 1),
        _f("char", "next_comm[16]", 40, 16), _f("pid_t", "next_pid", 56, 4, 1),
        _f("int", "next_prio", 60, 4, 1)),
        SCHED_SWITCH_FMT, _show_switch, _enc_switch, encode_columns=_enc_switch_columns),
    EventType("sched", "sched_process_fork", 366, (
        _f("__data_loc char[]", "parent_comm", 8, 4), _f("pid_t", "parent_pid", 12, 4, 1),
        _f("__data_loc char[]", "child_comm", 16, 4), _f("pid_t", "child_pid", 20, 4, 1)),
        '"comm=%s pid=%d child_comm=%s child_pid=%d", __get_str(parent_comm), '
        'REC->parent_pid, __get_str(child_comm), REC->child_pid',
        _show_fork, _enc_fork, dyn=("parent_comm", "child_comm")),
    EventType("sched", "sched_process_exit", 369, (
        _f("char", "comm[16]", 8, 16), _f("pid_t", "pid", 24, 4, 1), _f("int", "prio", 28, 4, 1),
        _f("bool", "group_dead", 32, 1)),
        '"comm=%s pid=%d prio=%d group_dead=%s", REC->comm, REC->pid, REC->prio, '
        'REC->group_dead ? "true" : "false"', _show_exit, _enc_exit),
    EventType("sched", "sched_process_exec", 365, (
        _f("__data_loc char[]", "filename", 8, 4), _f("pid_t", "pid", 12, 4, 1),
        _f("pid_t", "old_pid", 16, 4, 1)),
        '"filename=%s pid=%d old_pid=%d", __get_str(filename), REC->pid, REC->old_pid',
        _show_exec, _enc_exec, dyn=("filename",)),
    EventType("raw_syscalls", "sys_enter", 443, (
        _f("long", "id", 8, 8, 1), _f("unsigned long", "args[6]", 16, 48)),
        '"NR %ld (%lx, %lx, %lx, %lx, %lx, %lx)", REC->id, REC->args[0], REC->args[1], '
        'REC->args[2], REC->args[3], REC->args[4], REC->args[5]',
        _show_sys_enter, _enc_sys_enter),
    EventType("raw_syscalls", "sys_exit", 442, (
        _f("long", "id", 8, 8, 1), _f("long", "ret", 16, 8, 1)),
        '"NR %ld = %ld", REC->id, REC->ret', _show_sys_exit, _enc_sys_exit),
)
