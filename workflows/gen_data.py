#!/usr/bin/env python3
"""Make the input data of the flowfs test pipeline, deterministically from a seed.

    python3 workflows/gen_data.py OUT_DIR [--mode ci|bench] [--seed N]

Writes into OUT_DIR:
  ref.fa                 the reference: two contigs (chr7, chr19) of random sequence
  reads_1.fq.gz          paired-end reads simulated with wgsim (its own seed -S) from a
  reads_2.fq.gz          diploid genome wgsim derives from ref.fa with SNPs and small indels
  regions.txt            the scatter regions of the variant calling, one `chr:from-to` a line
  annot.tsv.gz(.tbi)     a LARGE bgzipped, tabix-indexed per-position annotation (a
                         conservation score and a gene name for every base) of a whole
                         22-chromosome "assembly", of which the reference is two contigs;
                         the pipeline's variants only touch those two, so an annotation step
                         that reads through the tabix index reads a small part of the file
                         (the VEP-cache / CADD case)
  annot.hdr              the VCF header lines of the annotation's INFO fields
  manifest.json          sizes and sha256 of every file, the parameters, the byte span of the
                         reference contigs inside annot.tsv.gz

The files depend only on the mode and the seed (and on the versions of wgsim and bgzip).
ci: ~200 kb of reference, ~30x coverage, an annotation of ~64 MiB (large enough that reading
it whole shows); bench: ~1.6 Mb, ~30x, ~220 MiB. Needs wgsim (Debian package samtools), bgzip
and tabix (package tabix).
"""

from __future__ import annotations

import argparse
import array
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODES = {
    # ref contigs (name, length), read pairs, annotation target (compressed bytes), regions per contig
    "ci": {"contigs": [("chr7", 120_000), ("chr19", 80_000)], "pairs": 30_000,
           "annot_bytes": 64 << 20, "regions_per_contig": 4},
    "bench": {"contigs": [("chr7", 1_000_000), ("chr19", 600_000)], "pairs": 240_000,
              "annot_bytes": 220 << 20, "regions_per_contig": 8},
    # for quick development runs only
    "tiny": {"contigs": [("chr7", 30_000), ("chr19", 20_000)], "pairs": 4_000,
             "annot_bytes": 2 << 20, "regions_per_contig": 2},
}
ASSEMBLY = [f"chr{i}" for i in range(1, 23)]  # the annotation's contigs, in file order
READ_LEN = 100
# compressed bytes per annotation line, measured with bgzip 1.16 on this generator's lines;
# used to size the filler contigs (the real size is in manifest.json)
BYTES_PER_LINE = 5.8

HEADER_LINES = [
    '##INFO=<ID=PHYLOP,Number=1,Type=Float,Description="Conservation score (synthetic, flowfs test data)">',
    '##INFO=<ID=GENE,Number=1,Type=String,Description="Gene the position lies in (synthetic)">',
]


