#!/usr/bin/env python3
"""Issue 49's benchmark of copies within a mount: `cp` of one object of SIZE bytes onto a new
file of the same mount (a copy on the server, `copy_file_range`), against
`aws s3 cp s3://B/src s3://B/dst` (also on the server: CopyObject, or UploadPartCopy in
8 MiB parts above its threshold), both through the counting proxy in front of one SeaweedFS,
alternately in each run.

    python3 bench/copies.py [--size 2G] [--runs 3] [--latency 0,20] [--passthrough off]

Per run and tool: the wall time of the copy, and the GET and upload body bytes the proxy saw
(the bytes that went through the node). flowfs's copy is timed from `cp` to the end of
`flowfs unmount` (everything durable). Medians are printed as a markdown table; the copies'
bytes are checked against the source's sha256 (read straight from the server).
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

from flowbench import install, util  # noqa: E402
from flowbench.server import BUCKET, REGION, Server  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2G", help="object size: 64M, 2G, 4G (above 4 GiB - 4 KiB `cp` makes several calls)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--passthrough", default="off", choices=["off", "auto"])
    ap.add_argument("--latency", default="0,20", help="first-byte latencies in ms the proxy adds, e.g. 0,20")
    ap.add_argument("--bin", default=os.environ.get("FLOWFS_BIN", str(ROOT / "target" / "release" / "flowfs")))
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--tmp", default=os.environ.get("FLOWFS_BENCH_TMP", tempfile.gettempdir()))
    return ap.parse_args(argv)


def upload_source(server: Server, work: Path, size: int) -> str:
    """A random object of `size` bytes at `src`; its sha256."""
    path, h = work / "src", hashlib.sha256()
    with open(path, "wb") as f:
        for off in range(0, size, 64 << 20):
            chunk = os.urandom(min(64 << 20, size - off))
            h.update(chunk)
            f.write(chunk)
    server.direct.upload_file(str(path), BUCKET, "src")
    path.unlink()
    return h.hexdigest()


def moved(server: Server) -> int:
    c = server.counts()
    return c["get_bytes"] + c["put_bytes"]


def by_aws(server: Server, aws: str, dst: str) -> float:
    env = server.env(endpoint=server.proxy_endpoint)
    t0 = time.perf_counter()
    subprocess.run([aws, "s3", "cp", "--only-show-errors", f"s3://{BUCKET}/src", f"s3://{BUCKET}/{dst}"],
                   env=env, check=True, timeout=1800)
    return time.perf_counter() - t0


def by_flowfs(server: Server, binary: str, work: Path, dst: str, passthrough: str) -> float:
    mnt, cache = work / "mnt", work / "cache"
    mnt.mkdir(exist_ok=True)
    util.rm_rf(cache)
    subprocess.run([binary, "mount", f"s3://{BUCKET}", str(mnt), "--cache-dir", str(cache),
                    "--endpoint-url", server.proxy_endpoint, "--region", REGION,
                    "--passthrough", passthrough], env=server.env(), check=True, timeout=120)
    try:
        os.stat(mnt / "src")
        t0 = time.perf_counter()
        subprocess.run(["cp", str(mnt / "src"), str(mnt / dst)], check=True, timeout=1800)
    finally:
        subprocess.run([binary, "unmount", str(mnt)], env=server.env(), check=True, timeout=1800)
    return time.perf_counter() - t0


def check(server: Server, key: str, want: str) -> None:
    h = hashlib.sha256()
    for chunk in server.direct.get_object(Bucket=BUCKET, Key=key)["Body"].iter_chunks(8 << 20):
        h.update(chunk)
    if h.hexdigest() != want:
        raise RuntimeError(f"{key}: the copy's bytes differ from the source's")
    server.direct.delete_object(Bucket=BUCKET, Key=key)


def main(argv=None) -> int:
    args = parse_args(argv)
    util.install_signal_handlers()
    size = util.parse_size(args.size)
    latencies = [float(x) for x in args.latency.split(",")]
    aws = install.ensure({"awscli"})["awscli"].path
    work = Path(tempfile.mkdtemp(prefix="flowfs-copy-", dir=args.tmp))
    rows = []
    try:
        server = Server(work).start()
        want = upload_source(server, work, size)
        for ms, run, tool in ((ms, run, tool) for ms in latencies for run in range(args.runs)
                              for tool in ("aws", "flowfs")):
                server.set_latency(ms)
                server.reset_counts()
                dst = f"{tool}-{ms}-{run}"
                wall = (by_aws(server, aws, dst) if tool == "aws"
                        else by_flowfs(server, args.bin, work, dst, args.passthrough))
                r = {"tool": tool, "latency_ms": ms, "run": run, "wall_s": wall, "node_bytes": moved(server)}
                check(server, dst, want)
                util.log(json.dumps(r))
                rows.append(r)
    finally:
        util.cleanup_all()
        util.rm_rf(work)
    util.save_results(args.out, "copy", {"args": vars(args), "rows": rows})
    print(f"\ncopy of one {args.size} object within the bucket (medians of {args.runs}; "
          f"flowfs --passthrough {args.passthrough})\n")
    print("| latency | tool | wall | GET + upload bytes through the node | flowfs / aws wall |")
    print("|---|---|---|---|---|")
    for ms in latencies:
        med = {t: {k: statistics.median(r[k] for r in rows if r["tool"] == t and r["latency_ms"] == ms)
                   for k in ("wall_s", "node_bytes")} for t in ("aws", "flowfs")}
        ratio = med["flowfs"]["wall_s"] / med["aws"]["wall_s"]
        for t, m in med.items():
            print(f"| {ms:g} ms | {t} | {m['wall_s']:.2f} s | {m['node_bytes']:,.0f} | "
                  f"{f'{ratio:.2f}×' if t == 'flowfs' else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
