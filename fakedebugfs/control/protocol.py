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
``emit`` ``events``: [{``event``, ``cpu``, ``pid``, ``comm``, ``ts``, ``fields``}], ``strict``
    -> ``emitted``. All events are checked before any is fired.
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
    ``into`` (an instance), ``wait_enabled`` -> ``replay`` (its number) and its status: the recording is
    opened and checked whole (kind ``replay`` with its one-line error if broken:
    nothing replayed), its events defined, then it is replayed in the background
``replay_status`` ``replay`` (default: the last), ``wait`` (s, at most 600) ->
    ``state`` (waiting, running, done, failed), ``error``, ``total``, ``done``,
    ``committed``, ``lost_marks``, ``seconds``, ``created``, ``adopted``, ``notes``
``watch`` ``pid``, ``parent``, ``parent_comm`` -> ``pid``: inject the fork, exec,
    exit and context switches of *pid* (forked by *parent*, not yet exec'd) and
    its descendants from then on (``fakedebugfs run`` sends it; kind ``watch``
    where the kernel refuses perf_event_open)
"""

from __future__ import annotations

import json

PROTOCOL_VERSION = 1
MAX_LINE = 64 << 20  # bytes of one request line (a large bulk emit fits)


def encode(obj: dict) -> bytes:
    """One protocol line."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def request(cmd: str, **args) -> dict:
    return {"v": PROTOCOL_VERSION, "cmd": cmd, **args}


def ok(**results) -> dict:
    return {"v": PROTOCOL_VERSION, "ok": True, **results}


def refused(kind: str, error: str, **details) -> dict:
    return {"v": PROTOCOL_VERSION, "ok": False, "kind": kind, "error": error, **details}
