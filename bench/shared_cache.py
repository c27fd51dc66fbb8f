#!/usr/bin/env python3
"""Issue 16's node-cache benchmark: TASKS concurrent `flowfs run` tasks on one node, one
--cache-dir, each reading the same object cold (sha256sum through its own mount).

    python3 bench/shared_cache.py [--size 1G] [--tasks 8] [--private]

Starts its own SeaweedFS on 127.0.0.1 behind the counting proxy (bench/flowbench/server.py),
uploads one object of SIZE random bytes, then measures, on a fresh cache directory each:

- **one task alone**: wall time and bytes the server sent;
- **TASKS tasks at once, one cache dir**: wall time (first start to last end) and bytes sent;
- with `--private`, **TASKS tasks at once, a cache dir each** (what sharing saves).

Targets (issue 16): bytes sent <= 1.1x SIZE, wall <= 1.5x one task alone. Every task's
checksum is compared with the object's; every mount and process is gone at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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

KEY = "shared/object.bin"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="object size: 256M, 1G, ...")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--private", action="store_true", help="also TASKS tasks with a cache dir each")
    ap.add_argument("--bin", default=os.environ.get("FLOWFS_BIN", str(ROOT / "target" / "release" / "flowfs")))
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--tmp", default=os.environ.get("FLOWFS_BENCH_TMP", tempfile.gettempdir()))
    ap.add_argument("--timeout", type=float, default=1800)
    return ap.parse_args(argv)


def upload(server: Server, work: Path, size: int) -> str:
    path = work / "object.bin"
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            b = os.urandom(min(left, 8 << 20))
            h.update(b)
            f.write(b)
            left -= len(b)
    server.direct.upload_file(str(path), BUCKET, KEY)
    path.unlink()
    return h.hexdigest()


def tasks(args, server: Server, work: Path, name: str, n: int, shared: bool, want: str) -> dict:
    """`n` flowfs run tasks started together; wall from the first start to the last end."""
    server.reset_counts()
    procs = []
    t0 = time.perf_counter()
    for i in range(n):
        cache = work / f"cache-{name}" if shared else work / f"cache-{name}-{i}"
        mnt = work / f"mnt-{name}-{i}"
        cmd = [args.bin, "run", "--mount", f"s3://{BUCKET}={mnt}", "--cache-dir", str(cache),
               "--endpoint-url", server.endpoint, "--region", REGION, "--cache-min-free", "0",
               "--log-file", str(work / f"{name}-{i}.log"), "--", "sha256sum", str(mnt / KEY)]
        procs.append(subprocess.Popen(cmd, env=server.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, stdin=subprocess.DEVNULL))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=args.timeout)
        if p.returncode != 0 or not out.startswith(want):
            raise RuntimeError(f"{name}: a task failed ({p.returncode}): {out} {err}")
        outs.append(out)
    wall = time.perf_counter() - t0
    c = server.counts()
    r = {"case": name, "tasks": n, "shared": shared, "wall_s": wall, "get_bytes": c["get_bytes"],
         "gets": sum(v for k, v in c["ops"].items() if k.startswith("GET"))}
    util.log(json.dumps(r))
    for i in range(n):
        util.rm_rf(work / (f"cache-{name}" if shared else f"cache-{name}-{i}"))
    return r


def main(argv=None) -> int:
    args = parse_args(argv)
    util.install_signal_handlers()
    size = util.parse_size(args.size)
    work = Path(tempfile.mkdtemp(prefix="flowfs-shared-", dir=args.tmp))
    try:
        server = Server(work).start()
        want = upload(server, work, size)
        results = [tasks(args, server, work, "alone", 1, True, want),
                   tasks(args, server, work, "shared", args.tasks, True, want)]
        if args.private:
            results.append(tasks(args, server, work, "private", args.tasks, False, want))
    finally:
        util.cleanup_all()
        util.rm_rf(work)
    util.save_results(args.out, "shared-cache", {"args": vars(args), "size": size, "results": results})
    alone = results[0]["wall_s"]
    print(f"\n{args.tasks} `flowfs run` tasks reading one {args.size} object cold (sha256sum)\n")
    print("| case | tasks | wall | vs one alone | bytes from the server | vs the object | GETs |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['case']} | {r['tasks']} | {r['wall_s']:.2f} s | {r['wall_s'] / alone:.2f}x "
              f"| {r['get_bytes'] / 2**20:.0f} MiB | {r['get_bytes'] / size:.2f}x | {r['gets']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
