#!/usr/bin/env bash
# sort.sh IN_BAM OUT_BAM THREADS: coordinate sort, then the .bai index.
set -euo pipefail
in=$1 out=$2 threads=${3:-2}
samtools sort -@ "$threads" -m 256M -T "$out.tmp" -o "$out" "$in"
samtools index "$out"
