#!/usr/bin/env bash
# align.sh REF_FA R1 R2 OUT_BAM THREADS: bwa mem -> unsorted BAM. -K fixes the batch size so
# the result does not depend on the number of threads.
set -euo pipefail
fa=$1 r1=$2 r2=$3 out=$4 threads=${5:-2}
bwa mem -t "$threads" -K 10000000 -R '@RG\tID:sample1\tSM:sample1\tPL:ILLUMINA' "$fa" "$r1" "$r2" \
  | samtools view -b -o "$out" -
