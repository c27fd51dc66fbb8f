#!/usr/bin/env python3
"""Issue 48's benchmark of small files kept in the node cache: FILES objects of SIZE bytes
copied with `cp -r` by three mounts one after another on one cache directory, under the
default admission (`--cache-admit reuse`):

1. `read once`: the first open on the node; nothing is written to the cache;
2. `admitting`: the second open admits every object; its bytes are kept (packed in
   segments, or, before that change, an entry of two files each);
3. `kept`: read from the cache.

    python3 bench/reuse.py [--files 2000] [--size 256K] [--runs 3] [--base-bin OLD_FLOWFS] [--archive]

With `--archive`, the same files are members of one tar object, mounted in place
(`flowfs mount s3://BUCKET/reuse.tar DIR`, as B11 does): each member is a version of its own
in the node cache.

Starts its own SeaweedFS on 127.0.0.1 behind the counting proxy (bench/flowbench/server.py).
Each pass is a fresh mount with the page cache dropped; per pass: `cp`'s wall time, the mount
process's CPU, GETs the proxy saw, and the files in the cache directory afterwards. With
`--base-bin`, the two builds run alternately in each run on the same server. Medians of the
runs are printed as a markdown table; every copy is checked against the objects' sha256.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from flowbench import util  # noqa: E402
from flowbench.server import BUCKET, REGION, Server  # noqa: E402

PREFIX = "reuse"
PASSES = ["read once", "admitting", "kept"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", default="256K", help="object size: 64K, 256K, 1M")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=os.environ.get("FLOWFS_BIN", str(ROOT / "target" / "release" / "flowfs")))
    ap.add_argument("--base-bin", default=os.environ.get("FLOWFS_BASE_BIN"),
                    help="an earlier flowfs build, run alternately with --bin")
    ap.add_argument("--archive", action="store_true", help="the files as members of one tar object")
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--tmp", default=os.environ.get("FLOWFS_BENCH_TMP", tempfile.gettempdir()))
    return ap.parse_args(argv)


def upload(server: Server, work: Path, n: int, size: int, archive: bool) -> dict[str, str]:
    """The objects (or one tar of them); their names and sha256."""
    import concurrent.futures as cf
    import io
    import tarfile

    def put(i: int) -> tuple[str, str]:
        body = os.urandom(size)
        name = f"f{i:05d}"
        if not archive:
            server.direct.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{name}", Body=body)
        return name, hashlib.sha256(body).hexdigest(), body

    if not archive:
        with cf.ThreadPoolExecutor(16) as ex:
            return {name: h for name, h, _ in ex.map(put, range(n))}
    tar, want = work / f"{PREFIX}.tar", {}
    with tarfile.open(tar, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            name, h, body = put(i)
            info = tarfile.TarInfo(f"{PREFIX}/{name}")
            info.size, info.mtime = len(body), 1_700_000_000
            t.addfile(info, io.BytesIO(body))
            want[name] = h
    server.direct.upload_file(str(tar), BUCKET, f"{PREFIX}.tar")
    tar.unlink()
    return want


def mount_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_pass(server: Server, binary: str, work: Path, cache: Path, want: dict[str, str], source: str) -> dict:
    mnt, dest = work / "mnt", work / "copy"
    mnt.mkdir(exist_ok=True)
    util.rm_rf(dest)
    subprocess.run([binary, "mount", source, str(mnt), "--cache-dir", str(cache),
                    "--endpoint-url", server.endpoint, "--region", REGION, "--cache-min-free", "0"],
                   env=server.env(), check=True, timeout=120)
    try:
        pid = int(subprocess.run(["pgrep", "-f", f"mount {source} {mnt}"], capture_output=True,
                                 text=True).stdout.split()[0])
        util.drop_caches()
        server.reset_counts()
        cpu0, t0 = mount_cpu(pid), time.perf_counter()
        r = subprocess.run(["cp", "-r", str(mnt / PREFIX), str(dest)], timeout=1800)
        wall, cpu = time.perf_counter() - t0, mount_cpu(pid) - cpu0
        gets = sum(v for k, v in server.counts()["ops"].items() if k.startswith("GET"))
    finally:
        subprocess.run([binary, "unmount", str(mnt)], env=server.env(), check=True, timeout=300)
    bad = [n for n, h in want.items() if hashlib.sha256((dest / n).read_bytes()).hexdigest() != h]
    if r.returncode != 0 or bad:
        raise RuntimeError(f"cp exit {r.returncode}, {len(bad)} files differ")
    files = sum(len(fs) for _, _, fs in os.walk(cache / "objects"))
    return {"wall_s": wall, "cpu_s": cpu, "gets": gets, "cache_files": files}


def main(argv=None) -> int:
    args = parse_args(argv)
    util.install_signal_handlers()
    size = util.parse_size(args.size)
    builds = {"flowfs": args.bin} | ({"base": args.base_bin} if args.base_bin else {})
    work = Path(tempfile.mkdtemp(prefix="flowfs-reuse-", dir=args.tmp))
    rows = []
    try:
        server = Server(work).start()
        want = upload(server, work, args.files, size, args.archive)
        source = f"s3://{BUCKET}/{PREFIX}.tar" if args.archive else f"s3://{BUCKET}"
        for run in range(args.runs):
            for name, binary in builds.items():
                cache = work / f"cache-{name}"
                util.rm_rf(cache)
                for p in PASSES:
                    r = {"build": name, "run": run, "pass": p} | one_pass(server, binary, work, cache, want, source)
                    util.log(json.dumps(r))
                    rows.append(r)
    finally:
        util.cleanup_all()
        util.rm_rf(work)
    util.save_results(args.out, "reuse", {"args": vars(args), "rows": rows})
    what = "members of one tar" if args.archive else "objects"
    print(f"\n`cp -r` of {args.files} × {args.size} {what} by three mounts in turn on one cache dir "
          f"(medians of {args.runs})\n")
    print("| build | pass | wall | mount CPU | GETs | files in the cache dir |")
    print("|---|---|---|---|---|---|")
    for name in builds:
        for p in PASSES:
            rs = [r for r in rows if r["build"] == name and r["pass"] == p]
            med = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "gets", "cache_files")}
            print(f"| {name} | {p} | {med['wall_s']:.2f} s | {med['cpu_s']:.2f} s | {med['gets']:.0f} "
                  f"| {med['cache_files']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
