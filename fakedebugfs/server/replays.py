"""The server's replays: the control commands ``replay`` and ``replay_status``.

``replay`` opens the recording in a worker thread (it is validated whole
there: a broken file is refused with its one-line error and nothing is
replayed), installs its formats and metadata, checks the options, then runs
the replay as a task of the server's loop (:meth:`Replay.run`, in turns of
the slicer so FUSE requests and control requests stay answered) and answers
at once with the replay's id.  ``replay_status`` gives its progress,
waiting up to ``wait`` seconds for it to end.

The recording is the client's: it opens the file and sends the descriptor
with the request (SCM_RIGHTS), so what only the client can open (a FIFO,
``/dev/stdin``, ``<(...)``) is replayed too.  A regular file or directory is
read through ``/proc/self/fd/N``; anything else (a pipe) is copied, in the
loop and cancellably, into an unlinked temporary file first, at most
:data:`MAX_STREAMED` bytes.  When a replay ends its recording is let go
(only its final status is kept, its cycles collected) and the heap trimmed.
"""

from __future__ import annotations

import gc
import os
import stat
import tempfile


OPTION_KEYS = ("speed", "loop", "events", "cpu_map", "keep_timestamps", "buffer",
               "wait_enabled", "realtime", "as_fast_as_possible", "into")
RUNNING = ("ready", "waiting", "running")
MAX_STREAMED = 4 << 30  # bytes of a recording read from a pipe (copied to a temporary file)
COPY_CHUNK = 1 << 20


class Finished:
    """What is kept of a replay that ended: its last status."""

    def __init__(self, replay):
        self.last = replay.status()
        self.state = self.last["state"]
        self.committed = self.last["committed"]

    def status(self) -> dict:
        return dict(self.last)


class Replays:
    """Every replay a server ran, numbered from 1."""

    def __init__(self, kernel, release=lambda: None):
        self.kernel = kernel
        self.release = release  # gives freed memory back (the server's release_heap)
        self.replays: list = []

    def committed(self) -> int:
        return sum(r.committed for r in self.replays)

    async def start(self, req: dict, fd: int | None = None) -> dict:
        """Open, check, install; then replay in the background.  *fd*: the
        recording the client opened (this takes it over and closes it)."""
        import trio

        from fakedebugfs.sources.replay import open_recording
        from fakedebugfs.sources.replay.replay import Replay, ReplayOptions

        keep = []  # descriptors and files to close once the recording is read
        try:
            path = req.get("path")
            if fd is not None:
                keep.append(fd)
                name = path if isinstance(path, str) and path else "recording"
                path = await self._readable(fd, name, keep)
            else:
                name = None
                if not isinstance(path, str) or not os.path.isabs(path):
                    raise ValueError(f"path must be an absolute path, got {str(path)[:200]!r}")
            options = ReplayOptions.make(**{k: req[k] for k in OPTION_KEYS
                                            if req.get(k) is not None})
            rec = await trio.to_thread.run_sync(open_recording, path, name)
        finally:
            for item in keep:
                os.close(item) if isinstance(item, int) else item.close()
        replay = Replay(self.kernel, rec, options)
        del rec
        self.replays.append(replay)
        number = len(self.replays)
        trio.lowlevel.spawn_system_task(self._run, number, name=f"replay {number}")
        return {"replay": number, **replay.status()}

    async def _run(self, number: int) -> None:
        """Run replay *number*; then keep only its status (the recording,
        its pages and decoded formats are freed) and trim the heap."""
        from fakedebugfs.fs.slices import slicer

        replay = self.replays[number - 1]
        try:
            await replay.run(slicer)
        finally:
            try:
                self.replays[number - 1] = Finished(replay)
            except Exception:  # noqa: BLE001: a system task must not raise
                pass
            del replay
            gc.collect()  # the recording's cycles (its buffers point back at it); the
            self.release()  # frozen heap (settle_heap) is not scanned: a few ms

    async def status(self, req: dict) -> dict:
        import trio

        number = req.get("replay", len(self.replays))
        if isinstance(number, bool) or not isinstance(number, int) \
                or not 1 <= number <= len(self.replays):
            raise ValueError(f"no replay {str(number)[:40]} (replays: {len(self.replays)})")
        wait = req.get("wait", 0)
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait == wait:
            raise ValueError(f"wait takes seconds, got {str(wait)[:40]}")
        with trio.move_on_after(max(0.0, min(float(wait), 600.0))):
            while self.replays[number - 1].state in RUNNING:
                await trio.sleep(0.01)
        return {"replay": number, **self.replays[number - 1].status()}

    async def _readable(self, fd: int, name: str, keep: list) -> str:
        """A path the readers can open for the client's *fd*: itself if it
        is a regular file or a directory, else a temporary copy of what it
        streams (ValueError past MAX_STREAMED bytes)."""
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            return f"/proc/self/fd/{fd}"
        copy = tempfile.TemporaryFile(prefix="fakedebugfs-replay-")
        keep.append(copy)
        await copy_stream(fd, copy, name)
        copy.flush()
        return f"/proc/self/fd/{copy.fileno()}"


async def copy_stream(fd: int, out, name: str, limit: int = MAX_STREAMED) -> int:
    """Copy what *fd* (a pipe, FIFO, terminal...) gives until its end into
    file *out*, in the loop (a writer that never writes nor closes blocks
    nothing: the copy is cancelled with the server); ValueError past
    *limit* bytes.  *fd* stays open (a duplicate is read)."""
    import trio

    from fakedebugfs.sources.replay.tracedat_layouts import TRACEDAT_MAGIC

    total, head = 0, b""
    # what is not a tar by its name is read as a trace.dat (open_recording):
    # one that does not start as one is refused at once, not after the limit
    magic = None if name.endswith((".tar", ".tar.gz", ".tgz")) else TRACEDAT_MAGIC
    async with trio.lowlevel.FdStream(os.dup(fd)) as stream:
        while True:
            data = await stream.receive_some(COPY_CHUNK)
            if magic is not None and len(head) < len(magic):
                head += data[:len(magic) - len(head)]
                if not magic.startswith(head) or (not data and head):
                    raise ValueError(f"{name}: not a trace.dat (it starts with {head!r}, "
                                     f"not {magic!r})")
            if not data:
                return total
            total += len(data)
            if total > limit:
                raise ValueError(f"{name}: more than {limit} bytes through a pipe (the "
                                 f"limit of a streamed recording): replay it from a file")
            out.write(data)
