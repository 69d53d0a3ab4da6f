"""C types of ``TRACE_EVENT()`` fields as x86_64 lays them out, and the
kernel's character classes (lib/ctype.c) where it parses what is written.

Character classes: the kernel's ``_ctype`` table is ISO 8859-1, so byte
0xA0 (no-break space) is a space to ``isspace`` (``_S|_SP``) and 0xC0-0xFF
(but 0xD7 and 0xF7) are letters; bytes 0x80-0x9F are control characters,
not spaces.  :func:`isspace`, :func:`skip_spaces` and :func:`strstrip` are
the kernel's, over the bytes written: every tracefs write that the kernel
parses with them (``trace_get_user``'s words, ``strstrip``/``strim`` of
``current_tracer``, ``trace_clock``, ``trace_options``, ``trigger``,
``filter``, ``bitmap_parse``'s separators) uses these.

C types:

``sizeof``, ``__alignof__`` and ``is_signed_type()`` of the types the
kernel's event fields use, on x86_64 (LP64) as the 6.18 kernel is built:
with ``-funsigned-char`` (since 6.2 on every architecture), so a plain
``char`` prints ``signed:0`` in ``format`` files, as this machine's real
tracefs shows for every ``char`` field.  Pointers are 8 bytes, unsigned.
``enum`` types are taken as 4 unsigned bytes (the common case: enums with
no negative value; packed enums cannot be told from their name).
"""

from __future__ import annotations

from typing import NamedTuple, Optional


# --- lib/ctype.c -----------------------------------------------------------------

SPACES = b" \t\n\v\f\r\xa0"  # the bytes _ctype marks _S: isspace()
_SPACE_SET = frozenset(SPACES)
TEXT_SPACES = " \t\n\v\f\r\udca0"  # the same in text decoded with errors="surrogateescape"


def isspace(c: int) -> bool:
    """``isspace`` of one byte (lib/ctype.c: 0xA0 is a space)."""
    return c in _SPACE_SET


def isalnum(c: int) -> bool:
    """``isalnum`` of one byte (lib/ctype.c: Latin-1 letters are letters)."""
    return (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122
            or (192 <= c <= 255 and c not in (215, 247)))


def skip_spaces(data: bytes) -> bytes:
    """``skip_spaces``: *data* from its first byte that is not a space."""
    return data.lstrip(SPACES)


def strstrip(data: bytes) -> bytes:
    """``strstrip``/``strim``: trailing spaces cut, then leading ones skipped."""
    return data.rstrip(SPACES).lstrip(SPACES)


# --- C types ----------------------------------------------------------------------

class CType(NamedTuple):
    """``sizeof``, ``__alignof__`` (``ALIGN_STRUCTFIELD``), ``is_signed_type``."""

    size: int
    align: int
    signed: int


def _t(size: int, signed: int) -> CType:
    return CType(size, size, signed)


_INTEGERS = {
    "char": _t(1, 0), "signed char": _t(1, 1), "unsigned char": _t(1, 0),
    "short": _t(2, 1), "short int": _t(2, 1), "signed short": _t(2, 1),
    "signed short int": _t(2, 1), "unsigned short": _t(2, 0), "unsigned short int": _t(2, 0),
    "int": _t(4, 1), "signed": _t(4, 1), "signed int": _t(4, 1),
    "unsigned": _t(4, 0), "unsigned int": _t(4, 0),
    "long": _t(8, 1), "long int": _t(8, 1), "signed long": _t(8, 1), "signed long int": _t(8, 1),
    "unsigned long": _t(8, 0), "unsigned long int": _t(8, 0),
    "long long": _t(8, 1), "long long int": _t(8, 1), "signed long long": _t(8, 1),
    "signed long long int": _t(8, 1), "unsigned long long": _t(8, 0),
    "unsigned long long int": _t(8, 0),
    "bool": _t(1, 0), "_Bool": _t(1, 0),
}

# typedefs of include/linux/types.h, uapi/asm-generic/int-ll64.h, posix_types
_TYPEDEFS = {
    **{f"{p}{n}": _t(n // 8, s) for n in (8, 16, 32, 64)
       for p, s in (("u", 0), ("s", 1), ("__u", 0), ("__s", 1))},
    **{f"uint{n}_t": _t(n // 8, 0) for n in (8, 16, 32, 64)},
    **{f"u_int{n}_t": _t(n // 8, 0) for n in (8, 16, 32, 64)},
    **{f"int{n}_t": _t(n // 8, 1) for n in (8, 16, 32, 64)},
    **{f"__{e}{n}": _t(n // 8, 0) for n in (16, 32, 64) for e in ("le", "be")},
    "uint": _t(4, 0), "ulong": _t(8, 0), "ushort": _t(2, 0), "unchar": _t(1, 0),
    "pid_t": _t(4, 1), "uid_t": _t(4, 0), "gid_t": _t(4, 0), "dev_t": _t(4, 0),
    "size_t": _t(8, 0), "ssize_t": _t(8, 1), "ptrdiff_t": _t(8, 1), "uintptr_t": _t(8, 0),
    "loff_t": _t(8, 1), "off_t": _t(8, 1), "ino_t": _t(8, 0), "sector_t": _t(8, 0),
    "blkcnt_t": _t(8, 0), "pgoff_t": _t(8, 0), "gfp_t": _t(4, 0), "fmode_t": _t(4, 0),
    "umode_t": _t(2, 0), "time64_t": _t(8, 1), "ktime_t": _t(8, 1), "clockid_t": _t(4, 1),
    "dma_addr_t": _t(8, 0), "phys_addr_t": _t(8, 0), "resource_size_t": _t(8, 0),
    "errseq_t": _t(4, 0), "vm_flags_t": _t(8, 0), "blk_opf_t": _t(4, 0), "__wsum": _t(4, 0),
    "tid_t": _t(4, 0), "irq_hw_number_t": _t(8, 0), "__kernel_rwf_t": _t(4, 1),
}

POINTER = CType(8, 8, 0)
ENUM = CType(4, 4, 0)
QUALIFIERS = ("const", "volatile")


def normalize(ctype: str) -> str:
    """One space between words, ``*`` kept where written: the type as the
    kernel's ``#type`` stringification prints it."""
    return " ".join(ctype.split())


def lookup(ctype: str) -> Optional[CType]:
    """Size, alignment and signedness of *ctype*, or None if unknown."""
    text = normalize(ctype)
    if text.endswith("*"):
        return POINTER
    words = [w for w in text.split() if w not in QUALIFIERS]
    if len(words) == 2 and words[0] == "enum" and words[1].isidentifier():
        return ENUM
    base = " ".join(words)
    return _INTEGERS.get(base) or _TYPEDEFS.get(base)


def is_char(ctype: str) -> bool:
    """``char`` (with or without qualifiers/sign): arrays of it are strings."""
    words = [w for w in normalize(ctype).split() if w not in QUALIFIERS]
    return words in (["char"], ["signed", "char"], ["unsigned", "char"])


def wrap(value: int, size: int, signed: int) -> int:
    """C conversion of *value* to a *size*-byte integer."""
    bits = 8 * size
    value &= (1 << bits) - 1
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value
