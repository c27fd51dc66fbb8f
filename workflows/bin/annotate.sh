#!/usr/bin/env bash
# annotate.sh IN_VCF_GZ ANNOT_TSV_GZ ANNOT_HDR OUT_VCF_GZ: add INFO/PHYLOP and INFO/GENE from
# the tabix-indexed annotation, matched by CHROM and POS (its REF column is skipped with `-`:
# bcftools 1.16 died with SIGSEGV on this file when asked to match REF). bcftools reads the
# annotation through its index (ANNOT_TSV_GZ.tbi next to it), so only the BGZF blocks of the
# contigs and positions the calls touch are read, not the whole file.
set -euo pipefail
in=$1 annot=$2 hdr=$3 out=$4
bcftools annotate -a "$annot" -c CHROM,POS,-,INFO/PHYLOP,INFO/GENE -h "$hdr" -Oz -o "$out" "$in"
bcftools index -f "$out"
