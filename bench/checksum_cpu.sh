#!/usr/bin/env bash
# Issue 49's count of what upload checksums cost: the share of the mount's CPU samples
# (perf record -e cpu-clock, 2000 Hz; hardware counters are not needed) in crc-fast while
# `dd` writes a 2 GiB file into a fresh mount of a local SeaweedFS and `flowfs unmount`
# waits for its upload (B6's work). RUNS=N runs (3), BIN=flowfs binary. Needs perf
# (Debian linux-perf) and `make setup`. Prints one line a run.
set -uo pipefail
command -v perf >/dev/null || { echo "checksum_cpu: perf not found (apt install linux-perf)" >&2; exit 1; }
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/flowfs}
S=$(mktemp -d "${TMPDIR:-/tmp}/flowfs-crc-XXXX"); mkdir -p $S/mnt $S/cache
python3 tests/integration/seaweed.py serve --state-dir $S > $S/serve.log 2>&1 &
SP=$!
cleanup() {
  # Never remove the state dir through a live mount.
  if grep -q " $S/mnt " /proc/mounts; then "$BIN" unmount "$S/mnt" 2>/dev/null || fusermount3 -u -z "$S/mnt"; fi
  kill $SP 2>/dev/null
  grep -q " $S/mnt " /proc/mounts || rm -rf "$S"
}
trap cleanup EXIT
for i in $(seq 1 300); do [ -f $S/ready ] && break; sleep 0.3; done
[ -f $S/ready ] || { echo "checksum_cpu: SeaweedFS did not start: $S/serve.log" >&2; cat $S/serve.log >&2; exit 1; }
source $S/env
python3 - <<'PY'
import os,sys
sys.path.insert(0,"tests/integration")
from seaweed import Credentials, make_client
c=make_client(os.environ["SEAWEED_S3_ENDPOINT"],Credentials(os.environ["AWS_ACCESS_KEY_ID"],os.environ["AWS_SECRET_ACCESS_KEY"]))
c.create_bucket(Bucket="prof")
PY
SRC=$S/src.bin
[ -f $SRC ] || dd if=/dev/urandom of=$SRC bs=1M count=2048 status=none
for r in $(seq 1 ${RUNS:-3}); do
  $BIN mount s3://prof $S/mnt --endpoint-url "$SEAWEED_S3_ENDPOINT" --cache-dir $S/cache --log-file $S/log --pid-file $S/pid
  PID=$(cat $S/pid)
  perf record -F 2000 -e cpu-clock -o $S/w.data -p $PID 2>/dev/null &
  PP=$!
  sleep 0.3
  dd if=$SRC of=$S/mnt/big$r.bin bs=1M status=none
  $BIN unmount $S/mnt >/dev/null 2>&1
  wait $PP || true
  total=$(perf report -i $S/w.data --stdio 2>/dev/null | grep -m1 "^# Samples" | awk '{print $3}')
  crc=$(perf report -i $S/w.data --no-children --sort sym --stdio 2>/dev/null | grep -iE "crc_fast" | awk '{s+=$1} END {print s+0}')
  echo "run $r: samples $total, crc_fast ${crc}%"
done
