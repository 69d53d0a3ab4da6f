# fakedebugfs: `make run` mounts with a default workload, `make test` runs the suite.
# Both install what they need first (Debian packages, .venv, patched pyfuse3).

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
PIP         := $(VENV)/bin/pip
PYFUSE3_VER := 3.5.0
PATCHES     := $(addprefix patches/pyfuse3-$(PYFUSE3_VER)-,ioctl.patch fastpath.patch startup.patch readfast.patch)
BUILD       := build
STAMPS      := $(BUILD)/stamps
DEBS        := fuse3 libfuse3-dev pkg-config gcc make patch trace-cmd linux-perf bpftrace libbpf-tools gawk
MNT         ?= /tmp/fakedebugfs
NATIVE      := $(BUILD)/native

.PHONY: install run stop test bench clean debs venv pyfuse3 native mount-helper

install: $(STAMPS)/package native mount-helper

debs: $(STAMPS)/debs
$(STAMPS)/debs:
	@mkdir -p $(STAMPS)
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
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
# callback, without a task or a cancel scope; fast_path() tunes the fast path).
# The wheel stays in build/wheels: other environments (a user's venv, the
# plugin's fresh-venv test) install it with `pip install --find-links build/wheels`.
$(STAMPS)/pyfuse3: $(STAMPS)/venv $(PATCHES)
	rm -rf $(BUILD)/pyfuse3 $(BUILD)/wheels && mkdir -p $(BUILD)/pyfuse3 $(BUILD)/wheels
	$(PIP) download -q --no-deps --no-binary pyfuse3 -d $(BUILD)/pyfuse3 pyfuse3==$(PYFUSE3_VER)
	tar xzf $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER).tar.gz -C $(BUILD)/pyfuse3
	cd $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER) && for p in $(PATCHES); do \
	  patch -p1 -s < $(CURDIR)/$$p || exit 1; done && rm -f src/pyfuse3/__init__.c
	$(PIP) wheel -q --no-deps -w $(BUILD)/wheels $(BUILD)/pyfuse3/pyfuse3-$(PYFUSE3_VER)
	$(PIP) install -q --force-reinstall --no-deps $(BUILD)/wheels/pyfuse3-$(PYFUSE3_VER)-*.whl
	@touch $@

$(STAMPS)/package: $(STAMPS)/pyfuse3 pyproject.toml setup.py $(wildcard fakedebugfs/*/*.pyx fakedebugfs/*/*/*.pyx fakedebugfs/*/*/*.pxd)
	$(PIP) install -q -e '.[test]'
	@touch $@

# C helpers (the splice preload library and the test/bench readers) are built
# by the package itself on first use; this target builds them ahead of time.
native: $(STAMPS)/package
	$(VENV)/bin/fakedebugfs build-native --quiet

# mount(8) remounts a fake (-o remount,gid=N) through mount.fuse3, which runs
# `fakedebugfs` with the default PATH: link the command where it looks
# (root only; an existing file of another origin is left alone).
mount-helper: $(STAMPS)/package
	@link=/usr/local/bin/fakedebugfs; \
	if [ -w /usr/local/bin ] && { [ -L $$link ] || [ ! -e $$link ]; }; then \
	  ln -sfn $(CURDIR)/$(VENV)/bin/fakedebugfs $$link; fi

run: install
	@mkdir -p $(MNT)
	$(VENV)/bin/fakedebugfs umount $(MNT) 2>/dev/null || true
	$(VENV)/bin/fakedebugfs mount $(MNT) --workload default --rate 2000 --enable-all
	@echo "mounted at $(MNT): try 'cat $(MNT)/ktrace/info'; 'make stop' unmounts"

stop:
	$(VENV)/bin/fakedebugfs umount $(MNT)

test: install
	$(VENV)/bin/pytest -q tests

bench: install
	$(PY) -m bench

clean:
	rm -rf $(BUILD) $(VENV) *.egg-info .pytest_cache
