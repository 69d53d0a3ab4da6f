"""Why the guest leaves a row unresolved: read in each row's .tc file and
its log in the guest (build/oracle/run/debian-6.12-conf/work/conformance/),
written here as data for docs/conformance.md (report.py prints them
under the suite's table; a guest row unresolved and not listed here is
printed as not explained, so a new one shows).

The sample modules: Debian builds its kernel without ``CONFIG_SAMPLES``
(the package's config: ``# CONFIG_SAMPLES is not set``), so the
``samples/`` modules these tests load do not exist for it; and the
guest's userland is this host's root, shared read-only, which has no
``modprobe``/``rmmod`` (kmod) and no modules of the 6.12 kernel.
"""

from __future__ import annotations

def _module(mod: str, cfg: str, why: str) -> str:
    return (f"loads the `{mod}` sample module (`CONFIG_{cfg}=m`) {why}; Debian's kernel does "
            "not build it (no `CONFIG_SAMPLES`), and the guest has no `modprobe` either")


# (suite, row) -> why the guest's kernel leaves it unresolved
GUEST_UNRESOLVED = {
    ("ftracetest", "direct/ftrace-direct.tc"):
        _module("ftrace-direct", "SAMPLE_FTRACE_DIRECT", "to attach a direct trampoline "
                "beside the function tracer"),
    ("ftracetest", "direct/kprobe-direct.tc"):
        _module("ftrace-direct", "SAMPLE_FTRACE_DIRECT", "to attach a direct trampoline "
                "beside a kprobe"),
    ("ftracetest", "dynevent/add_remove_tprobe_module.tc"):
        _module("trace-events-sample", "SAMPLE_TRACE_EVENTS", "to put a tracepoint probe on "
                "a module's tracepoint"),
    ("ftracetest", "event/trace_printk.tc"):
        _module("trace-printk", "SAMPLE_TRACE_PRINTK", "and reads back its `trace_printk()` "
                "lines"),
    ("ftracetest", "ftrace/func_mod_trace.tc"):
        "its first check (`:mod:` of a module not loaded) passes, then it "
        + _module("trace-printk", "SAMPLE_TRACE_PRINTK", "to filter a loaded module's "
                  "functions"),
    ("ftracetest", "kprobe/kprobe_module.tc"):
        _module("trace-printk", "SAMPLE_TRACE_PRINTK", "to put kprobes in a module"),
    ("ftracetest", "selftest/bashisms.tc"):
        "checks ftracetest's own scripts with `checkbashisms` (Debian's `devscripts`), "
        "which is not installed: a test of the suite, not of the kernel",
}

__all__ = ["GUEST_UNRESOLVED"]
