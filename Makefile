# flowfs: build, test, demo. Every target installs what it needs (scripts/setup.sh).
SHELL := /bin/bash
PYTHON ?= python3
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
FLOWFS_BIN ?= $(TARGET_DIR)/release/flowfs
export FLOWFS_BIN

.PHONY: setup setup-demo build build-bin dist slurm-deps test-slurm lint test test-rust test-integration test-stores bench-stores test-exercisers test-faults test-realworld demo bench bench-latency bench-quick bench-archives bench-scale bench-scale-core bench-shared bench-reuse bench-copy bench-passthrough workflow-deps test-workflows

setup:
	PYTHON=$(PYTHON) bash scripts/setup.sh

# What the demo needs only (fuse3, the weed server, boto3): no test tool.
setup-demo:
	PYTHON=$(PYTHON) bash scripts/setup.sh demo

# Nextflow (Maven Central), Snakemake (pip venv) and the bioinformatics tools (apt) for the
# workflow tests and benchmark B7; not part of `setup` (set FLOWFS_WORKFLOW_DEPS=1 for that).
workflow-deps:
	PYTHON=$(PYTHON) bash scripts/workflow-deps.sh

# The one release build everything else uses.
build:
	cargo build --release

# A static (musl) flowfs for any node or container image: dist/flowfs, stripped, and its
# debug information in dist/flowfs.debug (scripts/dist.sh; prints the size).
dist:
	bash scripts/dist.sh

# Slurm, munge and a static busybox from Debian, for `make test-slurm`.
slurm-deps:
	bash scripts/slurm-deps.sh

# The two-node Slurm cluster tests (tests/integration/test_slurm.py), run with the static
# dist/flowfs on every node and in the minimal task root. About 3 minutes on 2 cores.
test-slurm: setup workflow-deps slurm-deps dist
	FLOWFS_BIN=$(CURDIR)/dist/flowfs $(PYTHON) -m pytest tests/integration -v -m slurm

# Formatting and lints (clippy with warnings as errors).
lint:
	cargo fmt --all -- --check
	cargo clippy --release --workspace --all-targets -- -D warnings

test: setup build lint
	cargo test --release --workspace
	$(PYTHON) -m pytest tests/integration -v --durations=25

# Pieces of `test`, for when setup and build are already done.
test-rust:
	cargo test --release --workspace

test-integration:
	$(PYTHON) -m pytest tests/integration -v --durations=25

# The external exercisers only: fsx and pjdfstest on real mounts (also part of `test`;
# setup installs both with cargo install). About 5 minutes on 2 cores.
test-exercisers: setup build
	$(PYTHON) -m pytest tests/integration/test_fsx.py tests/integration/test_pjdfstest.py -v

# The other stores' tests only (issue 30): Azure Blob on Azurite (`-m azure`) and GCS on
# fake-gcs-server (`-m gcs`), each with the emulator's own checks. Also part of `test`.
test-stores: setup build
	$(PYTHON) -m pytest tests/integration -v -m "azure or gcs"

# The Nextflow/Snakemake end-to-end tests only (tests/integration/test_workflows.py).
test-workflows: setup workflow-deps build
	$(PYTHON) -m pytest tests/integration -v -m workflows

# Everything under a failing store at full size (issue 14): the fault suites with the write
# mix in full at both levels (also on Azurite and fake-gcs-server, which CI leaves out), the
# whole pipeline matrix (Nextflow and Snakemake at 5 % and 20 %, the server stopped mid-run
# for each), kill -9 at 20 moments of the write mix.
# FLOWFS_WF_FAULT_REPEAT=N repeats each pipeline case. About an hour on 2 cores.
test-faults: setup workflow-deps build
	FLOWFS_FAULTS_FULL=1 FLOWFS_CRASH_ROUNDS=$${FLOWFS_CRASH_ROUNDS:-20} $(PYTHON) -m pytest -v \
		tests/integration/test_faults.py tests/integration/test_workflow_faults.py \
		tests/integration/test_crash_mix.py \
		tests/integration/test_azure.py::test_read_set_under_faults \
		tests/integration/test_azure.py::test_write_mix_under_faults \
		tests/integration/test_gcs.py::test_read_set_under_faults \
		tests/integration/test_gcs.py::test_write_mix_under_faults

# The real-tools suite in full (tests/integration/test_realworld.py): sh, tar, rsync, git,
# pip, sqlite3, mmap and O_APPEND writers, stress-ng, dbench and fs_mark on real mounts
# against local runs, passthrough on and off, again after a remount with an empty cache.
# `make test` runs all of it but dbench and fs_mark. About 2 minutes on 2 cores.
test-realworld: setup build
	FLOWFS_REALWORLD_FULL=1 $(PYTHON) -m pytest tests/integration/test_realworld.py -v --durations=0

