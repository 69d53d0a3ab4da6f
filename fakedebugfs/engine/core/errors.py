"""The errors a kernel handler returns (``return -EINVAL;``), as the OSError
the FUSE layer turns into the reply's errno.  One place, so every tracer
and file answers a refusal the same way."""

from __future__ import annotations

import errno


def kernel_error(code: int, why: str = "") -> OSError:
    """``-code`` from a handler; *why* (default: the errno's name) is for logs
    and tests, the client sees only the errno."""
    return OSError(code, why or errno.errorcode.get(code, str(code)))


def einval(why: str = "") -> OSError:
    """``-EINVAL``, the answer to most malformed writes."""
    return OSError(errno.EINVAL, why or "Invalid argument")


__all__ = ["einval", "kernel_error"]
