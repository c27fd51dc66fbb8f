#!/usr/bin/env bash
# concat.sh OUT_VCF_GZ IN_VCF_GZ...: the per-region calls, in region order, into one file.
set -euo pipefail
out=$1; shift
bcftools concat -Oz -o "$out" "$@"
bcftools index -f "$out"
