"""The adversary of tests/test_seal_adversary.py: run as the command of
``fakedebugfs run`` or of a ``Fake`` (as root), it tries every indirect
way out of the seal it can find from inside and prints what each gave,
as one JSON object on stdout (the test judges it, and looks at the host
from outside):

* ``procs``: every process in sight, with its seccomp mode, no_new_privs,
  whether it is in our mount namespace, whether it holds ``/dev/fuse``
  (a FUSE server), and what writing a sysctl (its current value back:
  nothing changes if it is let through) through its ``/proc/N/root``
  answered;
* ``ptrace``: for each other process, PTRACE_SEIZE, then a ``mount()`` of
  a real tracefs injected into it (its registers set to a ``syscall``
  instruction of its own, one step, put back): the errno that gave;
* ``mem``: opening ``/proc/N/mem`` read-write;
* ``sockets``: each Unix socket path of ``/proc/net/unix`` with
  ``fakedebugfs`` in it, connected and asked ``hello``: whether it answered;
* ``writes``: host settings tried directly (a CPU's ``online``, a cgroup's
  ``cgroup.procs``, sysctls), each with its current value;
* ``finit_module``: what loading a kernel module answers;
* ``kill``: with ``--kill``, ``kill(-1, SIGKILL)`` after children were
  started, then whether the fake still serves (``tracing_on`` read,
  ``trace_marker`` written).

Only the standard library: it runs under any python3 inside.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import struct
import sys
import time

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.ptrace.restype = ctypes.c_long
LIBC.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_SINGLESTEP = 12, 13, 9
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
SYS_MOUNT = 165
# struct user_regs_struct (arch/x86/include/asm/user_64.h)
REGS = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp "
        "ss fs_base gs_base ds es fs gs").split()
TARGET = "/tmp/seal-adversary-tracefs"  # (--target DIR: the test's own)


class Regs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in REGS]


def err_name(code) -> str:
    return errno.errorcode.get(code, str(code)) if code is not None else "timeout"


def try_write(path: str) -> str:
    """Write *path*'s own value back: "ok" if let through, else the errno."""
    try:
        with open(path) as fp:
            value = fp.read()
        with open(path, "w") as fp:
            fp.write(value)
        return "ok"
    except OSError as err:
        return err_name(err.errno)


def holds_fuse(pid: int) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse":
                return True
        except OSError:
            pass
    return False


def status_field(pid: int, name: str) -> str:
    try:
        with open(f"/proc/{pid}/status") as fp:
            for line in fp:
                if line.startswith(name + ":"):
                    return line.split()[1]
    except OSError:
        pass
    return "?"


def inject_mount(pid: int) -> str:
    """PTRACE_SEIZE *pid* and make it call mount("nodev", TARGET, "tracefs");
    its answer (an errno name, or "ok": a real tracefs mounted), or the
    step that failed."""
    if LIBC.ptrace(PTRACE_SEIZE, pid, None, None) != 0:
        return "seize " + err_name(ctypes.get_errno())
    try:
        LIBC.ptrace(PTRACE_INTERRUPT, pid, None, None)
        os.waitpid(pid, getattr(os, "__WALL", 0x40000000))
        saved = Regs()
        if LIBC.ptrace(PTRACE_GETREGS, pid, None, ctypes.byref(saved)) != 0:
            return "getregs " + err_name(ctypes.get_errno())
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        try:
            if os.pread(fd, 2, saved.rip - 2) != b"\x0f\x05":
                return "not stopped after a syscall instruction"
            strings = b"nodev\0tracefs\0" + TARGET.encode() + b"\0"
            scratch = (saved.rsp - 65536) & ~0xF  # below its stack's red zone
            os.pwrite(fd, strings, scratch)
            regs = Regs.from_buffer_copy(saved)
            regs.orig_rax = 2**64 - 1  # not in a system call: no restart on resume
            regs.rax, regs.rip = SYS_MOUNT, saved.rip - 2
            regs.rdi, regs.rsi, regs.rdx = scratch, scratch + 14, scratch + 6
            regs.r10 = regs.r8 = 0
            LIBC.ptrace(PTRACE_SETREGS, pid, None, ctypes.byref(regs))
            LIBC.ptrace(PTRACE_SINGLESTEP, pid, None, None)
            os.waitpid(pid, 0x40000000)
            done = Regs()
            LIBC.ptrace(PTRACE_GETREGS, pid, None, ctypes.byref(done))
            LIBC.ptrace(PTRACE_SETREGS, pid, None, ctypes.byref(saved))
        finally:
            os.close(fd)
        result = ctypes.c_longlong(done.rax).value
        return "ok" if result == 0 else err_name(-result)
    finally:
        LIBC.ptrace(PTRACE_DETACH, pid, None, None)


