"""Where a ``trace_marker`` write's entry says it came from: the ``ip`` of
its ``ftrace:print`` entry, which ``tracing_mark_write`` fills with
``_THIS_IP_`` (an address inside itself).  ``raw`` prints it in hex
(``# ffffffff8123600f hi`` on the Debian 6.12 guest), ``trace`` as its
symbol (``tracing_mark_write``, ``+0xdf/0x280`` with ``sym-offset``,
`` <ffffffff8123600f>`` with ``sym-addr``).

The address is the compiled kernel's, so it is profile data: a profile's
``marker_ip`` file holds it as the kernel printed it with ``sym-offset``
and ``sym-addr`` (``tracing_mark_write+0xdf/0x280 <ffffffff8123600f>``),
recorded in the oracle's capture (oracle/marker_ip.py).  A profile with
its kernel's ``kallsyms`` (captured in the same boot) uses the address as
it is; the fake's own symbol table gets the function placed at that
address (or, where its own functions are, after them).  Without the
file the entry carries ip 0 and prints as ``tracing_mark_write``, as the
fake always did.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

MARKER_FUNCTION = "tracing_mark_write"
_SITE = re.compile(r"([\w.$]+)\+0x([0-9a-f]+)/0x([0-9a-f]+) <([0-9a-f]+)>")


class MarkerSite(NamedTuple):
    """The marker's ip and how ``%ps`` / ``%pS`` print it."""
    addr: int
    name: str
    offset: int
    size: int

    @property
    def sym_offset(self) -> str:
        return f"{self.name}+0x{self.offset:x}/0x{self.size:x}"


def parse(text: str) -> MarkerSite:
    """A ``marker_ip`` file's site; ValueError if it is not one."""
    m = _SITE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"marker_ip: not 'symbol+0xoff/0xsize <address>': {text.strip()!r}")
    return MarkerSite(int(m[4], 16), m[1], int(m[2], 16), int(m[3], 16))


def marker_site(top) -> Optional[MarkerSite]:
    """The site of *top*'s (the Ftrace's) profile, worked out once: None
    without a ``marker_ip`` file."""
    try:
        return top.__dict__["_marker_site"]
    except KeyError:
        pass
    profile = getattr(top, "profile", None)
    text = profile.files.get("marker_ip") if profile is not None else None
    site = _place(parse(text), top.engine.kallsyms) if text else None
    top.__dict__["_marker_site"] = site
    return site


def _place(site: MarkerSite, kallsyms) -> Optional[MarkerSite]:
    """The site in the engine's table: the profile's own kallsyms has the
    function where the file says (it is not read for it); the fake's
    table gets it there, or after its own functions when that address is
    taken (None: a replayed recording's table, which lacks it)."""
    if getattr(kallsyms, "path", None) is not None:  # a ProfileKallsyms of the same boot
        return site
    start = site.addr - site.offset
    if not kallsyms.has(site.name) and kallsyms.text is None:
        if start >= kallsyms.end:
            kallsyms.names.append(site.name)
            kallsyms.addrs.append(start)
            kallsyms.sizes.append(site.size)
            kallsyms.end = start + ((site.size + 15) & ~15)
        else:
            kallsyms.extend([(site.name, site.size)])
    if not kallsyms.has(site.name):
        return None
    return site._replace(addr=kallsyms.address(site.name, site.offset))


def marker_ip(top) -> int:
    """The ip a marker entry carries (0 without a ``marker_ip`` file)."""
    site = marker_site(top)
    return site.addr if site is not None else 0


__all__ = ["MarkerSite", "MARKER_FUNCTION", "marker_ip", "marker_site", "parse"]
