"""``sched_process_fork/exec/exit`` for the processes ``fakedebugfs run`` starts.

The real kernel reports them to anyone allowed to watch the command: one
``PERF_COUNT_SW_DUMMY`` perf event per CPU on the command's pid, with
``inherit`` (its children and threads are watched too), ``task``, ``comm``
and ``comm_exec`` (perf_event_open(2)).  Its ring buffers then carry
PERF_RECORD_FORK, PERF_RECORD_COMM (misc COMM_EXEC for an exec) and
PERF_RECORD_EXIT, written by the kernel in copy_process(), begin_new_exec()
and do_exit(), where it fires sched_process_fork, sched_process_exec and
sched_process_exit.  With ``context_switch`` the same buffers carry
PERF_RECORD_SWITCH, written in perf_event_task_sched_out/in() where the
kernel fires sched_switch: each becomes a ``sched_switch`` between the task
and the CPU's idle task (the other side is not the command's to see), so
``set_event_pid`` with ``event-fork`` (``trace-cmd record -F``) sees the
command's real context switches; a task switched in after a sleep is
woken first (``sched_waking`` and ``sched_wakeup``, from the CPU's idle
task), so latency recipes built on them (hist ``onmatch``) see it.  With ``exclude_kernel`` this needs no
privilege on one's own processes (perf_event_paranoid up to 2), so it works
rootless.

Each record becomes the tracepoint the kernel fires at that moment,
injected into the fake by its server (``run`` asks it to watch the command
through the control socket): same pids, same comms, the CPU the record was
written on, stamped when the server drains them: every few milliseconds,
and before every FUSE open, so that what happened before a reader opens a
file is in it, as it would be on the kernel (while a tracer listens to
them; else when a ring is half full: server/watch.py).  The context
switches are a perf event of their own per CPU, writing into the same
ring (``PERF_EVENT_IOC_SET_OUTPUT``), opened disabled and enabled, with
every inherited copy of it, only while ``sched_switch`` has a probe: two
records for each of the command's context switches (every FUSE request
it makes) cost nothing while nothing shows them.  Where perf_event_open
is refused (perf_event_paranoid 3, seccomp), nothing is watched and the
run goes on.
A run on the virtual clock is not watched: it must stay deterministic.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import mmap
import os
import struct

from construct import Int16ul, Int32sl, Int32ul, Int64ul, Struct

from fakedebugfs.engine.core.layouts import packer
from fakedebugfs.native import libc

log = logging.getLogger(__name__)

SYS_perf_event_open = 298  # x86_64
PERF_TYPE_SOFTWARE = 1  # include/uapi/linux/perf_event.h
PERF_COUNT_SW_DUMMY = 9
PERF_ATTR_SIZE_VER5 = 112
PERF_FLAG_FD_CLOEXEC = 1 << 3
# bits of perf_event_attr's flags word
ATTR_DISABLED = 1 << 0
ATTR_INHERIT = 1 << 1
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_EXCLUDE_HV = 1 << 6
ATTR_MMAP = 1 << 8
ATTR_COMM = 1 << 9
ATTR_TASK = 1 << 13
ATTR_WATERMARK = 1 << 14  # wake readers after wakeup_watermark bytes, not samples
ATTR_SAMPLE_ID_ALL = 1 << 18  # every record ends with the sample_id fields
ATTR_COMM_EXEC = 1 << 24
ATTR_CONTEXT_SWITCH = 1 << 26
PERF_SAMPLE_TID = 1 << 1  # sample_id: { u32 pid, tid; u64 time; } with PERF_SAMPLE_TIME
PERF_SAMPLE_TIME = 1 << 2
# ioctls of a perf event's fd (include/uapi/linux/perf_event.h)
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE = 0x2400, 0x2401  # _IO('$', 0), _IO('$', 1)
PERF_EVENT_IOC_SET_OUTPUT = 0x2405  # _IO('$', 5)

PERF_RECORD_MMAP = 1
PERF_RECORD_COMM = 3
PERF_RECORD_EXIT = 4
PERF_RECORD_FORK = 7
PERF_RECORD_SWITCH = 14
PERF_RECORD_MISC_COMM_EXEC = 1 << 13
PERF_RECORD_MISC_SWITCH_OUT = 1 << 13
PERF_RECORD_MISC_SWITCH_OUT_PREEMPT = 1 << 14
DEFAULT_PRIO = 120  # p->prio of a SCHED_NORMAL task at nice 0
TASK_RUNNING, TASK_INTERRUPTIBLE = 0, 1  # sched_switch's prev_state

# struct perf_event_attr, up to PERF_ATTR_SIZE_VER5 (the bitfield as one u64;
# wakeup_events is a union with wakeup_watermark, the bytes with ATTR_WATERMARK)
perf_event_attr = Struct(
    "type" / Int32ul, "size" / Int32ul, "config" / Int64ul, "sample_period" / Int64ul,
    "sample_type" / Int64ul, "read_format" / Int64ul, "flags" / Int64ul,
    "wakeup_events" / Int32ul, "bp_type" / Int32ul, "config1" / Int64ul, "config2" / Int64ul,
    "branch_sample_type" / Int64ul, "sample_regs_user" / Int64ul,
    "sample_stack_user" / Int32ul, "clockid" / Int32sl, "sample_regs_intr" / Int64ul,
    "aux_watermark" / Int32ul, "sample_max_stack" / Int16ul, "reserved_2" / Int16ul,
)
# struct perf_event_mmap_page: the fields after the 1 KiB of counter data
perf_mmap_ring = Struct("data_head" / Int64ul, "data_tail" / Int64ul,
                        "data_offset" / Int64ul, "data_size" / Int64ul)
RING_AT = 1024
# struct perf_event_header
perf_event_header = Struct("type" / Int32ul, "misc" / Int16ul, "size" / Int16ul)
# PERF_RECORD_FORK / PERF_RECORD_EXIT: { u32 pid, ppid, tid, ptid; u64 time; }
perf_record_task = Struct("pid" / Int32ul, "ppid" / Int32ul, "tid" / Int32ul,
                          "ptid" / Int32ul, "time" / Int64ul)
# PERF_RECORD_COMM: { u32 pid, tid; char comm[]; }
perf_record_comm_head = Struct("pid" / Int32ul, "tid" / Int32ul)
# struct sample_id, the last bytes of every record (sample_id_all, TID | TIME);
# all a PERF_RECORD_SWITCH has
perf_sample_id = Struct("pid" / Int32ul, "tid" / Int32ul, "time" / Int64ul)
SAMPLE_ID_SIZE = 16
# PERF_RECORD_MMAP: { u32 pid, tid; u64 addr, len, pgoff; char filename[]; }
perf_record_mmap_head = Struct("pid" / Int32ul, "tid" / Int32ul, "addr" / Int64ul,
                               "len" / Int64ul, "pgoff" / Int64ul)

# the same layouts as struct.Struct, for the records' hot path
_RING = packer(perf_mmap_ring)
_HEADER = packer(perf_event_header)
_SAMPLE_ID = packer(perf_sample_id)
_U64 = struct.Struct("<Q")

DATA_PAGES = 16  # ring buffer pages per CPU (a power of two)
# readers are woken when this much was written since the last wake-up
# (perf's rb->watermark): half the ring, the kernel's default
WAKEUP_BYTES = DATA_PAGES * mmap.PAGESIZE // 2


def _task_attr(flags: int, watermark: int = 0) -> bytes:
    return perf_event_attr.build(dict(
        type=PERF_TYPE_SOFTWARE, size=PERF_ATTR_SIZE_VER5, config=PERF_COUNT_SW_DUMMY,
        sample_period=0, sample_type=PERF_SAMPLE_TID | PERF_SAMPLE_TIME, read_format=0,
        flags=flags | ATTR_INHERIT | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV | ATTR_SAMPLE_ID_ALL,
        wakeup_events=watermark, bp_type=0, config1=0, config2=0, branch_sample_type=0,
        sample_regs_user=0, sample_stack_user=0, clockid=0, sample_regs_intr=0,
        aux_watermark=0, sample_max_stack=0, reserved_2=0))


def perf_event_open(attr: bytes, pid: int, cpu: int, flags: int = 0, what: str = "") -> int:
    """The system call (close-on-exec, no group), OSError on failure
    (*what* names the call in its message)."""
    return libc.check(libc.syscall(SYS_perf_event_open, attr, pid, cpu, -1,
                                   flags | PERF_FLAG_FD_CLOEXEC),
                      what or f"perf_event_open(pid {pid}, cpu {cpu})")


def open_task_events(pid: int, cpu: int) -> int:
    """The task records (fork, exit, comm and exec, executable mappings) of
    *pid* and its descendants on *cpu*; its readers are woken once
    WAKEUP_BYTES were written, not for each record."""
    attr = _task_attr(ATTR_MMAP | ATTR_COMM | ATTR_TASK | ATTR_COMM_EXEC | ATTR_WATERMARK,
                      WAKEUP_BYTES)
    return perf_event_open(attr, pid, cpu, what="perf_event_open")


def open_switch_events(pid: int, cpu: int, ring_fd: int | None) -> int:
    """The context switches (PERF_RECORD_SWITCH) of *pid* and its
    descendants on *cpu*, written into *ring_fd*'s ring (mapped already:
    the kernel refuses PERF_EVENT_IOC_SET_OUTPUT to an event with no
    buffer; None: the caller sets it once it is); disabled until
    ``PERF_EVENT_IOC_ENABLE`` (which reaches every inherited copy)."""
    attr = _task_attr(ATTR_CONTEXT_SWITCH | ATTR_DISABLED)
    fd = perf_event_open(attr, pid, cpu, what="perf_event_open")
    try:
        if ring_fd is not None:
            fcntl.ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ring_fd)
    except OSError:
        os.close(fd)
        raise
    return fd


def open_watch(pid: int) -> list[tuple[int, int, int]]:
    """``(cpu, ring fd, switch fd)`` for each online CPU: what
    :class:`ProcessEvents` opens, opened here, for a watcher that reads them
    elsewhere.  ``run``'s command init opens them in the command's PID
    namespace, so that the records number tasks as the command does, and
    hands them to the server outside it (sandbox/cmdinit.py)."""
    opened: list[tuple[int, int, int]] = []
    try:
        for cpu in range(os.cpu_count() or 1):
            try:
                fd = open_task_events(pid, cpu)
            except OSError as err:
                if err.errno == errno.ENODEV:  # an offline CPU
                    continue
                raise
            opened.append((cpu, fd, -1))
            opened[-1] = (cpu, fd, open_switch_events(pid, cpu, None))  # (set by the reader)
    except OSError:
        for _, ring_fd, switch_fd in opened:
            os.close(ring_fd)
            if switch_fd >= 0:
                os.close(switch_fd)
        raise
    return opened


def comm_of(pid: int, proc: str = "/proc") -> str:
    try:
        with open(f"{proc}/{pid}/comm") as fp:
            return fp.read().rstrip("\n")
    except OSError:
        return ""


def _exe_of(pid: int, comm: str, proc: str = "/proc") -> str:
    try:
        return os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        return comm


class Ring:
    """One CPU's ring buffer: records from data_tail to data_head."""

    def __init__(self, fd: int, cpu: int, pages: int = DATA_PAGES):
        self.fd, self.cpu = fd, cpu
        self.map = mmap.mmap(fd, (1 + pages) * mmap.PAGESIZE)
        ring = perf_mmap_ring.parse(self.map[RING_AT:RING_AT + perf_mmap_ring.sizeof()])
        self.offset = ring.data_offset or mmap.PAGESIZE
        self.size = ring.data_size or pages * mmap.PAGESIZE

    def has_records(self) -> bool:
        """Something was written since the last :meth:`records` (cheap:
        two words of the control page)."""
        head, tail = _RING.unpack_from(self.map, RING_AT)[:2]
        return head != tail

    def records(self):
        """(type, misc, body) of every new record; frees their space."""
        head, tail = _RING.unpack_from(self.map, RING_AT)[:2]
        if tail == head:
            return []
        data = self._bytes(tail, head - tail)  # one copy of all that is new
        out, pos, hsize = [], 0, _HEADER.size
        while pos + hsize <= len(data):
            kind, misc, size = _HEADER.unpack_from(data, pos)
            if size < hsize:
                break
            out.append((kind, misc, data[pos + hsize:pos + size]))
            pos += size
        _U64.pack_into(self.map, RING_AT + 8, tail + pos)  # data_tail
        return out

    def read_all(self) -> bytes:
        """Every new record's bytes, headers included (whole records: the
        kernel moves data_head past a record once it is written); frees
        their space."""
        head, tail = _RING.unpack_from(self.map, RING_AT)[:2]
        if tail == head:
            return b""
        data = self._bytes(tail, head - tail)
        _U64.pack_into(self.map, RING_AT + 8, head)  # data_tail
        return data

    def positions(self) -> tuple[int, int]:
        """``(data_head, data_tail)``."""
        return _RING.unpack_from(self.map, RING_AT)[:2]

    def read_upto(self, most: int) -> bytes:
        """At most *most* new bytes from data_tail on (records may be cut
        at the end: :meth:`release` frees what was used)."""
        head, tail = _RING.unpack_from(self.map, RING_AT)[:2]
        return self._bytes(tail, min(head - tail, most)) if head != tail else b""

    def release(self, n: int) -> None:
        """Free the first *n* bytes after data_tail (whole records)."""
        tail = _RING.unpack_from(self.map, RING_AT)[1]
        _U64.pack_into(self.map, RING_AT + 8, tail + n)

    def _bytes(self, pos: int, n: int) -> bytes:
        start = self.offset + pos % self.size
        first = min(n, self.offset + self.size - start)
        data = self.map[start:start + first]
        if first < n:
            data += self.map[self.offset:self.offset + n - first]
        return data

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


