"""Event filter field modifiers (``.function``, ``.ustring``) as 6.18's
``parse_pred`` takes them, through a mounted fake and its ``filter`` and
``error_log`` files.

The expected texts (filter file and caret positions) are what this machine's
6.18 kernel wrote for the same filters on ``kmem_cache_free``/``kmalloc`` in a
scratch instance; every other modifier (``.hex``, ``.sym``, ``.log2``,
``.execname``...) belongs to hist triggers and is "Invalid operator" in a
filter, where the field name ends.
"""

from __future__ import annotations

import errno
import re

import pytest

from fakedebugfs import Fake
from fakedebugfs.engine.core.kallsyms import PROC_FILE, Kallsyms


def symbols(fk) -> Kallsyms:
    """The fake's symbol table as its /proc/kallsyms shows it: the
    profile kernel's (a distro kernel's ``kallsyms``), or the fake's own."""
    table = Kallsyms(())
    assert table.load_text((fk.root / PROC_FILE).read_text())
    return table


def write_errno(path, text: str):
    try:
        with open(path, "w") as fp:
            fp.write(text)
    except OSError as err:
        return err.errno
    return None


def trace_lines(fk) -> list[str]:
    return [line for line in (fk.tracing / "trace").read_text().splitlines()
            if not line.startswith("#")]


@pytest.mark.parametrize("profile", ["linux-6.18", "debian-6.12"])
def test_function_modifier_matches_the_whole_function(profile):
    """``call_site.function == NAME`` (and ``== 0xADDR``, ``!=``) keeps
    the entries whose call site lies anywhere in the function's body, as
    ``filter_pred_function`` tests ``start <= addr < start + size``: the
    function as the profile's symbol table places it (the fake's own
    table, or the distro kernel's ``kallsyms``)."""
    with Fake(clock="virtual", profile=profile) as fk:
        ev = fk.tracing / "events/kmem/kmem_cache_free"
        (ev / "filter").write_text("call_site.function == skb_release_data")
        assert (ev / "filter").read_text() == "call_site.function == skb_release_data\n"
        (ev / "enable").write_text("1")
        addr = symbols(fk).address
        sites = [addr("skb_release_data"), addr("skb_release_data", 0x40), addr("kvfree"),
                 addr("kfree_skbmem"), 0x10]
        for site in sites:
            fk.emit("kmem:kmem_cache_free", call_site=site, ptr=0x1000, name="skbuff_head_cache")
        lines = trace_lines(fk)
        assert len(lines) == 2
        assert all("call_site=skb_release_data+" in line for line in lines)
        (ev / "filter").write_text(f"call_site.function != 0x{addr('skb_release_data', 8):x}")
        (fk.tracing / "trace").write_text("")
        for site in sites:
            fk.emit("kmem:kmem_cache_free", call_site=site, ptr=0x1000, name="skbuff_head_cache")
        lines = trace_lines(fk)
        assert len(lines) == 3 and not any("skb_release_data" in line for line in lines)


@pytest.mark.parametrize("text,pos,message", [
    ("call_site.hex == 1", 10, "Invalid operator"),
    ("call_site.sym == 1", 10, "Invalid operator"),
    ("call_site.function > kvfree", 22, "Invalid operator"),
    ("call_site.function == nosuchfn", 31, "Function not found"),
    ("call_site.function == 0x10", 27, "Function not found"),
    ("(call_site.function == kvfree)", 31, "Function not found"),  # ')' is read as the name's
    ("call_site.function.ustring == 1", 19, "Invalid operator"),
    ("call_site.function == 0xzz", 27, "Invalid value (did you forget quotes)?"),
    ("call_site.function ==", 22, "Function not found"),
])
def test_modifier_errors_as_the_kernel_writes_them(text, pos, message):
    """A refused filter: EINVAL, the filter file shows the text, a caret
    (at the error's position, at most the text's length) and
    ``parse_error:``, and ``error_log`` has the entry with the caret at
    the position as reported (6.18 does not clamp that one)."""
    with Fake() as fk:
        f = fk.tracing / "events/kmem/kmem_cache_free/filter"
        assert write_errno(f, text + "\n") == errno.EINVAL
        caret = min(pos, len(text))
        assert f.read_text() == f"{text}\n{'^'.rjust(caret + 1)}\nparse_error: {message}\n\n"
        log = (fk.tracing / "error_log").read_text().splitlines()
        assert re.fullmatch(rf"\[ *\d+\.\d{{6}}\] event filter parse error: error: "
                            rf"{re.escape(message)}", log[-3])
        assert log[-2] == f"  Command: {text}"
        assert log[-1] == " " * (11 + pos) + "^"


def test_function_needs_a_long_field_and_ustring_is_accepted():
    """``.function`` on a 4-byte field is an illegal operation; ``.ustring``
    is taken on any field (a number then compares as usual)."""
    with Fake() as fk:
        kmalloc = fk.tracing / "events/kmem/kmalloc/filter"
        assert write_errno(kmalloc, "node.function == kvfree") == errno.EINVAL
        assert kmalloc.read_text().endswith("^\nparse_error: Illegal operation for field type\n\n")
        for ok in ("ptr.function == kvfree", "gfp_flags.function == kvfree",
                   "call_site.ustring == 1", "call_site.function==kvfree && ptr == 0"):
            kmalloc.write_text(ok)
            assert kmalloc.read_text() == ok + "\n"
