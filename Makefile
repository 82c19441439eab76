# xdpfleet: developer and CI entry points. Run as root on Debian 12.
#
#   make demo    bring up the network-namespace lab, run site.yml, print the report, tear the lab down
#   make test    install what is missing, lint, run unit and integration tests (as root)
#   make unit    the unit tests alone (no root needed)
#   make fuzz    fuzz every data plane with a million frames each
#   make test-kernels  every data plane in every mode on Debian's kernels in VMs (tests/vm; as root)
#
# Every target that needs them runs `deps` first; a re-run with nothing to do takes well under a second.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
BUILD_DIR := $(CURDIR)/.build
REPORTS_DIR := $(CURDIR)/reports
KEEP_LAB ?= 0

# Debian packages the lab, the tests and the XDP toolchain need on this machine; the last line is the VM kernel
# matrix's (tests/vm: QEMU, the guest's initramfs, depmod for the kernels' modules).
APT_PACKAGES := clang llvm libbpf-dev bpftool openssh-server iproute2 ethtool python3-venv make procps \
	tcpdump ca-certificates iputils-ping xdp-tools nftables graphviz systemd \
	qemu-system-x86 busybox-static cpio kmod

# The venv is rebuilt when pyproject.toml changes: its hash is part of the stamp's name.
PYPROJECT_HASH := $(shell sha256sum $(CURDIR)/pyproject.toml | cut -c1-16)
VENV_STAMP := $(VENV)/.xdpfleet-deps-$(PYPROJECT_HASH)

export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help deps apt-deps lint sanity build lab-down need-root test test-kernels unit fuzz demo clean abi
.PHONY: bench bench-vtep bench-trafficgen bench-filter bench-router bench-document bench-fabric bench-build scale
.PHONY: bench-next-hops

help:
	@echo "make demo      lab up, site.yml, print the report, lab down (KEEP_LAB=1 keeps the lab)"
	@echo "make test      deps, lint, then pytest tests (unit + integration; needs root)"
	@echo "make test-kernels  the VM kernel matrix: every data plane, every mode, on Debian 11/12/13 kernels (root)"
	@echo "make fuzz      fuzz every data plane, FUZZ_FRAMES (1000000) frames each from FUZZ_SEED (needs root)"
	@echo "make unit      pytest tests/unit (no root needed)"
	@echo "make deps      Debian packages (only missing ones) and the .venv from pyproject.toml"
	@echo "make lint      ruff, the host-Python checks (vermin), ansible-lint --profile production, make sanity"
	@echo "make sanity    ansible-test sanity on the built collection (SANITY_ARGS=\"--test pylint\" passes options)"
	@echo "make build     collection tarball in .build/ (via collection/build.sh)"
	@echo "make abi       rewrite bpf/<plane>/<plane>_abi.h from plugins/module_utils/<plane>/abi.py and layouts.py"
	@echo "make lab-down  tear down the default lab"
	@echo "make clean     remove .build and reports"
	@echo "make scale     the fleet tests (tests/scale) with SCALE_VTEPS (default 12) XDP VTEPs, timed; not in make test"
	@echo "make bench     run the benchmarks (bench-vtep, bench-trafficgen, bench-filter, bench-router, bench-document, bench-fabric, bench-next-hops; BENCH_ARGS=\"--seconds 5 --rounds 3\" passes options)"

deps: apt-deps $(VENV_STAMP)

# Install only the Debian packages that are missing; no apt-get at all when none is.
apt-deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed$$' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$missing"; \
		sudo=""; if [ "$$(id -u)" != 0 ]; then sudo="sudo"; fi; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(VENV_STAMP): | apt-deps
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "deps: need Python >= 3.11, $(PYTHON) is " + sys.version.split()[0])'
	@if ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
		echo "deps: creating $(VENV) with $$(command -v $(PYTHON))"; \
		rm -rf $(VENV); \
		$(PYTHON) -m venv $(VENV); \
	fi
	@rm -f $(VENV)/.xdpfleet-deps-*
	@# The project itself is not a Python package (packages = []): install its dependency lists directly,
	@# which leaves no build/ or *.egg-info behind in the tree.
	$(BIN)/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
		print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))' > $(VENV)/requirements.txt
	$(BIN)/python -m pip install -q -r $(VENV)/requirements.txt
	@touch $@

# Code that runs on managed hosts (modules, module_utils, the host-side entry points) runs on their Python,
# 3.9 and later: vermin checks what it uses against 3.9, runtime_unions.py the `X | Y` of types vermin cannot tell
# from annotations, and ruff (per-file target py39 in pyproject.toml) the syntax.
HOST_PYTHON_CODE := $(CURDIR)/plugins $(CURDIR)/roles/xdp_host/files/xdpfleet-restore \
	$(CURDIR)/roles/prometheus_textfile/files/xdpfleet-metrics

