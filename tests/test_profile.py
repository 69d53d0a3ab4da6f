"""Kernel profiles and the whole catalogue (issue 11): what real tools see.

* ``fakedebugfs capture-profile`` on this machine reproduces the shipped
  profile, file for file and byte for byte;
* ``trace-cmd list -e``, ``perf list`` and ``bpftrace -l`` under
  ``fakedebugfs run`` print what they print against this machine's tracefs;
* ``--profile DIR`` serves another kernel's catalogue;
* any event of the profile can be enabled, injected and read back; the
  text of events the real kernel wrote (in a scratch instance of the real
  tracefs) is the text the fake prints for the same payload bytes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, read_chunks, run_cli
from fakedebugfs.engine.core.profile_files import COMPRESSED, SUFFIX, read_profile_file
from fakedebugfs.engine.core.text_insns import TextInsns
from fakedebugfs.engine.ftrace.profile import RECORDED, SHIPPED_PROFILES, Profile, shipped_profiles
from support import realtracefs

ROOT = os.geteuid() == 0
REAL = realtracefs.available()  # mounted for each use, in a private mount namespace
# the profile of this machine's kernel: what these tests compare with its tracefs
HOST_PROFILE = SHIPPED_PROFILES / "linux-6.18"
SAME_KERNEL = REAL and Profile(HOST_PROFILE).release == os.uname().release
needs_real = pytest.mark.skipif(not SAME_KERNEL, reason="needs root and this machine's tracefs "
                                "(the kernel of the linux-6.18 profile)")


def fake_run(*cmd, timeout=60, options=()) -> subprocess.CompletedProcess:
    """``fakedebugfs run --profile linux-6.18 [options] -- cmd``: the
    command sees a fake of this machine's kernel at /sys/kernel/tracing."""
    return subprocess.run([FAKEDEBUGFS, "run", "--profile", str(HOST_PROFILE), *options, "--", *cmd],
                          capture_output=True, text=True, errors="replace", timeout=timeout)


def host(*cmd, timeout=60) -> subprocess.CompletedProcess:
    """*cmd* against this machine's tracefs (mounted for it at
    /sys/kernel/tracing in a private mount namespace)."""
    return realtracefs.run(list(cmd), timeout=timeout)


@needs_real
def test_capture_profile_reproduces_the_shipped_profile(tmp_path):
    out = tmp_path / "prof"
    res = host(FAKEDEBUGFS, "capture-profile", out, "-q")
    assert res.returncode == 0, res.stderr
    shipped = sorted(p.name for p in HOST_PROFILE.iterdir()
                     if p.name.removesuffix(SUFFIX) not in RECORDED)
    # every shipped file but those a capture cannot make (RECORDED), and
    # only kallsyms.xz more: the shipped profile leaves it out (without it
    # the fake lays out its own table of functions)
    assert sorted(p.name for p in out.iterdir() if p.name != "kallsyms.xz") == shipped
    for name in shipped:
        assert (out / name).read_bytes() == (HOST_PROFILE / name).read_bytes(), name


@pytest.mark.parametrize("name", shipped_profiles())
def test_profile_is_small_plain_text(name):
    """One file per kind of data, as a user commits it: text (the formats,
    the lists, the README a diff shows), except the big tables of a
    distro kernel (``kallsyms``, the BTF blob, the functions' addresses,
    the text's instruction lengths), which are ``NAME.xz``.  A shipped
    profile stays below 6 MB (debian-6.12: 5.3 MB, 1.1 of it
    ``text_insns``; linux-6.18's 2,305 event formats: 2.1 MB)."""
    files = list((SHIPPED_PROFILES / name).iterdir())
    assert sum(f.stat().st_size for f in files) < 6 << 20
    for f in files:
        if f.name.endswith(SUFFIX):
            assert f.name.removesuffix(SUFFIX) in COMPRESSED, f.name
            data = read_profile_file(f)  # an xz stream
            if f.name == "btf.xz":
                assert data[:2] == b"\x9f\xeb", "not BTF"  # BTF_MAGIC 0xeb9f, little-endian
            elif f.name == "text_insns.xz":
                TextInsns(data)  # its construct layout (engine/core/text_insns.py)
            else:
                data.decode("utf-8")
        else:
            assert f.name not in COMPRESSED, f"{f.name} ships plain"
            f.read_text(encoding="utf-8")


