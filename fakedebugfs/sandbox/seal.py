"""The seal of ``fakedebugfs run``: a seccomp filter on the calls that
would take the command out of the namespace ``run`` made for it.

A command with root's capabilities could mount the real tracefs or
debugfs (``mount -t tracefs nodev /mnt``; libtracefs and perf do so by
themselves when they find none), unmount the fake's binds to uncover what
lies under them, remount ``/proc/sys`` or ``/sys`` read-write, or enter
(setns) or make (unshare, clone) other namespaces.  Dropping
CAP_SYS_ADMIN would stop all that but also what tracing tools need it for
(bpftrace walks the kernel's BTF objects with BPF_BTF_GET_NEXT_ID, which
needs CAP_SYS_ADMIN: "failed to iterate modules BTF objects").  So the
capabilities stay, and a seccomp filter (seccomp(2),
SECCOMP_SET_MODE_FILTER, after PR_SET_NO_NEW_PRIVS) answers EPERM to:

* the mount family: mount, umount2, pivot_root, fsopen, fsconfig,
  fsmount, fspick, move_mount, open_tree, mount_setattr, open_tree_attr;
* setns, and open_by_handle_at (which opens inodes hidden under mounts);
* unshare and clone with any namespace flag (CLONE_NEWNS, CLONE_NEWPID,
  CLONE_NEWUSER, ...), and unshare(CLONE_NEWNS) in particular;
* what changes the host's kernel itself: init_module, finit_module,
  delete_module, kexec_load, kexec_file_load, reboot;

and ENOSYS to clone3, whose flags live in memory a filter cannot read:
glibc then falls back to clone(2), whose flags it can.  The filter is
inherited by every child and kept across execve(), so nothing the command
starts gets out either.  A system call of another ABI (i386, x32), which
the numbers below do not describe, kills the process
(SECCOMP_RET_KILL_PROCESS): no way around the filter, and none that
half-works.

perf_event_open(2) and bpf(2) stay allowed: perf, bpftrace and libbpf
tools trace the real kernel as root does outside (what that leaves open:
docs/cli.md#the-seal).
"""

from __future__ import annotations

import ctypes
import errno

from construct import Array, Int8ul, Int16ul, Int32ul, Int64ul, Padding, Struct

from fakedebugfs.native import libc

# struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }  (include/uapi/linux/filter.h)
sock_filter = Struct("code" / Int16ul, "jt" / Int8ul, "jf" / Int8ul, "k" / Int32ul)
# struct sock_fprog { unsigned short len; struct sock_filter *filter; }  (x86_64 padding)
sock_fprog = Struct("len" / Int16ul, Padding(6), "filter" / Int64ul)
# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
seccomp_data = Struct("nr" / Int32ul, "arch" / Int32ul, "instruction_pointer" / Int64ul,
                      "args" / Array(6, Int64ul))
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16  # offsetof(struct seccomp_data, ...): low word of args[0]

BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K

SECCOMP_RET_KILL_PROCESS = 0x80000000  # include/uapi/linux/seccomp.h
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_USER_NOTIF = 0x7FC00000
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
PR_SET_NO_NEW_PRIVS = 38  # include/uapi/linux/prctl.h
AUDIT_ARCH_X86_64 = 0xC000003E  # include/uapi/linux/audit.h
X32_SYSCALL_BIT = 0x40000000

# arch/x86/entry/syscalls/syscall_64.tbl
SYS_seccomp = 317
SYS_clone, SYS_unshare, SYS_clone3 = 56, 272, 435
BLOCKED = {
    "pivot_root": 155, "mount": 165, "umount2": 166, "open_by_handle_at": 304, "setns": 308,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467,
    # the host's kernel itself: no tracing tool loads a module, reboots or kexecs
    "reboot": 169, "init_module": 175, "delete_module": 176, "kexec_load": 246,
    "finit_module": 313, "kexec_file_load": 320,
}
# include/uapi/linux/sched.h: every flag that makes a new namespace
CLONE_NEWTIME, CLONE_NEWNS, CLONE_NEWCGROUP = 0x80, 0x00020000, 0x02000000
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER = 0x04000000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
NAMESPACE_FLAGS = (CLONE_NEWTIME | CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC
                   | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)


