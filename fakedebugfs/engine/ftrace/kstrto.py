"""The kernel's integer parsing of control-file writes (lib/kstrtox.c).

``kstrtoull(s, base)``: an optional ``+``, the radix prefix for base 0 or 16
(``_parse_integer_fixup_radix``), digits until the first that is not one of
the base, ERANGE if the value passed 64 bits (checked before anything
else), EINVAL if no digit was read or anything but one newline follows.
``kstrtoul_from_user`` looks only at the first 66 bytes of a write
(``char buf[1 + 64 + 1 + 1]``) and stops at a NUL.  Works on bytes of any
length in linear time (no Python int of a huge string is ever built).
"""

from __future__ import annotations

import errno

from fakedebugfs.engine.core.errors import kernel_error

ULLONG_MAX = (1 << 64) - 1
FROM_USER_MAX = 66  # sizeof(buf) - 1 in kstrto_from_user for 64-bit types


_fail = kernel_error


def fixup_radix(s: bytes, base: int) -> tuple[bytes, int]:
    """``_parse_integer_fixup_radix``."""
    if base == 0:
        if s[:1] == b"0":
            base = 16 if s[1:2].lower() == b"x" and _isxdigit(s[2:3]) else 8
        else:
            base = 10
    if base == 16 and s[:2].lower() == b"0x":
        s = s[2:]
    return s, base


def _isxdigit(c: bytes) -> bool:
    return len(c) == 1 and c in b"0123456789abcdefABCDEF"


def parse_integer(s: bytes, base: int) -> tuple[int, int, bool]:
    """``_parse_integer_limit``: (value mod 2**64, digits read, overflowed)."""
    value, n, overflow = 0, 0, False
    for ch in s:
        if 0x30 <= ch <= 0x39:
            digit = ch - 0x30
        elif 0x61 <= (ch | 0x20) <= 0x66:
            digit = (ch | 0x20) - 0x61 + 10
        else:
            break
        if digit >= base:
            break
        value = value * base + digit
        if value > ULLONG_MAX:
            overflow = True
            value &= ULLONG_MAX
        n += 1
    return value, n, overflow


def kstrtoull(s: bytes, base: int = 10) -> int:
    """``kstrtoull``: EINVAL/ERANGE as the kernel (see the module)."""
    s = s.split(b"\0", 1)[0]
    if s[:1] == b"+":
        s = s[1:]
    s, base = fixup_radix(s, base)
    value, n, overflow = parse_integer(s, base)
    if n == 0:
        raise _fail(errno.EINVAL)
    if overflow:
        raise _fail(errno.ERANGE)
    rest = s[n:]
    if rest[:1] == b"\n":
        rest = rest[1:]
    if rest:
        raise _fail(errno.EINVAL)
    return value


def kstrtoul_from_user(data: bytes, base: int = 10) -> int:
    """``kstrtoul_from_user``: :func:`kstrtoull` of the first 66 bytes."""
    return kstrtoull(data[:FROM_USER_MAX], base)


def kstrtoint(s: bytes, base: int = 10) -> int:
    """``kstrtoint``: a signed int (``-`` allowed), ERANGE outside 32 bits."""
    s = s.split(b"\0", 1)[0]
    neg = s[:1] == b"-"
    value = kstrtoull(s[1:] if neg else s, base)
    if neg:
        if value > 1 << 31:
            raise _fail(errno.ERANGE)
        return -value
    if value >= 1 << 31:
        raise _fail(errno.ERANGE)
    return value


__all__ = ["kstrtoull", "kstrtoul_from_user", "kstrtoint", "parse_integer", "ULLONG_MAX"]
