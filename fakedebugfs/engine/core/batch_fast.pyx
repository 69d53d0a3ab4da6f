"""Compiled per-batch bookkeeping (beside ``batch.py``): one pass over a
batch's events instead of a few numpy calls each, for the small batches
the server fires between FUSE requests.

* :func:`select`: the events a trace array records (its enabled kinds on
  the CPUs of ``tracing_cpumask``);
* :func:`pid_runs`: the task of each run of events of one task
  (``tracing_record_cmdline`` records a task when it changes), and
  :func:`first_seen`: each task once;
* :func:`note_last_ts`: each CPU's last timestamp (the engine's check
  that the trace clock never goes back).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free

import numpy as np


def select(const int64_t[:] kind, const int64_t[:] cpu, const uint8_t[:] mine,
           const uint8_t[:] cpus):
    """Positions (int64, in order) of the events whose kind is set in
    *mine* and whose CPU is set in *cpus* (other CPUs: not recorded)."""
    cdef Py_ssize_t n = kind.shape[0], i, m = 0
    cdef int64_t k, c
    out = np.empty(n, np.int64)
    cdef int64_t[::1] o = out
    if cpu.shape[0] != n:
        raise ValueError("kind and cpu differ in length")
    for i in range(n):
        k = kind[i]
        c = cpu[i]
        if k < 0 or k >= mine.shape[0]:
            raise IndexError("event kind out of the batch's tracepoints")
        if mine[k] and 0 <= c < cpus.shape[0] and cpus[c]:
            o[m] = i
            m += 1
    return out[:m]


def pid_runs(const int64_t[:] pid, const int64_t[:] sel):
    """``pid[sel]`` as int32 with each run of one task kept once (the
    first of the run): what ``Cmdlines.record_many`` records of them."""
    cdef Py_ssize_t m = sel.shape[0], t, r = 0, n = pid.shape[0]
    cdef int64_t i
    cdef int32_t p, last = 0
    out = np.empty(m, np.int32)
    cdef int32_t[::1] o = out
    for t in range(m):
        i = sel[t]
        if i < 0 or i >= n:
            raise IndexError("selected position out of the batch")
        p = <int32_t>pid[i]
        if r == 0 or p != last:
            o[r] = p
            r += 1
            last = p
    return out[:r]


def note_last_ts(const int64_t[:] cpu, const int64_t[:] ts, list last):
    """Set ``last[c]`` to the timestamp of CPU c's last event in the batch."""
    cdef Py_ssize_t n = cpu.shape[0], i, nr = len(last), left = len(last)
    cdef int64_t c
    cdef char *seen
    if ts.shape[0] != n:
        raise ValueError("cpu and ts differ in length")
    seen_b = bytearray(nr)
    seen = seen_b
    for i in range(n - 1, -1, -1):  # from the end: the first seen is the last
        c = cpu[i]
        if c < 0 or c >= nr:
            raise IndexError("event on a CPU the engine does not have")
        if not seen[c]:
            seen[c] = 1
            last[c] = ts[i]
            left -= 1
            if not left:
                break


def first_seen(const int32_t[:] pids):
    """The distinct values of *pids* in order of first appearance (a list)."""
    cdef Py_ssize_t n = pids.shape[0], i, cap = 16
    cdef uint32_t h
    cdef int32_t p
    cdef int32_t *keys
    cdef char *used
    while cap < 2 * n:
        cap <<= 1
    keys = <int32_t *>calloc(cap, sizeof(int32_t))
    used = <char *>calloc(cap, 1)
    out = []
    try:
        if keys == NULL or used == NULL:
            raise MemoryError()
        for i in range(n):  # open addressing, linear probing
            p = pids[i]
            h = (<uint32_t>p * 2654435761u) & (cap - 1)
            while used[h] and keys[h] != p:
                h = (h + 1) & (cap - 1)
            if not used[h]:
                used[h] = 1
                keys[h] = p
                out.append(p)
        return out
    finally:
        free(keys)
        free(used)