def log(msg: str) -> None:
    print(f"gen_data: {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    return h.hexdigest()


def random_seq(rng: random.Random, n: int) -> str:
    # randbytes -> ACGT: 2 bits per base, 4 bases per byte
    table = [("ACGT"[b & 3] + "ACGT"[(b >> 2) & 3] + "ACGT"[(b >> 4) & 3] + "ACGT"[b >> 6]) for b in range(256)]
    raw = rng.randbytes((n + 3) // 4)
    return "".join(table[b] for b in raw)[:n]


def write_fasta(path: Path, contigs: dict[str, str]) -> None:
    with open(path, "w") as f:
        for name, seq in contigs.items():
            f.write(f">{name}\n")
            for i in range(0, len(seq), 60):
                f.write(seq[i:i + 60] + "\n")


def annotation_lines(rng: random.Random, chrom: str, seq: str | None, length: int, block: int = 500_000):
    """Text blocks of `CHROM POS REF PHYLOP GENE` lines, one line per position 1..length:
    REF is the reference base (random for contigs not in the reference), PHYLOP one of 65,536
    scores, GENE changes every 3 kb."""
    scores = [f"{(v - 32768) / 4096:.3f}" for v in range(65536)]
    suffix = [f"\t{b}\t{sc}\t" for b in "ACGT" for sc in scores]  # index: base << 16 | score
    code = {"A": 0, "C": 1, "G": 2, "T": 3}
    gene_len = 3_000
    genes = [f"G{chrom[3:]}_{k:05d}\n" for k in range(length // gene_len + 1)]
    pre = chrom + "\t"
    pos = 1
    while pos <= length:
        end = min(length, pos + block - 1)
        n = end - pos + 1
        sc = array.array("H", rng.randbytes(2 * n))
        if seq is None:
            bases = [b & 3 for b in rng.randbytes(n)]
        else:
            bases = [code[c] for c in seq[pos - 1:end]]
        yield "".join([pre + str(p) + suffix[(b << 16) | v] + genes[p // gene_len]
                       for p, b, v in zip(range(pos, end + 1), bases, sc)])
        pos = end + 1


def make_annotation(out: Path, rng: random.Random, ref: dict[str, str], target_bytes: int) -> dict:
    """annot.tsv.gz + .tbi: every position of the reference contigs (real REF bases), and
    filler contigs of random REF bases sized so the file is about target_bytes."""
    ref_lines = sum(len(s) for s in ref.values())
    filler_names = [c for c in ASSEMBLY if c not in ref]
    filler_lines = max(len(filler_names) * 1000, int(target_bytes / BYTES_PER_LINE) - ref_lines)
    per_filler = filler_lines // len(filler_names)
    gz = out / "annot.tsv.gz"
    t0 = time.monotonic()
    with open(gz, "wb") as f:
        bg = subprocess.Popen(["bgzip", "-c", "-@", "2"], stdin=subprocess.PIPE, stdout=f)
        try:
            bg.stdin.write(b"#CHROM\tPOS\tREF\tPHYLOP\tGENE\n")
            for c in ASSEMBLY:
                seq = ref.get(c)
                length = len(seq) if seq is not None else per_filler
                for text in annotation_lines(rng, c, seq, length):
                    bg.stdin.write(text.encode())
        finally:
            bg.stdin.close()
            rc = bg.wait()
    if rc != 0:
        raise RuntimeError(f"bgzip exit {rc}")
    subprocess.run(["tabix", "-f", "-s", "1", "-b", "2", "-e", "2", "-c", "#", str(gz)], check=True)
    log(f"annot.tsv.gz: {gz.stat().st_size / 2**20:.1f} MiB in {time.monotonic() - t0:.0f} s")
    return {"lines": ref_lines + per_filler * len(filler_names), "contigs": ASSEMBLY,
            "ref_contig_spans": ref_contig_spans(gz, list(ref))}


def ref_contig_spans(gz: Path, contigs: list[str]) -> dict[str, list[int]]:
    """Compressed byte range [start, end) of each reference contig in the bgzip file: from the
    BGZF block holding its first line to the end of the block holding its last line. Found by
    walking the BGZF blocks (each block's header says its size)."""
    spans: dict[str, list[int]] = {}
    import struct
    import zlib

    with open(gz, "rb") as f:
        off = 0
        while True:
            head = f.read(18)
            if len(head) < 18:
                break
            bsize = struct.unpack("<H", head[16:18])[0] + 1
            rest = f.read(bsize - 18)
            data = zlib.decompress(head + rest, 31) if bsize > 28 else b""
            # each block: which of our contigs start a line in it
            for c in contigs:
                tag = (c + "\t").encode()
                if data.startswith(tag) or (b"\n" + tag) in data:
                    s = spans.setdefault(c, [off, off + bsize])
                    s[1] = off + bsize
            off += bsize
    return spans


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mode", choices=sorted(MODES), default="ci")
    ap.add_argument("--seed", type=int, default=20261123)
    args = ap.parse_args(argv)
    for tool in ("wgsim", "bgzip", "tabix"):
        if shutil.which(tool) is None:
            raise SystemExit(f"gen_data: {tool} not found (make workflow-deps)")
    m = MODES[args.mode]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    t0 = time.monotonic()

    ref = {name: random_seq(rng, n) for name, n in m["contigs"]}
    write_fasta(out / "ref.fa", ref)

    # reads: wgsim mutates the reference (SNPs + 15% indels, diploid) and samples pairs
    wg_seed = rng.randrange(1, 2**31)
    tmp1, tmp2 = out / "reads_1.fq", out / "reads_2.fq"
    with open(out / "wgsim_mutations.txt", "w") as truth:
        subprocess.run(["wgsim", "-S", str(wg_seed), "-N", str(m["pairs"]), "-1", str(READ_LEN), "-2", str(READ_LEN),
                        "-e", "0.002", "-r", "0.002", "-R", "0.15", "-d", "350", "-s", "35",
                        str(out / "ref.fa"), str(tmp1), str(tmp2)], check=True, stdout=truth, stderr=subprocess.DEVNULL)
    for tmp in (tmp1, tmp2):
        with open(tmp, "rb") as src, open(str(tmp) + ".gz", "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        tmp.unlink()

    with open(out / "regions.txt", "w") as f:
        for name, n in m["contigs"]:
            k = m["regions_per_contig"]
            step = (n + k - 1) // k
            for i in range(k):
                f.write(f"{name}:{i * step + 1}-{min(n, (i + 1) * step)}\n")

    (out / "annot.hdr").write_text("\n".join(HEADER_LINES) + "\n")
    ann = make_annotation(out, rng, ref, m["annot_bytes"])

    files = {}
    for p in sorted(out.iterdir()):
        if p.is_file() and p.name != "manifest.json":
            files[p.name] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    manifest = {"mode": args.mode, "seed": args.seed, "wgsim_seed": wg_seed, "contigs": dict(m["contigs"]),
                "pairs": m["pairs"], "read_len": READ_LEN, "annotation": ann, "files": files}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(v["size"] for v in files.values())
    log(f"{args.mode} data in {out}: {len(files)} files, {total / 2**20:.1f} MiB, {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
