# fakedebugfs: `make run` mounts with a default workload, `make test` runs the suite.
# Both install what they need first (Debian packages, .venv, patched pyfuse3).
# `make dist` puts the two wheels another project installs into dist/.
# Nothing outside the checkout changes (but Debian packages, when missing)
# unless asked: `make install-system` links the command into /usr/local/bin.

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(VENV)/bin/pip
PYFUSE3_VER := 3.5.0
# the patched build's own version (local label): equal to fakedebugfs.version.PYFUSE3,
# to the one patches/pyfuse3-*-startup.patch writes in and to pyproject.toml's requirement
PYFUSE3_PATCHED := $(PYFUSE3_VER)+fakedebugfs.3
PATCHES     := $(addprefix patches/pyfuse3-$(PYFUSE3_VER)-,ioctl.patch fastpath.patch startup.patch readfast.patch opfast.patch dircache.patch)
BUILD       := build
STAMPS      := $(BUILD)/stamps
DEBS        := fuse3 libfuse3-dev pkg-config gcc make patch trace-cmd linux-perf bpftrace libbpf-tools gawk libcunit1-dev perf-tools-unstable libtracefs-dev libtraceevent-dev
# the oracle (a Debian kernel under QEMU, docs/oracle.md), without their
# recommends (qemu's would bring a desktop's worth of libraries)
ORACLE_DEBS := qemu-system-x86 busybox-static
# where `make run` mounts its fake: private to this checkout (MNT=DIR for another)
MNT         ?= $(CURDIR)/build/mnt
NATIVE      := $(BUILD)/native
DIST        ?= dist

.PHONY: install run stop test bench conformance clean debs venv pyfuse3 native install-system dist oracle

install: $(STAMPS)/package native

debs: $(STAMPS)/debs
$(STAMPS)/debs:
	@mkdir -p $(STAMPS)
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@missing=""; for p in $(ORACLE_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for the oracle:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $$missing; \
	fi
	@touch $@

$(STAMPS)/venv: $(STAMPS)/debs
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	@touch $@

# pyfuse3 from its source distribution, with our patches, Cython re-run:
# ioctl.patch (ioctl and interrupt handlers, read flags, writer pid) and
# fastpath.patch (a request queued right after another is taken at once,
# without a trip through trio's epoll loop: about half the round trip) and
# startup.patch (its version written in, not read with importlib.metadata) and
# readfast.patch (Operations.read_nowait: a read answered in the request's
# callback, without a task or a cancel scope) and opfast.patch (the same for
# LOOKUP, GETATTR, OPEN, WRITE, RELEASE, OPENDIR, RELEASEDIR: *_nowait hooks) and
# dircache.patch (an opendir may answer FOPEN_CACHE_DIR and FOPEN_KEEP_CACHE: the
# kernel keeps listings; a READDIRPLUS answered by readdir_nowait in its callback).
# It is built as version $(PYFUSE3_PATCHED) (setuptools_scm takes the version
# from SETUPTOOLS_SCM_PRETEND_VERSION), the only pyfuse3 fakedebugfs accepts.
# The wheel stays in build/wheels: other environments (a user's venv, the
# plugin's fresh-venv test) install it with `pip install --find-links build/wheels`.
$(STAMPS)/pyfuse3: $(STAMPS)/venv $(PATCHES)
	rm -rf $(BUILD)/pyfuse3 $(BUILD)/wheels && mkdir -p $(BUILD)/pyfuse3 $(BUILD)/wheels
	$(PIP) download -q --no-deps --no-binary pyfuse3 -d $(BUILD)/pyfuse3 pyfuse3==$(PYFUSE3_VER)
	tar xzf $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER).tar.gz -C $(BUILD)/pyfuse3
	cd $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER) && for p in $(PATCHES); do \
	  patch -p1 -s < $(CURDIR)/$$p || exit 1; done && rm -f src/pyfuse3/__init__.c
	@grep -q "^__version__ = '$(PYFUSE3_PATCHED)'$$" \
	  $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER)/src/pyfuse3/_pyfuse3.py || \
	  { echo "the startup patch does not write version $(PYFUSE3_PATCHED) in"; exit 1; }
	SETUPTOOLS_SCM_PRETEND_VERSION=$(PYFUSE3_PATCHED) \
	  $(PIP) wheel -q --no-deps -w $(BUILD)/wheels $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER)
	$(PIP) install -q --force-reinstall --no-deps $(BUILD)/wheels/pyfuse3-$(PYFUSE3_PATCHED)-*.whl
	$(PY) -c "from importlib.metadata import version as v; assert v('pyfuse3') == '$(PYFUSE3_PATCHED)', v('pyfuse3')"
	@touch $@