def try_mem(pid: int) -> str:
    try:
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDWR))
        return "ok"
    except OSError as err:
        return err_name(err.errno)


def sockets() -> dict:
    """Every fakedebugfs-looking socket path in /proc/net/unix: answered?"""
    found = {}
    with open("/proc/net/unix") as fp:
        next(fp)
        for line in fp:
            parts = line.split()
            if len(parts) < 8 or not parts[7].startswith("/"):
                continue
            path = parts[7]
            if "fakedebugfs" not in path:  # (no other service's socket is disturbed)
                continue
            found[path] = ask(path)
    return found


def ask(path: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
        s.sendall(b'{"v": 1, "cmd": "hello"}\n')
        reply = s.recv(4096)
        return "answered" if b'"ok":true' in reply.replace(b" ", b"") else "refused"
    except OSError as err:
        return err_name(err.errno)
    finally:
        s.close()


def host_writes() -> dict:
    out = {}
    for path in ("/proc/sys/vm/swappiness", "/proc/sys/kernel/panic_on_warn",
                 "/proc/sys/kernel/ftrace_enabled", "/sys/devices/system/cpu/cpu1/online",
                 "/sys/fs/cgroup/cgroup.procs", "/proc/1/root/proc/sys/vm/swappiness"):
        if os.path.exists(path):
            out[path] = try_write(path) if not path.endswith("cgroup.procs") else _join_cgroup(path)
    return out


def _join_cgroup(path: str) -> str:
    try:
        with open(path, "w") as fp:
            fp.write(str(os.getpid()))
        return "ok"
    except OSError as err:
        return err_name(err.errno)


def kill_all(tracing: str) -> dict:
    children = [os.fork() for _ in range(2)]
    for pid in children:
        if pid == 0:
            time.sleep(300)
            os._exit(0)
    os.kill(-1, signal.SIGKILL)
    gone = []
    for pid in children:
        _, status = os.waitpid(pid, 0)
        gone.append(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL)
    with open(f"{tracing}/trace_marker", "w") as fp:
        fp.write("after kill -1\n")
    with open(f"{tracing}/tracing_on") as fp:
        on = fp.read().strip()
    return {"children_killed": all(gone), "tracing_on": on}


def main(argv: list[str]) -> int:
    global TARGET
    if "--target" in argv:
        TARGET = argv[argv.index("--target") + 1]
    me = os.getpid()
    mntns = os.readlink("/proc/self/ns/mnt")
    os.makedirs(TARGET, exist_ok=True)  # (an injected mount must not fail for want of it)
    out: dict = {"me": me, "mount": os.environ.get("FAKEDEBUGFS_MOUNT"), "procs": {},
                 "ptrace": {}, "mem": {}}
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            ns = os.readlink(f"/proc/{pid}/ns/mnt")
        except OSError as err:
            ns = err_name(err.errno)
        out["procs"][pid] = {
            "comm": open(f"/proc/{pid}/comm").read().strip() if os.path.exists(f"/proc/{pid}")
            else "?",
            "seccomp": status_field(pid, "Seccomp"), "nnp": status_field(pid, "NoNewPrivs"),
            "same_mntns": ns == mntns, "fuse": holds_fuse(pid),
            "root_sysctl": try_write(f"/proc/{pid}/root/proc/sys/vm/swappiness")}
        if pid != me:
            out["ptrace"][pid] = inject_mount(pid)
            out["mem"][pid] = try_mem(pid)
    out["sockets"] = sockets()
    out["writes"] = host_writes()
    # what the injected mount put there, if anything: a fake's view (a sealed
    # run answers a tracefs mount with one: sandbox/mountview.py) or real
    out["target_mounted"] = [line.split(" - ")[1].split()[0]
                             for line in open("/proc/self/mountinfo")
                             if line.split()[4] == TARGET]
    # a kernel module (fd -1: EBADF where the call is let through)
    out["finit_module"] = "ok" if LIBC.syscall(313, -1, b"", 0) == 0 else \
        err_name(ctypes.get_errno())
    try:
        os.rmdir(TARGET)
    except OSError:
        pass
    if "--kill" in argv:
        out["kill"] = kill_all(argv[argv.index("--kill") + 1])
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
