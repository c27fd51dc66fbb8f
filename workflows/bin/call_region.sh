#!/usr/bin/env bash
# call_region.sh REF_FA BAM REGION OUT_VCF_GZ: pileup and multiallelic calling of one region,
# variant sites only, bgzipped and indexed (.csi).
set -euo pipefail
fa=$1 bam=$2 region=$3 out=$4
bcftools mpileup -f "$fa" -r "$region" -a AD,DP -Ou "$bam" \
  | bcftools call -mv -Oz -o "$out"
bcftools index -f "$out"
