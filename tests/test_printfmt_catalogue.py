"""Every event of the shipped 6.18 catalogue prints its ``print fmt`` as the
kernel's compiled ``TP_printk`` prints it.

(a) every print fmt of the profile compiles (no event falls back to
``name=value``) and prints a record of zeros;
(b) events whose print fmts name what the format file leaves unresolved
(enum constants, ``jiffies_to_msecs``, ``__get_cpumask``, statement
expressions, ``%pU``/``%pISpc``), emitted into a mounted fake and read back
from ``trace``, against the text derived by hand from their TRACE_EVENT;
(c) events provoked on the real kernel (``mmap``, ``writeback``, ``jbd2``
on a loop-mounted ext4) read in a scratch instance with and without the
``fields`` option: the fake prints the same field values as the kernel did.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import realtracefs

from fakedebugfs import Fake
from fakedebugfs.engine.ftrace.format_text import KERNEL_SYMBOLS, POINTEES, _encoder
from fakedebugfs.engine.ftrace.printfmt import compile_print_fmt
from fakedebugfs.engine.ftrace.ctype import wrap
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES
from fakedebugfs.engine.kernel import Kernel

PROFILE = "linux-6.18"  # the catalogue these tests name, and this machine's kernel
_KERNEL = Kernel(profile=str(SHIPPED_PROFILES / PROFILE))
FTRACE = _KERNEL.ftrace
HEADER = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+"
                    r"(?P<ts>\d+\.\d+): (?P<name>\w+): (?P<text>.*)$")


# --- (a) the whole catalogue ----------------------------------------------------------

def test_every_print_fmt_of_the_catalogue_compiles():
    """No event of the profile prints ``name=value`` for want of an
    interpreter: the list of those that do not compile is empty."""
    failed = []
    for key in FTRACE.event_keys():
        ev = FTRACE.events[key]
        try:
            compile_print_fmt(ev.print_fmt, ev.fields, KERNEL_SYMBOLS, POINTEES)
        except ValueError as err:
            failed.append(f"{key}: {err}")
    assert len(FTRACE.event_keys()) == 2305
    assert not failed, f"{len(failed)} print fmts do not compile:\n" + "\n".join(failed)


def test_every_print_fmt_prints_a_record_of_zeros():
    """A record of zeros and empty strings prints through the print fmt
    (``%pU`` of zero bytes, ``%pISpc`` of family 0, ``%*pbl`` of nothing
    ...) without an error that would fall back to ``name=value``."""
    failed = []
    for key in FTRACE.event_keys():
        ev = FTRACE.events[key]
        pf = compile_print_fmt(ev.print_fmt, ev.fields, KERNEL_SYMBOLS, POINTEES)
        try:
            pf.render(_encoder(ev)({}), FTRACE.out)
        except Exception as err:  # noqa: BLE001 - any error is a fallback to name=value
            failed.append(f"{key}: {err!r}")
    assert not failed, "\n".join(failed)


# --- (b) formerly failing events against their TRACE_EVENT -----------------------------

def _sockaddr_in(port: int, addr: bytes) -> list:
    """struct sockaddr_in (28 bytes as tcp's sockaddr_in6-sized fields)."""
    return list((2).to_bytes(2, "little") + port.to_bytes(2, "big") + addr + bytes(20))


def _sockaddr_in6(port: int, addr: bytes) -> list:
    return list((10).to_bytes(2, "little") + port.to_bytes(2, "big") + bytes(4) + addr + bytes(4))


_V6_LOOP = bytes(15) + b"\x01"
_V4_MAPPED = bytes(10) + b"\xff\xff" + bytes([192, 168, 1, 2])
_DEV_254_0, _DEV_7_0 = 254 << 20, 7 << 20
# kvm_mmu_page_role: level 1, has_4_byte_gpte, quadrant 2, access 2 (w--),
# invalid, efer_nx 0, ad_disabled 1
_ROLE_SHADOW = 1 | 1 << 4 | 2 << 5 | 2 << 8 | 1 << 11 | 1 << 16
# level 4, direct, access 7 (wux), efer_nx
_ROLE_DIRECT = 4 | 1 << 7 | 7 << 8 | 1 << 12

CASES = [
    # arch/x86/kvm/trace.h TRACE_EVENT(kvm_nested_vmenter_failed):
    # "%s%s", msg, !err ? "" : __print_symbolic(err, VMX_VMENTER_INSTRUCTION_ERRORS)
    ("kvm:kvm_nested_vmenter_failed", dict(msg="VMLAUNCH: ", err=7),
     "VMLAUNCH: VMENTRY_INVALID_CONTROL_FIELD"),
    ("kvm:kvm_nested_vmenter_failed", dict(msg="VMRESUME: ", err=26),
     "VMRESUME: VMENTRY_EVENTS_BLOCKED_BY_MOV_SS"),
    ("kvm:kvm_nested_vmenter_failed", dict(msg="nothing", err=0), "nothing"),
    ("kvm:kvm_nested_vmenter_failed", dict(msg="x", err=99), "x0x63"),
    # arch/x86/kvm/trace.h TRACE_EVENT(kvm_apicv_inhibit_changed): the
    # inhibits as __print_flags of BIT(APICV_INHIBIT_REASON_*)
    ("kvm:kvm_apicv_inhibit_changed", dict(set=1, reason=7, inhibits=(1 << 7) | 1),
     "set reason=7, inhibits=0x81 DISABLED|NESTED"),
    ("kvm:kvm_apicv_inhibit_changed", dict(set=0, reason=12, inhibits=1 << 12 | 1 << 20),
     "cleared reason=12, inhibits=0x101000 PHYSICAL_ID_TOO_BIG|0x100000"),
    ("kvm:kvm_apicv_inhibit_changed", dict(set=0, reason=1, inhibits=0),
     "cleared reason=1, inhibits=0x0"),
    # arch/x86/kvm/trace.h TRACE_EVENT(kvm_track_tsc): host clock by
    # enum vdso_clock_mode {VDSO_CLOCKMODE_NONE, "none"}, {.._TSC, "tsc"}
    ("kvm:kvm_track_tsc", dict(vcpu_id=1, use_master_clock=1, nr_vcpus_matched_tsc=2,
                               online_vcpus=4, host_clock=1),
     "vcpu_id 1 masterclock 1 offsetmatched 2 nr_online 4 hostclock tsc"),
    ("kvm:kvm_update_master_clock", dict(use_master_clock=0, host_clock=2, offset_matched=1),
     "masterclock 0 hostclock 0x2 offsetmatched 1"),
    # arch/x86/kvm/mmu/mmutrace.h KVM_MMU_PAGE_PRINTK(): trace_seq_printf
    # into p of union kvm_mmu_page_role's bits, then "%s %s" with created
    ("kvmmmu:kvm_mmu_get_page", dict(mmu_valid_gen=3, gfn=0x1234, role=_ROLE_DIRECT,
                                     root_count=2, unsync=0, created=1),
     "sp gen 3 gfn 1234 l4 8-byte q0 direct wux nxe ad root 2 sync new"),
    ("kvmmmu:kvm_mmu_prepare_zap_page", dict(mmu_valid_gen=255, gfn=0xfee00, role=_ROLE_SHADOW,
                                             root_count=0, unsync=1),
     "sp gen 255 gfn fee00 l1 4-byte q2 w-- invalid !nxe !ad root 0 unsync"),
    # fs/iomap/trace.h TRACE_EVENT(iomap_dio_rw_begin): ki_flags by
    # TRACE_IOCB_STRINGS ((int)(__kernel_rwf_t)RWF_DSYNC, IOCB_DIRECT ...)
    ("iomap:iomap_dio_rw_begin", dict(dev=_DEV_254_0, ino=12, isize=8192, pos=4096,
                                      count=4096, done_before=0,
                                      ki_flags=2 | 1 << 17 | 1 << 18, dio_flags=1, aio=1),
     "dev 254:0 ino 0xc size 0x2000 offset 0x1000 length 0x1000 done_before 0x0 "
     "flags DSYNC|DIRECT|WRITE dio_flags DIO_FORCE_WAIT aio 1"),
    ("iomap:iomap_dio_complete", dict(dev=_DEV_254_0, ino=12, isize=0, pos=0,
                                      ki_flags=1 << 23 | 0x80, aio=0, error=-5, ret=-5),
     "dev 254:0 ino 0xc size 0x0 offset 0x0 flags DONTCACHE|AIO_RW aio 0 error -5 ret -5"),
    # include/trace/events/jbd2.h TRACE_EVENT(jbd2_run_stats): each time
    # jiffies_to_msecs(), 4 ms a jiffy at this kernel's CONFIG_HZ=250
    ("jbd2:jbd2_run_stats", dict(dev=_DEV_7_0, tid=2, wait=1, request_delay=2, running=3,
                                 locked=0, flushing=250, logging=5, handle_count=4,
                                 blocks=7, blocks_logged=9),
     "dev 7,0 tid 2 wait 4 request_delay 8 running 12 locked 0 flushing 1000 logging 20 "
     "handle_count 4 blocks 7 blocks_logged 9"),
    ("jbd2:jbd2_checkpoint_stats", dict(dev=_DEV_7_0, tid=3, chp_time=5, forced_to_close=1,
                                        written=2, dropped=6),
     "dev 7,0 tid 3 chp_time 20 forced_to_close 1 written 2 dropped 6"),
    # include/trace/events/ipi.h TRACE_EVENT(ipi_send_cpumask):
    # __get_cpumask() prints "%*pb" of the mask's bits (32-bit chunks)
    ("ipi:ipi_send_cpumask", dict(cpumask=[0b101, 0, 0, 0, 0, 0, 0, 1], callsite=0, callback=0),
     "cpumask=01000000,00000005 callsite=0x0 callback=0x0"),
    # include/trace/events/mmap.h TRACE_EVENT(vm_unmapped_area):
    # IS_ERR_VALUE(addr) ? 0 : addr, IS_ERR_VALUE(addr) ? addr : 0
    ("mmap:vm_unmapped_area", dict(addr=2 ** 64 - 12, total_vm=0x38, flags=1, length=0x35000,
                                   low_limit=0x1000, high_limit=0x7fe96dd2b000),
     "addr=0x0 err=-12 total_vm=0x38 flags=0x1 len=0x35000 lo=0x1000 hi=0x7fe96dd2b000 "
     "mask=0x0 ofs=0x0"),
    ("mmap:vm_unmapped_area", dict(addr=0x7fe96dcf6000, total_vm=0x38, flags=1,
                                   length=0x35000, low_limit=0x1000, high_limit=0x7fe96dd2b000,
                                   align_mask=0xfff, align_offset=0x10),
     "addr=0x7fe96dcf6000 err=0 total_vm=0x38 flags=0x1 len=0x35000 lo=0x1000 "
     "hi=0x7fe96dd2b000 mask=0xfff ofs=0x10"),
    # include/ras/ras_event.h TRACE_EVENT(mc_event): mc_event_error_type()
    # is __print_symbolic over enum hw_event_mc_err_type
    ("ras:mc_event", dict(error_type=1, msg="read error", label="DIMM_A1", error_count=2,
                          mc_index=0, top_layer=0, middle_layer=1, lower_layer=-1,
                          address=0x1234, grain_bits=12, syndrome=0xabcd,
                          driver_detail="rank 0"),
     "2 Uncorrected errors: read error on DIMM_A1 (mc:0 location:0:1:-1 "
     "address:0x00001234 grain:4096 syndrome:0x0000abcd rank 0)"),
    ("ras:mc_event", dict(error_type=0, msg="", label="any", error_count=1, grain_bits=0),
     "1 Corrected error: on any (mc:0 location:0:0:0 address:0x00000000 grain:1 "
     "syndrome:0x00000000)"),
    # include/trace/events/writeback.h: inode state by show_inode_state()
    ("writeback:sb_mark_inode_writeback", dict(dev=_DEV_254_0, ino=2146921, state=16 | 64,
                                               mode=0o100644, dirtied_when=4298174755),
     "dev 254,0 ino 2146921 dirtied 4298174755 state I_DIRTY_SYNC|I_DIRTY_PAGES mode 0100644"),
    ("writeback:writeback_dirty_inode", dict(name="254:0", ino=5, state=0, flags=16 | 32 | 64),
     "bdi 254:0: ino=5 state= flags=I_DIRTY_SYNC|I_DIRTY_DATASYNC|I_DIRTY_PAGES"),
    # include/trace/events/fs_dax.h: fault flags and VM_FAULT_RESULT_TRACE
    ("fs_dax:dax_load_hole", dict(dev=_DEV_254_0, ino=0x10, vm_flags=0x8, address=0x7000,
                                  pgoff=7, flags=1 | 64, result=0x100 | 0x200),
     "dev 254:0 ino 0x10 shared WRITE|USER address 0x7000 pgoff 0x7 NOPAGE|LOCKED"),
    # include/trace/events/vmscan.h TRACE_EVENT(mm_vmscan_throttled)
    ("vmscan:mm_vmscan_throttled", dict(nid=1, usec_timeout=100000, usec_delayed=20, reason=2),
     "nid=1 usec_timeout=100000 usect_delayed=20 reason=VMSCAN_THROTTLE_ISOLATED"),
    # include/trace/events/tcp.h: tcp_state_name(); "%pISpc" of the
    # sockaddr, "%pI6c" compressed
    ("tcp:tcp_send_reset", dict(state=10, reason=1, saddr=_sockaddr_in6(80, _V6_LOOP),
                                daddr=_sockaddr_in(8080, bytes([127, 0, 0, 1]))),
     "skbaddr=0000000000000000 skaddr=0000000000000000 src=[::1]:80 dest=127.0.0.1:8080 "
     "state=TCP_LISTEN reason=NO_SOCKET"),
    ("tcp:tcp_retransmit_skb", dict(state=1, family=10, sport=22, dport=50000,
                                    saddr=[10, 0, 0, 1], daddr=[10, 0, 0, 2],
                                    saddr_v6=list(_V4_MAPPED),
                                    daddr_v6=list(bytes.fromhex("20010db8" + "00" * 10 + "0001")),
                                    err=-11),
     "skbaddr=0000000000000000 skaddr=0000000000000000 family=AF_INET6 sport=22 "
     "dport=50000 saddr=10.0.0.1 daddr=10.0.0.2 saddrv6=::ffff:192.168.1.2 "
     "daddrv6=2001:db8::1 state=TCP_ESTABLISHED err=-11"),
    # fs/btrfs: "%pU" of the fsid, QGROUP_* flags
    ("btrfs:btrfs_qgroup_release_data", dict(fsid=list(range(16)), rootid=5, ino=257,
                                             start=0, len=4096, reserved=4096, op=2),
     "00010203-0405-0607-0809-0a0b0c0d0e0f: root=5 ino=257 start=0 len=4096 "
     "reserved=4096 op=release"),
    # kernel/dma/ (include/trace/events/dma.h) TRACE_EVENT(dma_map_sg):
    # min(full_nents, DMA_TRACE_MAX_ENTRIES) as a statement expression
    ("dma:dma_map_sg", dict(device="0000:00:04.0", dir=1, full_nents=200, full_ents=3,
                            truncated=1, dma_addrs=list((0x1000).to_bytes(8, "little")),
                            lengths=list((512).to_bytes(4, "little")), phys_addrs=[],
                            attrs=1 << 5),
     "0000:00:04.0 dir=TO_DEVICE nents=128/200 ents=3/3 [TRUNCATED] dma_addrs={0x1000} "
     "sizes={0x200} phys_addrs={} attrs=SKIP_CPU_SYNC"),
    # fs/ext4 TRACE_EVENT(ext4_fsmap_mapping): the format string ends
    # with "\n" (a second line, empty, in trace)
    ("ext4:ext4_fsmap_mapping", dict(dev=_DEV_7_0, keydev=_DEV_254_0, agno=1, bno=2, len=3,
                                     owner=2 ** 64 - 2),
     "dev 7:0 keydev 254:0 agno 1 bno 2 len 3 owner -2\n"),
    # arch/x86/kvm/trace.h TRACE_EVENT(kvm_inj_exception): the error code
    # through __print_symbolic(REC->error_code, { }), a table whose only
    # entry is the empty one the kernel's loop stops at: no name, 0x%lx
    ("kvm:kvm_inj_exception", dict(exception=14, has_error=1, error_code=5, reinjected=1),
     "#PF (0x5) [reinjected]"),
    ("kvm:kvm_inj_exception", dict(exception=13, has_error=0, error_code=5),
     "#GP"),
]


@pytest.fixture(scope="module")
def fake_catalogue():
    with Fake(profile=PROFILE, cpus=1, clock="virtual") as fk:
        for key in sorted({case[0] for case in CASES}):
            system, name = key.split(":")
            (fk.tracing / "events" / system / name / "enable").write_text("1")
        yield fk


def _trace_body(fk) -> str:
    """``trace`` without its ``#`` header."""
    lines = (fk.tracing / "trace").read_text().split("\n")
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines)


