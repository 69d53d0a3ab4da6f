"""The control protocol, version 1.

Each mount has a unix stream socket (``fakedebugfs status MNT`` shows where;
the Python API and the CLI find it through the mount's state file).  A
client writes one JSON object per line and reads one JSON object per line
back, in order; a connection may carry any number of requests.

Request::

    {"v": 1, "cmd": NAME, ...arguments}

``v`` is the protocol version the client speaks (1 if absent); a server
refuses a version it does not know with kind ``protocol``.

Reply::

    {"v": 1, "ok": true, ...results}
    {"v": 1, "ok": false, "kind": KIND, "error": "one line", ...details}

KIND is one of ``request`` (unknown command, bad arguments), ``event``
(injection refused), ``define``, ``fault``, ``replay``, ``scenario`` (with ``line`` or
``index`` of the bad step), ``timeout``, ``protocol``.  Nothing of a refused
request was applied.

Commands (arguments -> results):

``hello``
    -> ``protocol``, ``version`` (of fakedebugfs), ``pid``, ``mountpoint``, ``cpus``, ``clock``
``status``
    -> ``pid``, ``mountpoint``, ``workload``, ``emitted``, ``injected``, ``done``,
    ``ktrace`` {enabled, overflow, entries}, ``kmemtrace`` {...}, ``ftrace`` {per CPU
    entries/overrun/dropped/read}
``emit`` ``events``: [{``event``, ``cpu``, ``pid``, ``comm``, ``ts``, ``fields``}], ``strict``,
    ``repeat`` (fire the list that many times, in turns between FUSE requests; at
    most ``MAX_REPEAT``) -> ``emitted``. All events are checked before any is fired.
``define`` ``system``, ``name``, ``fields`` [C declarations], ``print_fmt`` (optional)
    -> ``event`` ("system:name"), ``id``
``fault`` ``spec`` {``kind``, ...} -> ``fault`` {``id``, ...};
``faults`` -> ``faults`` [...]; ``clear_faults`` ``id`` (optional)
``scenario`` ``steps`` [{``op``: emit|define|fault|sleep, ``line``, ...}]
    -> ``applied``: every step is checked first; then they run in order
    (sleeps included) and the reply comes when the last is done.
``wait`` ``until``: ``idle`` | ``consumed`` | ``done`` | ``readers``, ``timeout`` (s),
    ``tracers`` (for consumed: subset of ftrace, ktrace, kmemtrace),
    ``complete_pages`` (consumed: only whole pages must be read),
    ``path`` (for readers: a glob of files that must all be open, default
    ``tracing/per_cpu/cpu*/trace_pipe_raw``) -> ``waited`` (s)
``insmod`` ``module``, ``events`` [[name, format]] -> ``events``; ``rmmod`` ``module``
``kallsyms`` -> ``text``: the engine's symbols in ``/proc/kallsyms`` form
``replay`` ``path`` (absolute), ``speed`` (None: as fast as possible), ``loop``,
    ``events`` [patterns], ``cpu_map`` {from: to}, ``keep_timestamps``, ``buffer``,
    ``into`` (an instance), ``wait_enabled``, ``fd`` (true: the recording is the
    file descriptor sent with the request as SCM_RIGHTS, ``path`` then only names it;
    the client opens it, so FIFOs, ``/dev/stdin`` and ``<(...)`` work)
    -> ``replay`` (its number) and its status: the recording is
    opened and checked whole (kind ``replay`` with its one-line error if broken:
    nothing replayed), its events defined, then it is replayed in the background
``replay_status`` ``replay`` (default: the last), ``wait`` (s, at most 600) ->
    ``state`` (waiting, running, done, failed), ``error``, ``total``, ``done``,
    ``committed``, ``lost_marks``, ``seconds``, ``created``, ``adopted``, ``notes``
``watch`` ``pid``, ``parent``, ``parent_comm`` -> ``pid``: inject the fork, exec,
    exit and context switches of *pid* (forked by *parent*, not yet exec'd) and
    its descendants from then on (``fakedebugfs run`` sends it; kind ``watch``
    where the kernel refuses perf_event_open); with ``fds`` (a list of CPUs),
    the perf events come with it (SCM_RIGHTS: the proc of the command's PID
    namespace, then each CPU's ring and switch events), opened by the
    command's init in its namespace, and *pid*, *parent* are pids of it
``calls`` ``tree`` [[depth, start ns, duration ns, function]], ``cpu``, ``pid``, ``comm``,
    ``ts`` (default: now) -> ``calls``: function calls run through the function
    tracers and probes (a profile with function tracing; kind ``event`` otherwise)
``admit`` ``pid`` -> ``pid``: the processes of *pid*'s PID namespace may use
    this socket (asked from the server's own namespace only: server/peers.py)
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterator, Optional

PROTOCOL_VERSION = 1
MAX_LINE = 64 << 20  # bytes of one request line (a large bulk emit fits)
MAX_DEPTH = 16  # nesting of arrays and objects in a request (an emit needs 4)
MAX_REPEAT = 1 << 32  # an emit's ``repeat``
# file descriptors (SCM_RIGHTS) a connection may hold unused: a replay's
# recording, or ``watch``'s proc, two perf events per CPU and the mirror's
# opener socket (up to SCM_MAX_FD, 253, in one message)
MAX_FDS = min(253, max(4, 2 * (os.cpu_count() or 1) + 2))


class BadRequest(ValueError):
    """A request line that is not a request (kind ``request``)."""


def too_long() -> str:
    return (f"request line longer than {MAX_LINE} bytes (the control protocol's "
            f"limit): send less at once")


class LineReader:
    """A connection's bytes cut into lines.  Only each new chunk is searched
    for a newline (linear in what arrives, whatever the line's length), and
    a line is given up (:attr:`overflow`) as soon as it passes *limit*."""

    def __init__(self, limit: int = MAX_LINE):
        self.limit = limit
        self.buf = bytearray()
        self.overflow = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The complete lines *data* ends (without their newline)."""
        start = 0
        while True:
            at = data.find(b"\n", start)
            if at < 0:
                break
            if len(self.buf) + at - start > self.limit:
                self.overflow = True
                return
            self.buf += data[start:at]
            line, self.buf = bytes(self.buf), bytearray()
            yield line
            start = at + 1
        if len(self.buf) + len(data) - start > self.limit:
            self.overflow = True
            return
        self.buf += data[start:]


def depth_ok(obj, limit: int = MAX_DEPTH) -> bool:
    """Whether *obj* nests arrays and objects at most *limit* deep (walked
    without recursion)."""
    stack = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return False
        values = item.values() if isinstance(item, dict) else item
        stack.extend((v, depth + 1) for v in values if isinstance(v, (dict, list)))
    return True


def decode(line: bytes, what: str = "request") -> dict:
    """A request line's object; BadRequest (one line) for anything else:
    not JSON, not UTF-8, nested past MAX_DEPTH (the decoder's recursion
    included), not an object."""
    try:
        obj = json.loads(line)
    except RecursionError:
        obj = None
        deep = True
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(f"a {what} is one JSON object per line") from None
    else:
        deep = isinstance(obj, (dict, list)) and not depth_ok(obj)
    if deep:
        raise BadRequest(f"a {what} nests arrays and objects at most {MAX_DEPTH} deep")
    if not isinstance(obj, dict):
        raise BadRequest(f"a {what} is a JSON object")
    return obj


_WS = re.compile(r"[ \t\n\r]*")
STEP_ITEMS = 64  # array items decoded between the yields of decode_steps


def decode_steps(line: bytes, what: str = "request"):
    """:func:`decode` of a long line, a generator yielding between parts
    (its result is StopIteration's value): a top-level object's values
    decoded one by one, an array value item by item, each item's depth
    checked as it comes, so the server's loop answers FUSE requests while
    a bulk emit of megabytes is read.  BadRequest as :func:`decode`."""
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise BadRequest(f"a {what} is one JSON object per line") from None
    scan = _DECODER.raw_decode
    try:
        i = _WS.match(text).end()
        if text[i:i + 1] != "{":
            return decode(line, what)
        obj: dict = {}
        i = _WS.match(text, i + 1).end()
        if text[i] == "}":
            i += 1
        else:
            while True:
                key, i = scan(text, i)
                if not isinstance(key, str):
                    raise ValueError("a key is a string")
                i = _WS.match(text, i).end()
                if text[i] != ":":
                    raise ValueError("':' expected")
                i = _WS.match(text, i + 1).end()
                if text[i] == "[":
                    value, i = [], _WS.match(text, i + 1).end()
                    if text[i] == "]":
                        i += 1
                    while i <= len(text) and text[i - 1] != "]":
                        item, i = scan(text, i)
                        _check_depth(item, 2, what)
                        value.append(item)
                        if len(value) % STEP_ITEMS == 0:
                            yield
                        i = _WS.match(text, i).end()
                        if text[i] not in ",]":
                            raise ValueError("',' or ']' expected")
                        i = _WS.match(text, i + 1).end() if text[i] == "," else i + 1
                else:
                    value, i = scan(text, i)
                    _check_depth(value, 1, what)
                obj[key] = value
                i = _WS.match(text, i).end()
                if text[i] == "}":
                    i += 1
                    break
                if text[i] != ",":
                    raise ValueError("',' or '}' expected")
                i = _WS.match(text, i + 1).end()
                yield
        if _WS.match(text, i).end() != len(text):
            raise ValueError("text after the object")
    except BadRequest:
        raise
    except RecursionError:
        raise BadRequest(f"a {what} nests arrays and objects at most {MAX_DEPTH} deep") from None
    except (ValueError, IndexError):
        raise BadRequest(f"a {what} is one JSON object per line") from None
    return obj


def _check_depth(value, above: int, what: str) -> None:
    if isinstance(value, (dict, list)) and not depth_ok(value, MAX_DEPTH - above):
        raise BadRequest(f"a {what} nests arrays and objects at most {MAX_DEPTH} deep")


_DECODER = json.JSONDecoder()


def fds_of(ancdata) -> list[int]:
    """The file descriptors of a recvmsg's SCM_RIGHTS messages."""
    import array
    import socket

    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[:len(data) - len(data) % arr.itemsize])
            fds.extend(arr)
    return fds


def send_with_fds(sock, data: bytes, fds: Optional[list] = None) -> None:
    """``sendall`` of *data*, its first byte carrying *fds* (SCM_RIGHTS)."""
    import array
    import socket

    if fds:
        sent = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                      array.array("i", fds))])
        data = data[sent:]
    if data:
        sock.sendall(data)


def encode(obj: dict) -> bytes:
    """One protocol line."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def request(cmd: str, **args) -> dict:
    return {"v": PROTOCOL_VERSION, "cmd": cmd, **args}


def ok(**results) -> dict:
    return {"v": PROTOCOL_VERSION, "ok": True, **results}


MAX_ERROR = 4096  # characters of a refusal's one line


class Refused(Exception):
    """A request refused with *kind* (nothing applied)."""

    def __init__(self, kind: str, message: str, **details):
        super().__init__(message)
        self.kind = kind
        self.details = details


def refused(kind: str, error: str, **details) -> dict:
    """A refusal: *error* made one line, at most MAX_ERROR characters."""
    error = " ".join(str(error).splitlines())
    if len(error) > MAX_ERROR:
        error = error[:MAX_ERROR - 3] + "..."
    return {"v": PROTOCOL_VERSION, "ok": False, "kind": kind, "error": error, **details}
