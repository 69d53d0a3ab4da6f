"""``%p`` extensions of the kernel's ``vsnprintf`` that print the memory a
pointer points to (lib/vsprintf.c), for print fmts whose argument is an
array field of the record (``REC->saddr``, ``REC->fsid``): the bytes are
the pointee.

``%pU`` (``uuid_string``), ``%pI4``/``%pI6``/``%pI6c`` (``ip4_string``,
``ip6_string``, ``ip6_compressed_string``), ``%pIS[pc]``
(``ip_addr_string`` of a ``struct sockaddr``), ``%pM``/``%pm``
(``mac_address_string``), ``%*pb``/``%*pbl`` (``bitmap_string``,
``bitmap_list_string``).  :func:`pointee_text` gives the text, or None for
an extension it does not print from bytes.
"""

from __future__ import annotations

from typing import Optional

AF_INET, AF_INET6 = 2, 10  # include/linux/socket.h
_UUID_BE = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)  # uuid_index
_UUID_LE = (3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15)  # guid_index


def uuid_string(data: bytes, ext: str) -> str:
    """``%pU[bBlL]``: 8-4-4-4-12 hex digits; ``l``/``L`` the little-endian
    (GUID) byte order, ``B``/``L`` upper case."""
    order = _UUID_LE if ext[1:2] in ("l", "L") else _UUID_BE
    data = data.ljust(16, b"\0")
    digits = "".join(f"{data[i]:02x}" for i in order)
    text = "-".join((digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:]))
    return text.upper() if ext[1:2] in ("B", "L") else text


def ip4_string(data: bytes) -> str:
    return ".".join(str(b) for b in data.ljust(4, b"\0")[:4])


def ip6_string(data: bytes) -> str:
    """``%pI6``: eight 4-digit groups."""
    data = data.ljust(16, b"\0")
    return ":".join(f"{data[i]:02x}{data[i + 1]:02x}" for i in range(0, 16, 2))


def ip6_compressed_string(data: bytes) -> str:
    """``%pI6c``: the longest run (first of equals, two groups or more) of
    zero groups as ``::``, groups without leading zeros; the last 32 bits
    dotted for IPv4-mapped and ISATAP addresses."""
    data = data.ljust(16, b"\0")[:16]
    words = [int.from_bytes(data[i:i + 2], "big") for i in range(0, 16, 2)]
    v4 = data[:10] == bytes(10) and data[10:12] == b"\xff\xff" or \
        (int.from_bytes(data[8:12], "big") | 0x02000000) == 0x02005EFE
    count = 6 if v4 else 8
    longest, start, run = 1, -1, 0
    for i in range(count):
        run = run + 1 if words[i] == 0 else 0
        if run > longest:
            longest, start = run, i - run + 1
    out, need_colon, i = [], False, 0
    while i < count:
        if i == start:
            out.append("::" if need_colon or i == 0 else ":")
            need_colon, i = False, i + longest
            continue
        out.append(f":{words[i]:x}" if need_colon else f"{words[i]:x}")
        need_colon, i = True, i + 1
    if v4:
        out.append((":" if need_colon else "") + ip4_string(data[12:]))
    return "".join(out)


def sockaddr_string(data: bytes, ext: str) -> str:
    """``%pIS[pcfs]``: a ``struct sockaddr_in``/``sockaddr_in6`` by its
    family; ``p`` adds ``:port`` (IPv6 in ``[]``), ``c`` compresses."""
    family = int.from_bytes(data[:2], "little")
    port = int.from_bytes(data[2:4], "big")
    have_p = "p" in ext[2:]
    if family == AF_INET:
        text = ip4_string(data[4:8])
        return f"{text}:{port}" if have_p else text
    if family == AF_INET6:
        addr = data[8:24]
        text = ip6_compressed_string(addr) if "c" in ext[2:] else ip6_string(addr)
        return f"[{text}]:{port}" if have_p else text
    return "(einval)"


def mac_address_string(data: bytes, ext: str) -> str:
    """``%pM`` ``00:01:02:03:04:05``; ``%pm`` without separators; ``R``
    reversed; ``F`` dashes."""
    data = data.ljust(6, b"\0")[:6]
    if "R" in ext:
        data = data[::-1]
    sep = "" if ext[0] == "m" else "-" if "F" in ext else ":"
    return sep.join(f"{b:02x}" for b in data)


def bitmap_string(data: bytes, nbits: Optional[int] = None) -> str:
    """``%*pb``: 32-bit hex chunks of the bitmap (little-endian ``unsigned
    long`` words), most significant first, comma separated, the first as
    wide as its bits need."""
    nbits = 8 * len(data) if nbits is None else max(nbits, 0)
    value = int.from_bytes(data, "little")
    chunks, first = [], nbits % 32 or 32
    for i in range(((nbits + 31) // 32 - 1) * 32, -1, -32):
        width = (first + 3) // 4 if i + 32 >= nbits else 8
        bits = first if i + 32 >= nbits else 32
        chunks.append(f"{(value >> i) & ((1 << bits) - 1):0{width}x}")
    return ",".join(chunks)


def bitmap_list_string(data: bytes, nbits: Optional[int] = None) -> str:
    """``%*pbl``: the set bits as ranges, ``0-3,8``."""
    nbits = 8 * len(data) if nbits is None else max(nbits, 0)
    value = int.from_bytes(data, "little") & ((1 << nbits) - 1)
    out, bit = [], 0
    while value >> bit:
        if not (value >> bit) & 1:
            bit += 1
            continue
        end = bit
        while (value >> (end + 1)) & 1:
            end += 1
        out.append(str(bit) if end == bit else f"{bit}-{end}")
        bit = end + 1
    return ",".join(out)


def pointee_text(ext: str, data: bytes, width: Optional[int]) -> Optional[str]:
    """The text of ``%p<ext>`` for the pointed-to *data*, or None."""
    head = ext[:1]
    if head == "U":
        return uuid_string(data, ext)
    if ext.startswith(("I4", "i4")):
        return ip4_string(data) if head == "I" else \
            ".".join(f"{b:03d}" for b in data.ljust(4, b"\0")[:4])
    if ext.startswith("I6"):
        return ip6_compressed_string(data) if ext[2:3] == "c" else ip6_string(data)
    if ext.startswith("IS"):
        return sockaddr_string(data, ext)
    if head in ("M", "m"):
        return mac_address_string(data, ext)
    if head == "b":
        return bitmap_list_string(data, width) if ext[1:2] == "l" else bitmap_string(data, width)
    return None


__all__ = ["pointee_text", "bitmap_string", "bitmap_list_string", "ip6_compressed_string",
           "uuid_string", "sockaddr_string"]
