#!/usr/bin/env bash
# flowfs demo: an embedded SeaweedFS on 127.0.0.1, a bucket with sample data (a few small
# files and one 256 MiB file), mounted with flowfs through a counting proxy, so you can see
# how few bytes a small read costs. Everything is stopped and removed on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
FLOWFS_BIN=${FLOWFS_BIN:-$PWD/target/release/flowfs}
[ -x "$FLOWFS_BIN" ] || { echo "demo: $FLOWFS_BIN not found: run 'make build' (or 'make demo')" >&2; exit 1; }

STATE=$(mktemp -d "${TMPDIR:-/tmp}/flowfs-demo-XXXXXX")
MNT="$STATE/mnt"
mkdir -p "$MNT" "$STATE/cache"
SERVE_PID=""

is_mounted() { awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/mounts; }

cleanup() {
  local rc=$?
  set +e
  if is_mounted "$MNT"; then
    "$FLOWFS_BIN" unmount "$MNT" >/dev/null 2>&1 || fusermount3 -u -z "$MNT"
  fi
  if [ -f "$STATE/flowfs.pid" ]; then
    pid=$(cat "$STATE/flowfs.pid" 2>/dev/null)
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "flowfs"; then
      kill -TERM "$pid" 2>/dev/null
    fi
  fi
  if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
    kill -TERM "$SERVE_PID"
    wait "$SERVE_PID" 2>/dev/null
  fi
  if is_mounted "$MNT"; then
    echo "demo: $MNT is still mounted; leaving $STATE" >&2
  else
    rm -rf "$STATE"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() { printf '\n== %s\n' "$*"; }

step "starting SeaweedFS (weed mini) and a counting proxy on 127.0.0.1"
"$PY" tests/integration/seaweed.py serve --state-dir "$STATE" --proxy >"$STATE/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do
  [ -f "$STATE/ready" ] && break
  kill -0 "$SERVE_PID" 2>/dev/null || { cat "$STATE/serve.log" >&2; exit 1; }
  sleep 0.3
done
[ -f "$STATE/ready" ] || { echo "demo: server did not start" >&2; exit 1; }
cat "$STATE/serve.log"
# shellcheck disable=SC1091
source "$STATE/env"  # credentials for this throwaway server; never printed

proxy_get_bytes() {
  "$PY" tests/integration/seaweed.py proxy-stats --state-dir "$STATE" ${1:-} |
    "$PY" -c 'import json,sys; print(json.load(sys.stdin)["get_bytes"])'
}

step "creating bucket 'demo' and uploading sample data with boto3"
"$PY" - <<'EOF'
import os, sys
sys.path.insert(0, "tests/integration")
from seaweed import Credentials, make_client
from helpers import MiB, payload, upload_large
c = make_client(os.environ["SEAWEED_S3_ENDPOINT"],
                Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]))
c.create_bucket(Bucket="demo")
small = {
    "README.txt": b"Hello from flowfs: this bucket is mounted as a directory.\n",
    "samples/sheet.csv": b"sample,reads,bases\nS1,1000,150000\nS2,2000,300000\n",
    "samples/reads.fastq": b"@r1\nACGTACGTAC\n+\nIIIIIIIIII\n@r2\nTTGCAAGGCT\n+\nIIIIIIIIII\n",
    "results/.keep": b"",
}
for k, v in small.items():
    c.put_object(Bucket="demo", Key=k, Body=v)
upload_large(c, "demo", "genome/big.bin", payload(256 * MiB, "demo-big"))
for o in c.list_objects_v2(Bucket="demo")["Contents"]:
    print(f"  {o['Size']:>10}  {o['Key']}")
EOF

step "flowfs mount s3://demo $MNT (through the proxy)"
"$FLOWFS_BIN" mount s3://demo "$MNT" --endpoint-url "$PROXY_ENDPOINT" --cache-dir "$STATE/cache" \
  --log-file "$STATE/flowfs.log" --pid-file "$STATE/flowfs.pid"
grep " $MNT " /proc/mounts

step "ls -l $MNT $MNT/samples $MNT/genome"
ls -l "$MNT" "$MNT/samples" "$MNT/genome"

step "dd: read 64 KiB from the middle of the 256 MiB file"
proxy_get_bytes --reset >/dev/null
dd if="$MNT/genome/big.bin" of=/dev/null bs=64K skip=2000 count=1 status=none
echo "object bytes the server sent for that: $(proxy_get_bytes) (of $((256 * 1024 * 1024)) in the file)"

step "cat $MNT/samples/sheet.csv"
cat "$MNT/samples/sheet.csv"

step "flowfs unmount $MNT"
"$FLOWFS_BIN" unmount "$MNT"
is_mounted "$MNT" && { echo "demo: still mounted" >&2; exit 1; }
echo "unmounted"
step "done (the server stops and the temp dir goes away now)"