# What the demo needs is installed while the binary builds (`-p flowfs`: not the test
# kit); both are needed before it runs.
demo:
	$(MAKE) --no-print-directory -j2 setup-demo build-bin
	bash scripts/demo.sh

# The flowfs binary alone.
build-bin:
	cargo build --release -p flowfs

# Benchmarks against the peers (docs/BENCHMARKS.md); the suite installs the peers itself.
# Every default workload (B1, B1s, B1p, B1c, B2-B8) at 0 ms and at S3's 20 ms (issue 48).
bench: setup workflow-deps build
	$(PYTHON) bench/run.py --doc --latency 0,20
	$(PYTHON) bench/run.py --workloads B11 --tools flowfs,ratarmount --latency 0,20 --runs 3

# Issue 27: the many-small-files workloads at 0 ms and at S3's 20 ms first-byte latency
# (the counting proxy waits before each request), flowfs against s5cmd (always in a run);
# RUNS=3 by default.
bench-latency: setup build
	$(PYTHON) bench/run.py --workloads B1,B1s,B2,B4,B8 --latency 0,20 --runs $(or $(RUNS),3) \
		--tools $(or $(BENCH_TOOLS),flowfs)

# Issue 29: B11, archives read in place (bench/flowbench/b11.py): a 2 GiB tar of 10,000 files
# and its .tar.gz mounted by flowfs and by ratarmount (s3:// through fsspec), at 0 and 20 ms;
# RUNS=3 by default, QUICK=1 for the 64 MiB data set. Part of bench (after the others), not of
# bench-quick (CI).
bench-archives: setup build
	$(PYTHON) bench/run.py --workloads B11 --tools flowfs,ratarmount --latency 0,20 --runs $(or $(RUNS),3) $(if $(QUICK),--quick)

# BENCH_TOOLS=a,b limits the peers (CI: flowfs and the mounting peers, not the copy CLIs).
bench-quick: setup build
	$(PYTHON) bench/run.py --quick $(if $(BENCH_TOOLS),--tools $(BENCH_TOOLS))

# Issue 30's store benchmark (bench/stores.py): B1 and B3 on Azure Blob (Azurite) through
# flowfs against rclone's azureblob backend and Azure's Python SDK, then on GCS
# (fake-gcs-server) against rclone's gcs backend.
bench-stores: setup build
	$(PYTHON) bench/stores.py --store azure --runs $(or $(RUNS),3)
	$(PYTHON) bench/stores.py --store gcs --runs $(or $(RUNS),3)

# Issue 16's node-cache benchmark (bench/shared_cache.py): 8 concurrent `flowfs run` tasks on
# one --cache-dir, each reading the same object cold; SIZE=1G by default, PRIVATE=1 adds the
# same tasks with a cache dir each.
bench-shared: setup build
	$(PYTHON) bench/shared_cache.py --size $(or $(SIZE),1G) $(if $(PRIVATE),--private)

# Issue 48's benchmark of small files kept in the node cache (bench/reuse.py): 2,000 × 256 KiB
# copied by three mounts in turn on one cache dir (read once, admitting, kept);
# BASELINE=path/to/flowfs runs the build before alternately in the same run.
bench-reuse: setup build
	$(PYTHON) bench/reuse.py --runs $(or $(RUNS),3) $(if $(BASELINE),--base-bin $(BASELINE))

# Issue 49's benchmark of copies within a mount (bench/copies.py): `cp` of one SIZE object
# onto a new file of the mount against `aws s3 cp` within the bucket, at 0 and 20 ms.
bench-copy: setup build
	$(PYTHON) bench/copies.py --runs $(or $(RUNS),3) --size $(or $(SIZE),2G)

# Issue 16's passthrough benchmark (bench/passthrough.py): a cached read after drop_caches,
# a big write and small writes (their write phases) with --passthrough auto and off against
# local disk, interleaved; SIZE=2G and RUNS=3 by default.
bench-passthrough: setup build
	$(PYTHON) bench/passthrough.py --size $(or $(SIZE),2G) --runs $(or $(RUNS),3)

# Issue 15's scale benchmark (bench/scale.py): 100,000 files in 100 directories; re-listing
# one directory on a mount that has seen all of them against one that has seen only it.
# BASELINE=path/to/flowfs measures the build before in the same run.
bench-scale: setup build
	$(PYTHON) bench/scale.py $(if $(BASELINE),--baseline-bin $(BASELINE))

# The same targets on the core over the in-memory store, at 100,000 and 1,000,000 files
# (crates/flowfs-fs/tests/fs/scale_probe.rs): RSS per file seen, the walk's time, re-listing.
bench-scale-core: setup
	for d in 100 1000; do PROBE_DIRS=$$d cargo test --release -p flowfs-fs --test fs scale_probe -- --ignored --nocapture 2>&1 | grep -E 'walk|ratio'; done