class ProcessEvents:
    """Watch *pid* and its descendants: :meth:`drain` turns what their perf
    buffers hold into the tracepoints the kernel fires (event dicts as the
    control socket's ``emit`` takes them).  While a tracer listens, the
    server drains before every FUSE open and every few milliseconds
    (server/watch.py), so a reader that opens ``trace`` after a switch
    sees it, as on the kernel; the switches are recorded only while asked
    (:meth:`switches`)."""

    def __init__(self, pid: int, nr_cpus: int, opened=None, proc: str = "/proc"):
        """*opened*: the perf events, opened already (:func:`open_watch`,
        taken over here); *proc*: the proc of the PID namespace they number
        tasks in."""
        self.pid, self.nr_cpus, self.proc = pid, nr_cpus, proc
        self.comms: dict[int, str] = {}
        self.pending: dict[int, tuple[int, str]] = {}  # pid -> (cpu, comm) of an exec
        self.asleep: set[int] = set()  # tasks whose last switch out was a sleep
        self.rings: list[Ring] = []
        self.switch_fds: list[int] = []  # the context switches' events, one per CPU
        self.switching = False  # they are enabled
        if opened is not None:  # taken over: closed here whatever happens
            done = 0
            try:
                for cpu, fd, switch_fd in opened:
                    self.switch_fds.append(switch_fd)
                    done += 1
                    try:
                        self.rings.append(Ring(fd, cpu))
                    except OSError:
                        os.close(fd)
                        raise
                    fcntl.ioctl(switch_fd, PERF_EVENT_IOC_SET_OUTPUT, fd)
            except OSError:
                self.close()
                for _, fd, switch_fd in opened[done:]:
                    os.close(fd)
                    os.close(switch_fd)
                raise
            return
        try:
            for cpu in range(os.cpu_count() or 1):
                try:
                    fd = open_task_events(pid, cpu)
                except OSError as err:
                    if err.errno == errno.ENODEV:  # an offline CPU
                        continue
                    raise
                self.rings.append(Ring(fd, cpu))
                self.switch_fds.append(open_switch_events(pid, cpu, fd))
        except OSError:
            self.close()
            raise

    def fds(self) -> list[int]:
        """The rings' fds: readable (and a poller woken) once a ring holds
        WAKEUP_BYTES more; EPOLLHUP once the watched task and all its
        descendants are gone."""
        return [ring.fd for ring in self.rings]

    def switches(self, on: bool) -> None:
        """Record the context switches (*on*) or stop: every watched task's
        inherited copy of the events follows (perf_ioctl's
        ``perf_event_for_each_child``)."""
        if on == self.switching:
            return
        for fd in self.switch_fds:
            fcntl.ioctl(fd, PERF_EVENT_IOC_ENABLE if on else PERF_EVENT_IOC_DISABLE, 0)
        self.switching = on

    def fork_event(self, parent: int, parent_comm: str) -> dict:
        """``sched_process_fork`` of the watched task from *parent* (it was
        forked before the watch began)."""
        self.comms[self.pid] = parent_comm
        return {"event": "sched:sched_process_fork", "cpu": 0, "pid": parent,
                "comm": parent_comm,
                "fields": {"parent_comm": parent_comm, "parent_pid": parent,
                           "child_comm": parent_comm, "child_pid": self.pid}}

    def close(self) -> None:
        for fd in self.switch_fds:
            os.close(fd)
        self.switch_fds = []
        for ring in self.rings:
            ring.close()
        self.rings = []

    def drain(self, final: bool = False) -> list[dict]:
        """Every CPU's new records, in the order they were written (by
        their sample_id time), as events; *final*: also the execs still
        waiting for their binary's mapping."""
        if not any(ring.has_records() for ring in self.rings) and not final:
            return []
        records = [(_U64.unpack_from(body, len(body) - 8)[0], ring.cpu, kind, misc, body)
                   for ring in self.rings for kind, misc, body in ring.records()
                   if len(body) >= SAMPLE_ID_SIZE]
        records.sort(key=lambda r: r[0])
        events = []
        for _, cpu, kind, misc, body in records:
            events += self.events(kind, misc, body, cpu % self.nr_cpus)
        if final:
            events += [self._exec_event(pid) for pid in list(self.pending)]
        return events

    def _exec_event(self, pid: int, filename: str | None = None,
                    mapping: tuple | None = None) -> dict:
        """An exec waits for the binary's first executable mapping, which
        names the file (begin_new_exec() reports the comm before the ELF
        loader maps it); ``mapping`` is that mapping's (addr, len, pgoff),
        where the task's uprobes on the file are (server/watch.py)."""
        cpu, comm = self.pending.pop(pid)
        return {"event": "sched:sched_process_exec", "cpu": cpu, "pid": pid, "comm": comm,
                "fields": {"filename": filename or _exe_of(pid, comm, self.proc), "pid": pid,
                           "old_pid": pid}, "mapping": mapping if filename else None}

    def events(self, kind: int, misc: int, body: bytes, cpu: int) -> list[dict]:
        """The tracepoints the kernel fires where it writes this record."""
        if kind == PERF_RECORD_SWITCH:
            switch = self._switch_event(misc, body, cpu)
            return self._wakeup_events(switch, cpu) + [switch]
        if kind == PERF_RECORD_MMAP:
            head = perf_record_mmap_head.parse(body)
            if head.pid not in self.pending:
                return []
            name = body[perf_record_mmap_head.sizeof():].split(b"\0")[0].decode(errors="replace")
            return [self._exec_event(head.pid, name if name.startswith("/") else None,
                                     (head.addr, head.len, head.pgoff))]
        if kind == PERF_RECORD_COMM:
            head = perf_record_comm_head.parse(body)
            comm = body[perf_record_comm_head.sizeof():].split(b"\0")[0].decode(errors="replace")
            self.comms[head.tid] = comm
            if misc & PERF_RECORD_MISC_COMM_EXEC:  # not prctl(PR_SET_NAME)
                out = [self._exec_event(head.pid)] if head.pid in self.pending else []
                self.pending[head.pid] = (cpu, comm)
                return out
            return []
        if kind not in (PERF_RECORD_FORK, PERF_RECORD_EXIT):
            return []
        r = perf_record_task.parse(body)
        out = [self._exec_event(p) for p in {r.pid, r.ptid} if p in self.pending]
        if kind == PERF_RECORD_FORK:
            comm = self.comms.get(r.ptid) or comm_of(r.ptid, self.proc)  # fork copies the comm
            self.comms[r.tid] = comm
            out.append({"event": "sched:sched_process_fork", "cpu": cpu, "pid": r.ptid,
                        "comm": comm, "fields": {"parent_comm": comm, "parent_pid": r.ptid,
                                                 "child_comm": comm, "child_pid": r.tid},
                        "thread": r.pid != r.tid})  # CLONE_THREAD (sources/forkallocs.py)
        else:
            comm = self.comms.pop(r.tid, None) or comm_of(r.tid, self.proc)
            out.append({"event": "sched:sched_process_exit", "cpu": cpu, "pid": r.tid,
                        "comm": comm, "fields": {"comm": comm, "pid": r.tid,
                                                 "prio": DEFAULT_PRIO}})
        return out

    def _wakeup_events(self, switch: dict, cpu: int) -> list[dict]:
        """A task switched in after it slept was woken first: the kernel's
        ``sched_waking`` and ``sched_wakeup`` (try_to_wake_up), here from
        the CPU's idle task (the waker is not the command's to see)."""
        f = switch["fields"]
        if f["prev_pid"] and f["prev_state"] != TASK_RUNNING:
            self.asleep.add(f["prev_pid"])
        tid = f["next_pid"]
        if not tid or tid not in self.asleep:
            return []
        self.asleep.discard(tid)
        wakee = {"comm": f["next_comm"], "pid": tid, "prio": DEFAULT_PRIO, "target_cpu": cpu}
        return [{"event": f"sched:{name}", "cpu": cpu, "pid": 0, "comm": f"swapper/{cpu}",
                 "fields": dict(wakee)} for name in ("sched_waking", "sched_wakeup")]

    def _switch_event(self, misc: int, body: bytes, cpu: int) -> dict:
        """``sched_switch`` from or to the CPU's idle task (``swapper/N``)."""
        tid = _SAMPLE_ID.unpack_from(body, len(body) - SAMPLE_ID_SIZE)[1]
        comm = self.comms.get(tid)
        if comm is None:
            comm = self.comms[tid] = comm_of(tid, self.proc)
        idle = (f"swapper/{cpu}", 0, DEFAULT_PRIO)
        task = (comm, tid, DEFAULT_PRIO)
        if misc & PERF_RECORD_MISC_SWITCH_OUT:
            prev, nxt = task, idle
            state = TASK_RUNNING if misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT \
                else TASK_INTERRUPTIBLE
        else:
            prev, nxt, state = idle, task, TASK_RUNNING
        pid = prev[1]
        return {"event": "sched:sched_switch", "cpu": cpu, "pid": pid, "comm": prev[0],
                "fields": {"prev_comm": prev[0], "prev_pid": prev[1], "prev_prio": prev[2],
                           "prev_state": state, "next_comm": nxt[0], "next_pid": nxt[1],
                           "next_prio": nxt[2]}}
