"""The server's replays: the control commands ``replay`` and ``replay_status``.

``replay`` opens the recording in a worker thread (it is validated whole
there: a broken file is refused with its one-line error and nothing is
replayed), installs its formats and metadata, checks the options, then runs
the replay as a task of the server's loop (:meth:`Replay.run`, in turns of
the slicer so FUSE requests and control requests stay answered) and answers
at once with the replay's id.  ``replay_status`` gives its progress,
waiting up to ``wait`` seconds for it to end.
"""

from __future__ import annotations

import os


OPTION_KEYS = ("speed", "loop", "events", "cpu_map", "keep_timestamps", "buffer",
               "wait_enabled", "realtime", "as_fast_as_possible", "into")
RUNNING = ("ready", "waiting", "running")


class Replays:
    """Every replay a server ran, numbered from 1."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.replays: list = []

    def committed(self) -> int:
        return sum(r.committed for r in self.replays)

    async def start(self, req: dict) -> dict:
        """Open, check, install; then replay in the background."""
        import trio

        from fakedebugfs.fs.slices import slicer
        from fakedebugfs.sources.replay import open_recording
        from fakedebugfs.sources.replay.replay import Replay, ReplayOptions

        path = req["path"]
        if not isinstance(path, str) or not os.path.isabs(path):
            raise ValueError(f"path must be an absolute path, got {path!r}")
        options = ReplayOptions.make(**{k: req[k] for k in OPTION_KEYS if req.get(k) is not None})
        rec = await trio.to_thread.run_sync(open_recording, path)
        replay = Replay(self.kernel, rec, options)
        self.replays.append(replay)
        trio.lowlevel.spawn_system_task(replay.run, slicer, name=f"replay {path}")
        return {"replay": len(self.replays), **replay.status()}

    async def status(self, req: dict) -> dict:
        import trio

        number = req.get("replay", len(self.replays))
        if not isinstance(number, int) or not 1 <= number <= len(self.replays):
            raise ValueError(f"no replay {number!r} (replays: {len(self.replays)})")
        replay = self.replays[number - 1]
        wait = float(req.get("wait", 0))
        with trio.move_on_after(max(0.0, min(wait, 600.0))):
            while replay.state in RUNNING:
                await trio.sleep(0.01)
        return {"replay": number, **replay.status()}