lint: deps sanity
	$(BIN)/ruff check .
	$(BIN)/vermin --quiet --violations --target=3.9- $(HOST_PYTHON_CODE)
	$(BIN)/python $(CURDIR)/collection/sanity/runtime_unions.py $(HOST_PYTHON_CODE)
	$(BIN)/ansible-lint --profile production

# ansible-test sanity on the collection as built (collection/sanity/run.sh), every test ansible-test 2.19 has for a
# collection: all of them run offline here (their requirements come from the package index; the pip bootstrap
# ansible-test would download is replaced by collection/sanity/get_pip_offline.py). On an idle machine about 40 s
# when ansible-test's virtual environments exist (~/.ansible/test/venv), 2.5 min when it creates them; pylint is
# most of it.
SANITY_ARGS ?=
sanity: deps
	$(CURDIR)/collection/sanity/run.sh --output-path $(BUILD_DIR)/sanity $(SANITY_ARGS)

build: deps
	ANSIBLE_GALAXY=$(BIN)/ansible-galaxy $(CURDIR)/collection/build.sh --output-path $(BUILD_DIR)

# The C headers of the numbers and map structs each data plane shares with Python, generated from their declaration
# in Python.
abi: deps
	$(BIN)/python $(CURDIR)/collection/abi_headers.py

lab-down: deps
	$(BIN)/ansible-playbook $(CURDIR)/playbooks/lab.yml -e lab_state=absent

# pytest exits 5 when it collects nothing: that fails here like any other failure. --durations lists the slowest
# tests, to keep the run under 15 minutes on 2 cores.
# PYTEST_WORKERS files run side by side (pytest-xdist), each worker with a lab of its own (tests/conftest.py);
# PYTEST_WORKERS=0 runs them one after the other in one process.
# Three: a lab playbook keeps this 2-core machine about two thirds busy (the rest is waiting on pings, sleeps and
# the hosts), so a third worker's lab fills what two leave idle.
PYTEST_WORKERS ?= 3
# First, before deps and lint: without root most of the suite (kernel, lab and integration tests) could not run.
need-root:
	@if [ "$$(id -u)" != 0 ]; then \
		echo "test: make test needs root (network namespaces, XDP, the lab's sshd); run it as root, or make unit" \
			"for the unit tests alone" >&2; \
		exit 1; \
	fi

# The unit tests run with no privilege at all (root with every capability dropped, and no way to gain one back),
# as `make unit` by any user would: a test that needs root belongs in another tier.
WITHOUT_PRIVILEGE := setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all --no-new-privs
# The other tests see the mounts of a fresh machine: a mount namespace of their own where nothing is mounted at
# /sys/fs/bpf, whatever this machine has mounted there (a test that needs bpffs mounts one of its own). Slave
# propagation: the machine's mounts still show, nothing the tests mount or unmount reaches the machine.
# tests/conftest.py refuses to start when XDPFLEET_TEST_FRESH_MOUNTS is set and a bpffs is still there.
AS_ON_A_FRESH_MACHINE := unshare --mount --propagation slave -- sh -c \
	'while mountpoint -q /sys/fs/bpf; do umount -l /sys/fs/bpf || exit 1; done; exec "$$@"' fresh-mounts \
	env XDPFLEET_TEST_FRESH_MOUNTS=1

# The VM kernel matrix and the VM managed hosts (tests/vm, marked kernel_matrix) run in make test-kernels only.
# Lint (ansible-test sanity most of it, which keeps one core busy) runs beside the tests, its output kept in
# .build/lint.log and shown at the end; a lint failure fails make test as a test failure does. `make lint` alone
# runs it in the foreground.
test: need-root deps
	@mkdir -p $(BUILD_DIR); \
	$(MAKE) --no-print-directory lint > $(BUILD_DIR)/lint.log 2>&1 & lint=$$!; \
	rc=0; $(WITHOUT_PRIVILEGE) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(CURDIR)/tests/unit || rc=$$?; \
	if [ "$$rc" = 0 ]; then \
		$(AS_ON_A_FRESH_MACHINE) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
			--durations=15 -m "not kernel_matrix" --ignore=$(CURDIR)/tests/unit $(CURDIR)/tests || rc=$$?; \
	fi; \
	if [ "$$rc" = 5 ]; then echo "test: pytest collected no tests" >&2; fi; \
	lint_rc=0; wait $$lint || lint_rc=$$?; \
	echo "---- lint (.build/lint.log)"; cat $(BUILD_DIR)/lint.log; \
	if [ "$$lint_rc" != 0 ]; then echo "test: lint failed (exit $$lint_rc)" >&2; [ "$$rc" != 0 ] || rc=$$lint_rc; fi; \
	exit $$rc

