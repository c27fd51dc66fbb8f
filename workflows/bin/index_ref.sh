#!/usr/bin/env bash
# index_ref.sh REF_FA OUT_FA: copy the reference to OUT_FA and index it for bwa and samtools.
set -euo pipefail
ref=$1 out=$2
cp -L "$ref" "$out"
bwa index "$out"
samtools faidx "$out"