$(STAMPS)/package: $(STAMPS)/pyfuse3 pyproject.toml setup.py $(wildcard fakedebugfs/native/*.c) $(wildcard fakedebugfs/*/*.pyx fakedebugfs/*/*/*.pyx fakedebugfs/*/*/*.pxd)
	$(PIP) install -q -e '.[test]'
	@touch $@

# The two wheels of a release, for this Python ($(PYTHON)): the patched pyfuse3
# and fakedebugfs with its compiled fast paths and C helpers (no gcc needed
# where it is installed). `pip install $(DIST)/*.whl` in any venv of the same
# Python; docs/ci.md. setuptools' build/lib and build/bdist.* are emptied
# first (a module removed from the source must not stay in the wheel); in a
# read-only checkout setup.py builds in a temporary directory instead.
# One build for both: `make install`'s editable build compiles the Cython
# modules in place (in parallel, a process per core), and the wheel takes them
# as they are when they are newer than their sources (setup.py BuildExt).
dist: $(STAMPS)/package
	@mkdir -p $(DIST)
	rm -f $(DIST)/pyfuse3-*.whl $(DIST)/fakedebugfs-*.whl
	[ ! -w . ] || rm -rf $(BUILD)/lib.* $(BUILD)/bdist.*
	cp $(BUILD)/wheels/pyfuse3-$(PYFUSE3_PATCHED)-*.whl $(DIST)/
	$(PIP) wheel -q --no-deps -w $(DIST) .
	@ls $(DIST)/*.whl

# The C helpers (the splice preload library) are built into the package by
# setup.py; `fakedebugfs build-native` prints where they are (building them
# into the cache when the package's copy does not match the source).
native: $(STAMPS)/package
	$(VENV)/bin/fakedebugfs build-native --quiet

# mount(8) remounts a fake (-o remount,gid=N) through mount.fuse3, which runs
# `fakedebugfs` with the default PATH: link this checkout's command where it
# looks. Asked for by name only (it changes the host: one checkout's link for
# all), root only; an existing file of another origin is left alone.
install-system: $(STAMPS)/package
	@link=/usr/local/bin/fakedebugfs; \
	if [ ! -w /usr/local/bin ]; then echo "install-system: /usr/local/bin is not writable (root?)"; exit 1; \
	elif [ -e $$link ] && [ ! -L $$link ]; then echo "install-system: $$link is not a link: left alone"; exit 1; \
	else ln -sfn $(CURDIR)/$(VENV)/bin/fakedebugfs $$link && echo "$$link -> $(CURDIR)/$(VENV)/bin/fakedebugfs"; fi

# is a fake mounted at $(MNT)? (anything else mounted there is left alone)
FAKE_AT_MNT := awk -v m="$(MNT)" '$$2 == m && $$1 == "fakedebugfs" { f = 1 } END { exit !f }' /proc/self/mounts

# a fake mounted at $(MNT) before (by `make run`) is unmounted first
run: install
	@mkdir -p $(MNT)
	@if $(FAKE_AT_MNT); then $(VENV)/bin/fakedebugfs umount $(MNT); fi
	$(VENV)/bin/fakedebugfs mount $(MNT) --workload default --rate 2000 --enable-all
	@echo "mounted at $(MNT): try 'cat $(MNT)/ktrace/info'; 'make stop' unmounts"

stop:
	$(VENV)/bin/fakedebugfs umount $(MNT)

test: install
	$(VENV)/bin/pytest -q tests

# the oracle's kernel packages fetched and its image built ahead (make test
# does it at its first differential test otherwise): docs/oracle.md
oracle: install
	$(PY) -m fakedebugfs.oracle image

bench: install
	$(PY) -m bench

# ftracetest and the utests in the oracle guest and on the fake: docs/conformance.md (hours;
# CONFORMANCE_ARGS='--git-from DIR' where git.kernel.org cannot be reached)
conformance: install
	$(PY) -m bench.conformance $(CONFORMANCE_ARGS)

clean:
	@if $(FAKE_AT_MNT); then $(VENV)/bin/fakedebugfs umount $(MNT); fi
	rm -rf $(BUILD) $(VENV) $(DIST) *.egg-info .pytest_cache