@needs_real
@pytest.mark.skipif(shutil.which("trace-cmd") is None, reason="trace-cmd is not installed")
def test_trace_cmd_list_e_is_the_real_list():
    fake = fake_run("trace-cmd", "list", "-e")
    real = host("trace-cmd", "list", "-e")
    assert fake.returncode == 0, fake.stderr
    assert len(fake.stdout.splitlines()) > 2000
    assert fake.stdout == real.stdout


@needs_real
@pytest.mark.skipif(shutil.which("perf") is None or shutil.which("bpftrace") is None,
                    reason="perf or bpftrace is not installed")
def test_perf_list_and_bpftrace_l_list_the_real_tracepoints():
    script = ("perf list --raw-dump tracepoint; echo ===; "
              "bpftrace -l 'tracepoint:*'; echo ===; "
              "bpftrace -lv tracepoint:syscalls:sys_enter_openat")
    fake = fake_run("sh", "-c", script)
    real = host("sh", "-c", script)
    assert fake.returncode == 0, fake.stderr
    perf, bpf, args = fake.stdout.split("===\n")
    assert "sched:sched_wakeup" in perf.split() and "tracepoint:irq:softirq_entry" in bpf
    assert "const char * filename" in args
    assert fake.stdout == real.stdout


def _profile_copy(tmp_path) -> Path:
    """A profile of another kernel: only sched and a changed irq event."""
    prof = Profile()
    out = tmp_path / "other"
    out.mkdir()
    for name in ("available_tracers", "trace_clock", "trace_options", "README",
                 "header_page", "header_event", "modes"):
        (out / name).write_text(prof.files[name])
    (out / "uname").write_text("5.10.0-other\n")
    keep = [k for k in prof.available_events() if k.startswith("sched:")]
    text = prof.formats["irq:irq_handler_entry"].replace("int irq;", "unsigned int irq;")
    texts = {k: prof.formats[k] for k in keep} | {"irq:irq_handler_entry": text}
    (out / "formats").write_text("".join(f"### {k.replace(':', '/')}\n{t}"
                                         for k, t in sorted(texts.items())))
    (out / "available_events").write_text("".join(k + "\n" for k in keep + ["irq:irq_handler_entry"]))
    return out


def test_profile_option_serves_another_kernel(fake, tmp_path):
    other = _profile_copy(tmp_path)
    mnt = fake("--profile", other, "--workload", "none")
    tracing = mnt / "tracing"
    listed = (tracing / "available_events").read_text().split()
    assert "irq:irq_handler_entry" in listed and "sched:sched_switch" in listed
    assert not [k for k in listed if k.split(":")[0] not in ("sched", "irq")]
    assert sorted(os.listdir(tracing / "events" / "irq")) == ["enable", "filter",
                                                             "irq_handler_entry"]
    fmt = (tracing / "events/irq/irq_handler_entry/format").read_text()
    assert "field:unsigned int irq;" in fmt


def test_profile_option_refuses_a_directory_without_formats(tmp_path):
    res = run_cli("mount", tmp_path / "m", "--profile", tmp_path, check=False)
    assert res.returncode == 2 and "not a kernel profile" in res.stderr


