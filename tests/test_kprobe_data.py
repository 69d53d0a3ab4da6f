"""Kernel probes' ``@SYM`` fetches of the kernel's data
(``fakedebugfs/engine/ftrace/kernel_data.py``): the profile's ``kallsyms``
lists the data symbols (a definition naming one is accepted, one naming
no symbol refused, a probe on one refused), the banners' bytes come from
its ``kernel_data``, and ``run`` shows its ``/proc/version``; compared
with the Debian 6.12 guest (ftracetest's ``kprobe_args_symbol.tc``).
"""

from __future__ import annotations

from support.kprobe_guest import FIXTURES, PROFILE, needs_kallsyms, run

pytestmark = needs_kallsyms


def test_data_symbols_as_the_guest():
    """fixtures/kprobes/data-symbols.sh: the banners and ``jiffies`` in
    ``/proc/kallsyms``, the profile's ``/proc/version``; ``@SYM`` and
    ``@SYM+OFFS`` read as u/s/x numbers of each size, a bitfield, arrays,
    strings (the banner's newline included), ``symbol`` and ``symstr`` of
    bytes that are no address; ``@no_such_symbol`` and a probe on a data
    symbol refused with the guest's ``error_log``: the guest's output."""
    got = run((FIXTURES / "data-symbols.sh").read_text())
    guest = (FIXTURES / "data-symbols.debian-6.12.out").read_text()
    assert "a1=7598542776403260197" in guest and "D linux_proc_banner" in guest
    assert got == guest


def test_proc_version_is_the_profiles():
    """``/proc/version`` under ``run`` is the profile's kernel's where the
    profile has one, the host's otherwise (linux-6.18: this host's own)."""
    assert run("cat /proc/version") == (PROFILE / "proc_version").read_text()
    host = PROFILE.parent / "linux-6.18"
    if not (host / "proc_version").is_file():
        with open("/proc/version") as fp:
            assert run("cat /proc/version", host) == fp.read()


def test_a_dereference_inside_a_dereference_loads_the_pointer():
    """fixtures/kprobes/nested-deref.sh: ``+0(+0(%di))`` reads the pointer
    stored at ``%di`` (the name's bytes, no address) and faults there, as
    the guest; ``+0(%di)`` and ``+1(%di)`` read the name itself."""
    got = run((FIXTURES / "nested-deref.sh").read_text())
    guest = (FIXTURES / "nested-deref.debian-6.12.out").read_text()
    assert "a=(fault) c=7894629" in guest
    assert got == guest
