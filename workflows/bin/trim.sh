#!/usr/bin/env bash
# trim.sh R1 R2 OUT1 OUT2 JSON THREADS: adapter/quality trimming with fastp.
set -euo pipefail
r1=$1 r2=$2 o1=$3 o2=$4 json=$5 threads=${6:-2}
fastp -i "$r1" -I "$r2" -o "$o1" -O "$o2" -w "$threads" --json "$json" --html /dev/null \
      --detect_adapter_for_pe --length_required 50