def test_every_event_has_its_files_and_any_can_be_enabled(fake):
    mnt = fake("--workload", "none")
    tracing = mnt / "tracing"
    prof = Profile()
    keys = prof.available_events()
    listed = (tracing / "available_events").read_text().split()
    assert listed == keys
    # an event's files as the profile's kernel has them (sched_switch's in its modes)
    files = sorted(p.rsplit("/", 1)[1] for p in prof.modes()
                   if p.startswith("events/sched/sched_switch/"))
    assert {"enable", "filter", "format", "id", "trigger"} <= set(files)
    for key in (keys[0], keys[len(keys) // 2], keys[-1], "syscalls:sys_enter_openat"):
        edir = tracing / "events" / key.replace(":", "/")
        assert sorted(os.listdir(edir)) == files
        assert (edir / "format").read_text() == prof.formats[key]
        assert int((edir / "id").read_text()) == prof.ids[key]
        (edir / "enable").write_text("1")
        assert (edir / "enable").read_text() == "1\n"
    assert len((tracing / "set_event").read_text().split()) == 4


INJECTED = (
    # event, fields, the text the 6.18 kernel prints for them
    ("irq:irq_handler_entry", ["irq=5", "name=eth0"], "irq=5 name=eth0"),
    ("irq:softirq_entry", ["vec=3"], "vec=3 [action=NET_RX]"),
    ("sched:sched_wakeup", ["comm=bash", "pid=77", "prio=120", "target_cpu=1"],
     "comm=bash pid=77 prio=120 target_cpu=001"),
    ("signal:signal_generate", ["sig=9", "errno=0", "code=0", "comm=bash", "pid=77",
                                "group=1", "result=0"],
     "sig=9 errno=0 code=0 comm=bash pid=77 grp=1 res=0"),
    ("block:block_rq_issue", ["dev=8388608", "sector=2048", "nr_sector=8", "bytes=4096",
                              "ioprio=0", "rwbs=WS", "comm=kworker/0:1", "cmd="],
     "8,0 WS 4096 () 2048 + 8 none,0,0 [kworker/0:1]"),
    ("syscalls:sys_enter_openat", ["__syscall_nr=257", "dfd=0xffffff9c",
                                   "filename=0x7ffd1000", "flags=0x80000", "mode=0"],
     # print_syscall_enter, not the print fmt (trace_syscalls.c)
     "sys_openat(dfd: 0xffffff9c, filename: 0x7ffd1000, flags: 0x80000, mode: 0)"),
    ("syscalls:sys_exit_openat", ["__syscall_nr=257", "ret=3"], "sys_openat -> 0x3"),
)
TAIL = re.compile(r"^\s*(?P<task>\S+)\s+\[\d+\]\s+\S+\s+[\d.]+: (?P<tail>.*)$")


def test_injected_events_of_several_systems_print_as_the_kernel(fake):
    mnt = fake("--profile", HOST_PROFILE, "--workload", "none")
    tracing = mnt / "tracing"
    for key, fields, _ in INJECTED:
        (tracing / "events" / key.replace(":", "/") / "enable").write_text("1")
        run_cli("emit", mnt, key, *fields, "--pid", "42", "--comm", "inj")
    lines = [TAIL.match(ln) for ln in (tracing / "trace").read_text().splitlines()
             if not ln.startswith("#")]
    assert [m["task"] for m in lines] == ["inj-42"] * len(INJECTED)
    assert [m["tail"] for m in lines] == [
        want if key.startswith("syscalls:") else f"{key.split(':')[1]}: {want}"
        for key, _, want in INJECTED]


# --- the real kernel's text for the same payload -------------------------------

REAL_EVENTS = ("sched:sched_waking", "sched:sched_wakeup", "sched:sched_stat_runtime",
               "sched:sched_process_exec", "sched:sched_process_fork",
               "syscalls:sys_enter_openat", "syscalls:sys_exit_openat", "irq:softirq_entry",
               "irq:softirq_raise", "signal:signal_generate", "raw_syscalls:sys_exit")
TEXT_LINE = re.compile(r"^\s*.*?-\d+\s+\[(\d+)\]\s+\S+\s+[\d.]+: (.*)$")


def _real_instance_capture(root: str, name: str) -> tuple[dict, dict]:
    """Enable REAL_EVENTS in a scratch instance of the real tracefs, make
    some activity, then read each CPU's ``trace`` text (not consuming) and
    its ``trace_pipe_raw`` pages.  The instance is removed."""
    inst = os.path.join(root, "instances", name)
    os.mkdir(inst)
    try:
        with open(f"{inst}/buffer_size_kb", "w") as fp:
            fp.write("64")
        for key in REAL_EVENTS:
            with open(f"{inst}/events/{key.replace(':', '/')}/enable", "w") as fp:
                fp.write("1")
        for _ in range(3):
            subprocess.run(["sh", "-c", "cat /etc/hostname >/dev/null; kill -0 $$"])
        with open(f"{inst}/tracing_on", "w") as fp:
            fp.write("0")
        texts, pages = {}, {}
        for cpu in range(os.cpu_count() or 1):
            d = f"{inst}/per_cpu/cpu{cpu}"
            if not os.path.isdir(d):
                continue
            with open(f"{d}/trace") as fp:
                texts[cpu] = [m[2] for m in map(TEXT_LINE.match, fp) if m]
            pages[cpu] = b"".join(read_chunks(f"{d}/trace_pipe_raw"))
        return texts, pages
    finally:
        for key in REAL_EVENTS:
            try:
                with open(f"{inst}/events/{key.replace(':', '/')}/enable", "w") as fp:
                    fp.write("0")
            except OSError:
                pass
        for _ in range(50):
            try:
                os.rmdir(inst)
                break
            except OSError:
                time.sleep(0.1)


@needs_real
def test_generic_events_print_what_the_real_kernel_printed():
    from fakedebugfs.engine.core.kallsyms import Kallsyms
    from fakedebugfs.engine.ftrace.output import OutputContext
    from fakedebugfs.engine.ftrace.registry import EventRegistry, load_profile
    from fakedebugfs.engine.ftrace.tracer import TRACE_OPTIONS
    from fakedebugfs.engine.ftrace.formatfile import (DEFAULT_HEADER_EVENT, parse_header_event,
        parse_header_page)
    from fakedebugfs.sources.replay.ringpages import PageDecoder

    prof = load_profile(str(HOST_PROFILE))
    events = EventRegistry(prof)  # every event generic, from its format text
    texts, pages = realtracefs.call(_real_instance_capture, f"fdfs_profile_{os.getpid()}")
    dec = PageDecoder("little", parse_header_page(prof.files["header_page"]),
                      parse_header_event(prof.files["header_event"] or DEFAULT_HEADER_EVENT),
                      4096)
    out = OutputContext(Kallsyms(), dict(TRACE_OPTIONS), 0)
    compared = set()
    for cpu, data in pages.items():
        ours = []
        for pos in range(0, len(data) - len(data) % 4096, 4096):
            for _, start, end in dec.records(data, dec.header(data, pos)):
                payload = data[start:end]
                ev = events[events.ids[int.from_bytes(payload[:2], "little")]]
                text = ev.show(ev.decode(payload), out)
                ours.append(text if getattr(ev, "bare", False) else f"{ev.name}: {text}")
                compared.add(ev.name)
        assert ours == texts[cpu]
    assert len(compared) >= 4, compared


# --- real programs that look events up in tracefs ----------------------------------

def _tool(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}")
                                       if os.path.exists(p)), None)


PROGRAMS = (
    ("perf sched record", "perf", "perf sched record -o {tmp}/sched.data -- sleep 1"),
    ("perf timechart record", "perf", "cd {tmp} && perf timechart record -- sleep 1"),
    ("bpftrace sys_enter_openat", "bpftrace",
     "bpftrace -e 'tracepoint:syscalls:sys_enter_openat {{ @[comm] = count(); }}' "
     "-c '/usr/bin/sleep 1'"),
    ("libbpf-tools execsnoop", "execsnoop",
     "{execsnoop} > {tmp}/exec.txt 2>&1 & p=$!; sleep 2; kill -INT $p; wait $p"),
)


@pytest.mark.skipif(not ROOT, reason="fakedebugfs run needs root")
@pytest.mark.parametrize("label,tool,script", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_program_starts_and_exits_0_under_run(tmp_path, label, tool, script):
    """They find their tracepoints (format, id) in the fake's tracefs, then
    trace the real kernel as they would on it."""
    path = _tool(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian: linux-perf, bpftrace, libbpf-tools)")
    res = fake_run("sh", "-c", script.format(tmp=tmp_path, execsnoop=path), timeout=120)
    assert res.returncode == 0, f"{label}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