# Every data plane in every mode (XDP native and generic on virtio-net, the tc hook where it has one) on Debian's own
# kernels, one VM boot per kernel (tests/vm); prints the matrix (also in .build/kernel-matrix.md). The kernels are
# fetched once into /var/cache/xdpfleet-tests (XDPFLEET_VM_REFRESH=1 looks for newer ones).
test-kernels: need-root deps
	$(BIN)/python -m pytest -p no:xdist --durations=5 -m kernel_matrix $(CURDIR)/tests/vm

# The fleet test at a size make test leaves out; it prints the rollout wall times.
SCALE_VTEPS ?= 12
scale: deps
	XDPFLEET_SCALE_VTEPS=$(SCALE_VTEPS) $(BIN)/python -m pytest -s $(CURDIR)/tests/scale

# The data planes' fuzz tests at full size (`make test` runs them at tests/kernel/fuzzlib.py's DEFAULT_FRAMES, seed 1).
# One process, output shown: each data plane prints its frames, seed and rate. Then a VTEP update killed at every
# one of its steps, for each backend and XDP mode (make test tries a few), which prints the kill points, the hosts
# left between configurations and the time.
FUZZ_FRAMES ?= 1000000
FUZZ_SEED ?= $(shell date +%s)
fuzz: deps
	FUZZ_FRAMES=$(FUZZ_FRAMES) FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest -p no:xdist -s -q \
		$(CURDIR)/tests/kernel/test_fuzz_*.py
	XDPFLEET_TEST_KILL_POINTS=all $(BIN)/python -m pytest -p no:xdist -s -q \
		$(CURDIR)/tests/kernel/test_vtep_crash_consistency.py

unit: deps
	$(BIN)/python -m pytest $(CURDIR)/tests/unit

# The lab is torn down on exit, also after a failure or Ctrl-C, unless KEEP_LAB=1.
demo: deps
	@mkdir -p $(BUILD_DIR) $(REPORTS_DIR); \
	if [ "$(KEEP_LAB)" != 1 ]; then \
		trap 'echo "demo: tearing the lab down (KEEP_LAB=1 keeps it)"; \
			$(BIN)/ansible-playbook $(CURDIR)/playbooks/lab.yml -e lab_state=absent >$(BUILD_DIR)/demo-lab-down.log 2>&1 \
			|| echo "demo: lab teardown failed, see $(BUILD_DIR)/demo-lab-down.log" >&2' EXIT; \
		trap 'exit 130' INT TERM; \
	fi; \
	start=$(BUILD_DIR)/demo.start; touch $$start; \
	$(BIN)/ansible-playbook $(CURDIR)/playbooks/lab.yml; \
	$(BIN)/ansible-playbook $(CURDIR)/site.yml; \
	reports=$$(find $(REPORTS_DIR) -type f -newer $$start | sort); \
	if [ -z "$$reports" ]; then echo "demo: site.yml wrote no report under $(REPORTS_DIR)" >&2; exit 1; fi; \
	for f in $$reports; do case "$$f" in *.md|*.txt) echo; echo "==== $$f"; cat "$$f";; \
		*.svg) echo; echo "==== picture: $$f (open it in a browser)";; esac; done; \
	echo; echo "demo: reports written:"; printf '  %s\n' $$reports

clean:
	rm -rf $(BUILD_DIR) $(REPORTS_DIR) $(CURDIR)/.pytest-tmp

# Benchmarks print tables of ratios from one run (needs root, 2 CPUs); not part of `make test`.
BENCH_ARGS ?=
bench: bench-vtep bench-trafficgen bench-filter bench-router bench-document bench-fabric bench-next-hops

bench-vtep: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_vtep.py $(BENCH_ARGS)

bench-trafficgen: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_trafficgen.py $(BENCH_ARGS)

bench-filter: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_filter.py $(BENCH_ARGS)

# xdp-tools' xdp-forward as the reference, when XDPFLEET_XDP_FORWARD names one built outside the project (tests/bench/README.md).
bench-router: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_router.py $(BENCH_ARGS)

# One VTEP with 1,000 and 4,000 VNIs through ansible-playbook, and the vtep module's phases (a lab of its own); its
# options (--vnis, --rounds, ...) in BENCH_DOCUMENT_ARGS, as BENCH_ARGS' --seconds mean nothing to it.
BENCH_DOCUMENT_ARGS ?=
bench-document: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_vtep_document.py $(BENCH_DOCUMENT_ARGS)

# A compile-cache hit per data plane: the key worked out with clang (as before the manifests) against the manifest.
# One pass of the next-hop refresher over 1,000 VNIs of a few peers: netlink requests and wall time.
bench-next-hops: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_next_hops.py $(BENCH_NEXT_HOPS_ARGS)

bench-build: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_build.py

# The fabric model's derivation and fleet check for 1,000 VTEPs and 100 VNIs, on the controller only (no lab).
BENCH_FABRIC_ARGS ?=
bench-fabric: deps
	$(BIN)/python $(CURDIR)/tests/bench/bench_fabric.py $(BENCH_FABRIC_ARGS)