def _emitted_text(fk, key: str, fields: dict) -> str:
    """What the line *key* prints after ``name: `` (its own new lines
    kept, the one the tracer ends each entry with dropped)."""
    (fk.tracing / "trace").write_text("")
    assert fk.emit(key, cpu=0, pid=42, comm="case", **fields) == 1
    body = _trace_body(fk)
    head = f": {key.split(':')[1]}: "
    assert head in body, body
    return body.split(head, 1)[1][:-1]


@pytest.mark.parametrize("key,fields,expected", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_formerly_failing_events_print_as_their_trace_event(fake_catalogue, key, fields,
                                                            expected):
    assert _emitted_text(fake_catalogue, key, fields) == expected


# --- (c) the real kernel's lines ---------------------------------------------------------

DIFF_EVENTS = ["mmap:vm_unmapped_area", "writeback:sb_mark_inode_writeback",
               "writeback:sb_clear_inode_writeback", "writeback:writeback_dirty_inode",
               "writeback:writeback_dirty_inode_start", "writeback:writeback_mark_inode_dirty",
               "writeback:writeback_dirty_inode_enqueue", "writeback:writeback_single_inode",
               "writeback:writeback_single_inode_start", "jbd2:jbd2_run_stats",
               "jbd2:jbd2_checkpoint_stats"]
_AGE = re.compile(r" age=\d+ ")  # (jiffies - dirtied_when) / HZ at print time


def _real_instance(root: str) -> Path:
    inst = Path(root) / "instances" / f"pfcat{os.getpid()}"
    inst.mkdir()
    return inst


def _failing_mmap() -> None:
    """An mmap no gap holds: vm_unmapped_area records -ENOMEM."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    map_noreserve = 0x4000
    addr = libc.mmap(None, (1 << 47) - (1 << 33), 0,  # PROT_NONE
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | map_noreserve, -1, 0)
    assert addr in (None, 2 ** 64 - 1, -1)


def _write_files(where: Path) -> None:
    for i in range(3):
        path = where / f"f{i}"
        with open(path, "wb") as fp:
            fp.write(os.urandom(65536))
            fp.flush()
            os.fsync(fp.fileno())


def _journalled_writes(tmp_path: Path) -> None:
    """Writes on a loop-mounted ext4 with a journal (jbd2's events)."""
    if not shutil.which("mkfs.ext4"):
        return
    image, mnt = tmp_path / "ext4.img", tmp_path / "ext4"
    mnt.mkdir()
    with open(image, "wb") as fp:
        fp.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    if subprocess.run(["mount", "-o", "loop", str(image), str(mnt)],
                      capture_output=True).returncode:
        return
    try:
        _write_files(mnt)
        subprocess.run(["sync", "-f", str(mnt / "f0")], check=True)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _lines(inst: Path) -> list:
    text = (inst / "trace").read_text(errors="replace")
    return [m.groupdict() for m in map(HEADER.match, text.splitlines()) if m]


def _pair(text_lines: list, field_lines: list) -> list:
    """``(text line, fields line)`` of the same entry (CPU, time, name)."""
    key = lambda m: (m["cpu"], m["ts"], m["name"])  # noqa: E731
    seen = {}
    for m in field_lines:
        seen[key(m)] = None if key(m) in seen else m
    return [(t, seen[key(t)]) for t in text_lines if seen.get(key(t)) is not None]


def _field_values(ev, text: str) -> dict:
    """``name=0x.. (dec)`` / ``name=string`` of the ``fields`` option, in
    format order (kernel/trace/trace_output.c print_fields)."""
    names = [f[1].split("[")[0] for f in ev.fields]
    values, rest = {}, " " + text
    for i, (_ctype, _name, _off, size, signed) in enumerate(ev.fields):
        start = rest.index(f" {names[i]}=") + len(names[i]) + 2
        end = rest.index(f" {names[i + 1]}=", start) if i + 1 < len(names) else len(rest)
        raw = rest[start:end]
        m = re.fullmatch(r"(?:\S+ )?\((-?\d+)\)", raw)  # printed signed: the field's type back
        values[names[i]] = wrap(int(m[1]), size, signed) if m else raw
        rest = rest[end:]
    return values


def _same_format(ev, formats: dict) -> bool:
    """The real kernel's format of *ev* is the profile's (IDs aside)."""
    real = formats[ev.key]
    return re.sub(r"ID: \d+", "", real) == re.sub(r"ID: \d+", "", ev.text)


def _real_lines(root: str, tmp_path: Path) -> tuple[list, list, dict]:
    """The DIFF_EVENTS lines a scratch instance of the real tracefs at *root*
    recorded, as text and with the ``fields`` option, and their formats."""
    inst = _real_instance(root)
    try:
        for key in DIFF_EVENTS:
            system, name = key.split(":")
            (inst / "events" / system / name / "enable").write_text("1")
        _write_files(tmp_path)
        _failing_mmap()
        _journalled_writes(tmp_path)
        (inst / "tracing_on").write_text("0")
        text_lines = _lines(inst)
        (inst / "options" / "fields").write_text("1")
        field_lines = _lines(inst)
    finally:
        inst.rmdir()
    formats = {key: (Path(root) / "events" / key.replace(":", "/") / "format").read_text()
               for key in DIFF_EVENTS}
    return text_lines, field_lines, formats


def test_the_real_kernels_lines_print_the_same(tmp_path):
    """The kernel's own text of the events it recorded here equals what the
    fake prints for the same field values (read from the ``fields``
    option of the same buffer).  The real tracefs is mounted for the
    recording in a private mount namespace; it records in a scratch instance."""
    if not realtracefs.available():
        pytest.skip("needs root and a real tracefs")
    if not os.uname().release.startswith("6.18"):
        pytest.skip(f"the profile is 6.18's; this kernel is {os.uname().release}")
    text_lines, field_lines, formats = realtracefs.call(_real_lines, tmp_path)
    by_name = {key.split(":")[1]: FTRACE.events[key] for key in DIFF_EVENTS}
    pairs = [(by_name[t["name"]], t["text"], _field_values(by_name[t["name"]], f["text"]))
             for t, f in _pair(text_lines, field_lines)
             if t["name"] in by_name and _same_format(by_name[t["name"]], formats)]
    with Fake(profile=PROFILE, cpus=1, clock="virtual") as fk:
        for key in DIFF_EVENTS:
            system, name = key.split(":")
            (fk.tracing / "events" / system / name / "enable").write_text("1")
        for ev, _, values in pairs:
            fk.emit(ev.key, cpu=0, pid=1, comm="x", **values)
        mine = [HEADER.match(line)["text"] for line in _trace_body(fk).splitlines()]
    assert len(mine) == len(pairs)
    mismatches = [f"{ev.key}\n  kernel: {real}\n  fake:   {fake}"
                  for (ev, real, _), fake in zip(pairs, mine)
                  if _AGE.sub(" age=N ", fake) != _AGE.sub(" age=N ", real)]
    assert not mismatches, "\n".join(mismatches)
    compared = {ev.key for ev, _, _ in pairs}
    assert "mmap:vm_unmapped_area" in compared, compared
    assert any("err=-12" in real for _, real, _ in pairs)
    assert any(k.startswith("writeback:") for k in compared), compared
    if shutil.which("mkfs.ext4"):
        assert "jbd2:jbd2_run_stats" in compared, compared


# --- the enum table against the running kernel's BTF ---------------------------------------

BTF = Path("/sys/kernel/btf/vmlinux")
_BTF_SKIP = {1: 4, 3: 12, 4: 12, 5: 12, 13: 8, 14: 4, 15: 12, 17: 4}  # per type / per member
_BTF_KIND_ENUM, _BTF_KIND_ENUM64 = 6, 19


def _btf_enumerators(data: bytes) -> dict:
    """``name -> value`` of every enumerator in a BTF blob
    (include/uapi/linux/btf.h: header, types, strings)."""
    import struct

    hdr_len, type_off, type_len, str_off = struct.unpack_from("<IIII", data, 4)
    types = data[hdr_len + type_off:hdr_len + type_off + type_len]
    strings = data[hdr_len + str_off:]
    name = lambda off: strings[off:strings.index(b"\0", off)].decode()  # noqa: E731
    out, pos = {}, 0
    while pos < len(types):
        info = struct.unpack_from("<I", types, pos + 4)[0]
        kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        pos += 12
        if kind == _BTF_KIND_ENUM:
            for _ in range(vlen):
                off, val = struct.unpack_from("<Ii" if kflag else "<II", types, pos)
                out.setdefault(name(off), val)
                pos += 8
        elif kind == _BTF_KIND_ENUM64:
            for _ in range(vlen):
                off, lo, hi = struct.unpack_from("<III", types, pos)
                out.setdefault(name(off), lo | hi << 32)
                pos += 12
        elif kind in (4, 5, 13, 15):  # struct, union, func_proto, datasec: vlen entries
            pos += _BTF_SKIP[kind] * vlen
        else:
            pos += _BTF_SKIP.get(kind, 0)
    return out


def test_the_enum_table_holds_the_running_kernels_values():
    """Each constant of :data:`KERNEL_ENUMS` has the value the 6.18
    kernel's BTF gives its enumerator."""
    from fakedebugfs.engine.ftrace.kernel_enums import KERNEL_ENUMS

    if not BTF.exists() or not os.uname().release.startswith("6.18"):
        pytest.skip("needs the BTF of a running 6.18 kernel")
    known = _btf_enumerators(BTF.read_bytes())
    wrong = [(n, v, known.get(n)) for n, v in KERNEL_ENUMS if known.get(n) != v]
    assert not wrong, wrong
