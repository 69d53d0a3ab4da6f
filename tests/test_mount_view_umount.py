"""umount2(2) inside a sealed ``run`` (sandbox/mountview.py): a view of the
fake, and the real tracefs or debugfs it covers, go together, so a
program that unmounts every tracefs and debugfs it finds in /proc/mounts
and lets libtracefs mount one again (libtracefs' utest "Test
tracefs/debugfs mounting") gets the fake back, never the real tree; other
mounts still cannot be unmounted (EPERM), and a path no mount is at is
EINVAL, as on the kernel."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FAKEDEBUGFS, build_c, libtracefs_flags

HEADER = Path("/usr/include/tracefs/tracefs.h")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="starts runs as root"),
    pytest.mark.skipif(not HEADER.is_file() or not shutil.which("gcc"),
                       reason="needs gcc and libtracefs-dev (make debs installs them)"),
]

REMOUNT_C = r"""
#include <errno.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <tracefs.h>

/* the first mount of this type in /proc/mounts, as libtracefs looks for one */
static int first(const char *type, char *path)
{
	char fs[4096], t[100];
	FILE *fp = fopen("/proc/mounts", "r");
	int found = 0;

	while (fscanf(fp, "%*s %4095s %99s %*s %*d %*d\n", fs, t) == 2)
		if (!strcmp(t, type)) {
			strcpy(path, fs);
			found = 1;
			break;
		}
	fclose(fp);
	return found;
}

static int entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	const char *types[] = { "debugfs", "tracefs" };
	char path[4096];
	struct stat st;
	char *text;
	int i, n;

	if (argc != 2)	/* the plain directory to try umount on */
		return 2;
	for (i = 0; i < 2; i++) {
		for (n = 0; first(types[i], path); n++)
			if (umount(path)) {
				printf("umount %s: %s\n", path, strerror(errno));
				return 1;
			}
		printf("unmounted_%s=%d\n", types[i], n);
	}
	printf("left_tracing=%d\nleft_debug=%d\n", entries("/sys/kernel/tracing"),
	       entries("/sys/kernel/debug"));
	printf("tracing_dir=%s\n", tracefs_tracing_dir());
	text = tracefs_instance_file_read(NULL, "current_tracer", NULL);
	printf("current_tracer=%s", text ? text : "(none)\n");
	/* found again by its /proc/mounts line, as libtracefs' instances find it */
	printf("is_mounted=%d\n", tracefs_tracing_dir_is_mounted(false, NULL));
	printf("debug_dir=%s\n", tracefs_debug_dir());
	printf("debug_tracing=%d\n", stat("/sys/kernel/debug/tracing/trace", &st) == 0);
	printf("kallsyms=%s\n", umount("/proc/kallsyms") ? strerror(errno) : "unmounted");
	printf("plain_dir=%s\n", umount(argv[1]) ? strerror(errno) : "unmounted");
	return 0;
}
"""


def build(into: Path) -> Path:
    (into / "remount.c").write_text(REMOUNT_C)
    return build_c(into / "remount.c", into, flags=libtracefs_flags())


@pytest.mark.parametrize("options", [(), ("--mirror=tree",)], ids=["plain", "mirror"])
def test_unmount_everything_then_libtracefs_mounts_the_fake_again(tmp_path, options):
    """Both ways run starts a command: under an init of its own, and in
    the keeper's PID namespace (``--mirror``, whose init reaps every child)."""
    if options:
        from fakedebugfs.sources.mirror import privilege_problem

        if problem := privilege_problem():
            pytest.skip(problem)
    binary = build(tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    script = f"{binary} {plain}; grep -c ' /sys/kernel/tracing ' /proc/self/mounts"
    p = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", *options, "--", "sh", "-c",
                        script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    got = dict(line.split("=", 1) for line in lines if "=" in line)
    assert int(got["unmounted_debugfs"]) >= 1 and int(got["unmounted_tracefs"]) >= 1, p.stdout
    assert got["left_tracing"] == "0" and got["left_debug"] == "0"  # nothing real uncovered
    assert got["tracing_dir"] == "/sys/kernel/tracing"  # mounted again by libtracefs
    assert got["current_tracer"] == "nop"
    assert got["is_mounted"] == "1"
    assert got["debug_dir"] == "/sys/kernel/debug" and got["debug_tracing"] == "1"
    assert got["kallsyms"] == os.strerror(1)  # EPERM: not a view of the fake
    assert got["plain_dir"] == os.strerror(22)  # EINVAL: no mount there
    # the view libtracefs mounted, over a read-only real tracefs for its
    # /proc/mounts line (as run arranged it at the start)
    assert lines[-1] == "2"


def _host_mounts() -> list[str]:
    """This namespace's mounts but the fakes (other tests' come and go)."""
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if " - fuse.fakedebugfs " not in line]


def test_the_host_keeps_its_mounts(tmp_path):
    """The unmounts happen in the command's namespace only."""
    before = _host_mounts()
    p = subprocess.run([FAKEDEBUGFS, "run", "--workload", "none", "--", "sh", "-c",
                        "umount /sys/kernel/tracing && umount /sys/kernel/debug && "
                        "ls -A /sys/kernel/tracing | wc -l"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0"]
    assert _host_mounts() == before
