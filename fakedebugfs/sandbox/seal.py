"""The seal of ``fakedebugfs run``: the command may not mount, nor look
into other processes' mount namespaces.

A command that keeps CAP_SYS_ADMIN can mount the real tracefs or debugfs
(``mount -t tracefs nodev /mnt``; libtracefs and perf do so by themselves
when they find none), unmount the fake's binds to uncover what lies under
them, or setns() into the host's mount namespace; one that keeps
CAP_SYS_PTRACE can walk ``/proc/<pid>/root`` of any process outside into
the host's mounts (ptrace access mode PTRACE_MODE_READ_FSCREDS).  Any of
these reaches the real kernel's tracing.  Sealing takes CAP_SYS_ADMIN and
CAP_SYS_PTRACE out of the capability bounding set and the inheritable set
of the process that is about to exec the command, so after execve()
neither the command nor anything it runs (setuid-root or file-capability
binaries included) gets them back: mount(2), umount(2), fsopen(2) and
setns(2) answer EPERM, and ``/proc/<pid>/root`` EACCES for every process
holding a capability the command lacks.

Tracing the real kernel through perf_event_open(2) and bpf(2) does not
need CAP_SYS_ADMIN since Linux 5.8 (CAP_PERFMON, CAP_BPF), so perf,
bpftrace and libbpf tools keep the access root has outside.
"""

from __future__ import annotations

import ctypes

from construct import Array, Int32sl, Int32ul, Struct

from fakedebugfs.native import libc

CAP_SYS_PTRACE = 19  # include/uapi/linux/capability.h
CAP_SYS_ADMIN = 21
SEALED_CAPS = (CAP_SYS_ADMIN, CAP_SYS_PTRACE)

PR_CAPBSET_READ = 23  # include/uapi/linux/prctl.h
PR_CAPBSET_DROP = 24
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# struct __user_cap_header_struct { __u32 version; int pid; }
cap_user_header = Struct("version" / Int32ul, "pid" / Int32sl)
# struct __user_cap_data_struct { __u32 effective, permitted, inheritable; }[2]
# (_LINUX_CAPABILITY_U32S_3: capability N is bit N % 32 of element N / 32)
cap_user_data = Array(2, Struct("effective" / Int32ul, "permitted" / Int32ul,
                                "inheritable" / Int32ul))

_call = libc.check
_libc = libc.LIBC


def _capget() -> tuple[bytes, ctypes.Array]:
    header = cap_user_header.build({"version": _LINUX_CAPABILITY_VERSION_3, "pid": 0})
    data = ctypes.create_string_buffer(cap_user_data.sizeof())
    _call(_libc.capget(header, data), "capget")
    return header, data


def drop_capabilities(caps=SEALED_CAPS) -> None:
    """Remove *caps* from the bounding set (prctl PR_CAPBSET_DROP, which
    needs CAP_SETPCAP) and from the inheritable set (capset(2)), which
    also clears them from the ambient set.  The permitted and effective
    sets stay as they are until execve() recomputes them without *caps*."""
    for cap in caps:
        _call(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"prctl(PR_CAPBSET_DROP, {cap})")
    header, raw = _capget()
    data = cap_user_data.parse(raw.raw)
    for cap in caps:
        data[cap // 32].inheritable &= ~(1 << (cap % 32))
    _call(_libc.capset(header, cap_user_data.build(data)), "capset")


def in_bounding_set(cap: int) -> bool:
    """prctl(PR_CAPBSET_READ): whether *cap* can still be gained on execve()."""
    return _libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1