def _program(notify_mount: bool = False) -> list[tuple]:
    """The filter as (code, jt, jf, k) with jumps to labels; see the module.
    *notify_mount*: mount(2) and umount2(2) go to the filter's listener
    instead (SECCOMP_RET_USER_NOTIF: :mod:`fakedebugfs.sandbox.mountview`)."""
    allow, eperm, enosys, flags, kill = "allow", "eperm", "enosys", "flags", "kill"
    prog: list = [
        (BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        (BPF_JEQ_K, None, kill, AUDIT_ARCH_X86_64),
        (BPF_LD_W_ABS, 0, 0, OFF_NR),
        (BPF_JSET_K, kill, None, X32_SYSCALL_BIT),
    ]
    if notify_mount:
        prog.append((BPF_JEQ_K, "notify", None, BLOCKED["mount"]))
        prog.append((BPF_JEQ_K, "notify", None, BLOCKED["umount2"]))
    for nr in sorted(BLOCKED.values()):
        prog.append((BPF_JEQ_K, eperm, None, nr))
    prog += [
        (BPF_JEQ_K, enosys, None, SYS_clone3),
        (BPF_JEQ_K, flags, None, SYS_clone),
        (BPF_JEQ_K, flags, allow, SYS_unshare),
        flags, (BPF_LD_W_ABS, 0, 0, OFF_ARG0),
        (BPF_JSET_K, eperm, allow, NAMESPACE_FLAGS),
        allow, (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        eperm, (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM),
        enosys, (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        kill, (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
    ]
    if notify_mount:
        prog += ["notify", (BPF_RET_K, 0, 0, SECCOMP_RET_USER_NOTIF)]
    return prog


def assemble(prog: list) -> bytes:
    """Resolve the labels of *prog* (a string before the instruction it
    names; None: the next instruction) into the jump offsets of classic
    BPF (counted from the next instruction) and build the sock_filter array."""
    labels, insns = {}, []
    for item in prog:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)
    out = b""
    for i, (code, jt, jf, k) in enumerate(insns):
        def rel(target):
            if target is None or isinstance(target, int):
                return target or 0
            return labels[target] - i - 1
        out += sock_filter.build({"code": code, "jt": rel(jt), "jf": rel(jf), "k": k})
    return out


def filter_bytes() -> bytes:
    """The filter, assembled (what the keeper hands to the join launcher,
    fakedebugfs/native/join.c)."""
    return assemble(_program())


def install_filter(listener: bool = False) -> int | None:
    """Seal this process and everything it will run (see the module):
    PR_SET_NO_NEW_PRIVS, then seccomp(SECCOMP_SET_MODE_FILTER).  With
    *listener*, mount(2) and umount2(2) are answered by whoever reads the returned fd
    (SECCOMP_FILTER_FLAG_NEW_LISTENER: :mod:`fakedebugfs.sandbox.mountview`)."""
    filt = assemble(_program(notify_mount=listener))
    buf = ctypes.create_string_buffer(filt, len(filt))
    prog = ctypes.create_string_buffer(sock_fprog.build(
        {"len": len(filt) // sock_filter.sizeof(), "filter": ctypes.addressof(buf)}))
    libc.check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1), "prctl(PR_SET_NO_NEW_PRIVS)")
    fd = libc.check(libc.syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                                 SECCOMP_FILTER_FLAG_NEW_LISTENER if listener else 0, prog),
                    "seccomp(SECCOMP_SET_MODE_FILTER)")
    return fd if listener else None


__all__ = ["BLOCKED", "NAMESPACE_FLAGS", "assemble", "filter_bytes", "install_filter",
           "seccomp_data"]
