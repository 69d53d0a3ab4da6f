"""A profile's big symbol tables as ``NAME.xz`` or as plain ``NAME``
(engine/core/profile_files.py): the fake serves the same kernel either
way, and ``capture-profile`` writes the ``.xz``."""

from __future__ import annotations

import lzma
import shutil

from fakedebugfs import Fake
from fakedebugfs.engine.core.kallsyms import PROC_FILE
from fakedebugfs.engine.core.profile_files import COMPRESSED, write_profile_file
from fakedebugfs.engine.ftrace.profile import SHIPPED_PROFILES

SHIPPED = SHIPPED_PROFILES / "debian-6.12"


def served(profile) -> tuple[str, bytes]:
    """The fake's /proc/kallsyms and available_filter_functions_addrs."""
    with Fake(profile=str(profile), workload="none") as fk:
        return ((fk.root / PROC_FILE).read_text(),
                (fk.tracing / "available_filter_functions_addrs").read_bytes())


def test_an_unpacked_table_is_read_as_the_packed_one(tmp_path):
    """A user who unpacks ``kallsyms.xz`` (to grep it) and
    ``available_filter_functions_addrs.xz`` gets the same fake."""
    unpacked = tmp_path / "debian-6.12"
    shutil.copytree(SHIPPED, unpacked)
    for name in ("kallsyms", "available_filter_functions_addrs"):
        packed = unpacked / f"{name}.xz"
        (unpacked / name).write_bytes(lzma.decompress(packed.read_bytes()))
        packed.unlink()
    kallsyms, addrs = served(SHIPPED)
    assert len(kallsyms.splitlines()) > 100_000 and " T vfs_read\n" in kallsyms
    assert addrs.startswith(b"ffffffff")
    assert served(unpacked) == (kallsyms, addrs)


def test_capture_writes_the_big_tables_packed(tmp_path):
    """``NAME.xz`` for the tables above 1 MB, plain for the rest; a stale
    file of the other form goes."""
    (tmp_path / "kallsyms").write_text("stale\n")
    (tmp_path / "README.xz").write_bytes(b"stale")
    write_profile_file(tmp_path, "kallsyms", "ffffffff81000000 T _stext\n")
    write_profile_file(tmp_path, "README", "tracing mini-HOWTO:\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README", "kallsyms.xz"]
    assert lzma.decompress((tmp_path / "kallsyms.xz").read_bytes()) == \
        b"ffffffff81000000 T _stext\n"
    assert "kallsyms" in COMPRESSED and "README" not in COMPRESSED
