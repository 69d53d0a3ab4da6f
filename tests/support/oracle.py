"""The oracle guest for the suite: a Debian kernel under QEMU, beside the fake.

``session_guest(config, profile)`` gives the tests a guest of a shipped
profile (fakedebugfs.oracle.Guest) of their own, booted fresh once per
test session and stopped at its end: not the shared guest a developer may
be using (``python -m fakedebugfs.oracle run``), whose top level they may
have changed.
Where it cannot boot, the test is skipped with the cause and the fix, as
the fake's own skips are, and the require mode (``--fakedebugfs-require``,
``FAKEDEBUGFS_REQUIRE=1``, or CI) makes that a failure.
``FAKEDEBUGFS_ORACLE=0`` leaves the guest out (its tests skip, saying so).

The boot's time is reported in the session's summary (conftest.py).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Optional

import pytest

from fakedebugfs.oracle import Guest, OracleError, why_not
from fakedebugfs.pytest_plugin import require_mode

PROFILES = Path(__file__).resolve().parents[2] / "fakedebugfs" / "profiles"
# guest -> (booted here, seconds): what the session summary reports
BOOTED: dict = {}


def _unavailable(config, reason: str):
    on, why = require_mode(config)
    if on:
        pytest.fail(f"the oracle cannot run ({why} forbids skipping): {reason}", pytrace=False)
    pytest.skip(f"the oracle cannot run: {reason}")


def session_guest(config, profile: str = "debian-6.12") -> Guest:
    """The running guest of *profile* (booted by the first caller)."""
    if os.environ.get("FAKEDEBUGFS_ORACLE", "").strip() == "0":
        pytest.skip("the oracle is turned off (FAKEDEBUGFS_ORACLE=0)")
    guest = Guest(PROFILES / profile, name=f"suite-{os.getpid()}")
    key = str(guest.state)
    if key in BOOTED:
        if BOOTED[key].get("error"):
            _unavailable(config, BOOTED[key]["error"])
        return guest
    cause = why_not()
    if cause:
        BOOTED[key] = {"error": cause}
        _unavailable(config, cause)
    began = time.monotonic()
    was_running = False
    _forget_dead_sessions(guest)
    try:
        guest.start()
        guest.run("true", timeout=120, check=True)
    except (OracleError, TimeoutError) as err:
        BOOTED[key] = {"error": str(err)}
        _unavailable(config, str(err))
    BOOTED[key] = {"guest": guest, "booted": not was_running,
                   "seconds": time.monotonic() - began}
    return guest


def _forget_dead_sessions(guest: Guest) -> None:
    """Stop the guests of test sessions that were killed (each session's
    guest is named after its pid, so two sessions at once keep their own)
    and remove their state folders."""
    stem = guest.state.name.rsplit("-", 1)[0] + "-"
    for state in guest.state.parent.glob(stem + "*"):
        pid = state.name[len(stem):]
        if not pid.isdigit() or state == guest.state:
            continue
        try:
            os.kill(int(pid), 0)
            continue  # that session is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        Guest(PROFILES / guest.profile.name, name=state.name[len(guest.profile.name) + 1:]).stop()
        shutil.rmtree(state, ignore_errors=True)


def stop_booted() -> None:
    """Stop the guests this session booted (not one it found running)."""
    for entry in BOOTED.values():
        if entry.get("booted"):
            entry["guest"].stop()
            shutil.rmtree(entry["guest"].state, ignore_errors=True)


def summary() -> Optional[str]:
    lines = []
    for entry in BOOTED.values():
        if "guest" in entry:
            g = entry["guest"]
            how = "booted" if entry["booted"] else "found running"
            lines.append(f"oracle {g.state.name}: {how}, ready in {entry['seconds']:.1f} s")
        else:
            lines.append(f"oracle: not used ({entry['error']})")
    return "\n".join(lines) or None


__all__ = ["session_guest", "stop_booted", "summary"]
