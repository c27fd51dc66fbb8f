#!/usr/bin/env python3
"""Issue 15's scale benchmark: does what one directory costs grow with the whole mount?

    python3 bench/scale.py [--files 100000] [--dirs 100] [--runs 7] [--baseline-bin PATH]

Starts its own SeaweedFS on 127.0.0.1 (bench/flowbench/server.py), puts FILES empty objects
into DIRS directories (straight to the server), then for each flowfs build (this one, and
the build before it when --baseline-bin is given), in the same run on the same server:

- **big mount**: `find` over every file (timed; the mount has now seen all of them), the
  mount's RSS, then RUNS re-listings of one directory (`ls -l` in Python: scandir + lstat
  of every entry), each after the metadata TTL has run out so that it costs a LIST;
- **small mount**: a fresh mount that has seen only that directory, re-listed the same way.

The target (issue 15): the big mount's re-listing within 1.2x of the small one's. Medians
are reported; every mount and process is gone at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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

TTL_S = 1


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--runs", type=int, default=7, help="re-listings per mount (median reported)")
    ap.add_argument("--bin", default=os.environ.get("FLOWFS_BIN", str(ROOT / "target" / "release" / "flowfs")))
    ap.add_argument("--baseline-bin", default=None, help="the build before, measured in the same run")
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--tmp", default=os.environ.get("FLOWFS_BENCH_TMP", tempfile.gettempdir()))
    return ap.parse_args(argv)


def populate(server: Server, files: int, dirs: int) -> None:
    per = files // dirs
    keys = [f"scale/d{d:03}/f{i:06}" for d in range(dirs) for i in range(per)]
    t = time.monotonic()
    client = server.direct

    def put(batch: list[str]) -> None:
        for k in batch:
            client.put_object(Bucket=BUCKET, Key=k, Body=b"")

    batches = [keys[i:i + 500] for i in range(0, len(keys), 500)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for f in [pool.submit(put, b) for b in batches]:
            f.result()
    util.log(f"put {len(keys)} objects in {time.monotonic() - t:.0f} s")


class Mount:
    def __init__(self, exe: str, server: Server, work: Path, name: str):
        self.path = work / f"mnt-{name}"
        self.path.mkdir(parents=True)
        cache = work / f"cache-{name}"
        cmd = [exe, "mount", f"s3://{BUCKET}", str(self.path), "--cache-dir", str(cache), "--endpoint-url",
               server.endpoint, "--region", REGION, "--foreground", "--metadata-ttl", str(TTL_S),
               "--log-file", str(work / f"{name}.log")]
        self.child = util.spawn(f"flowfs-{name}", cmd, env=server.env())
        util.register_mount(self.path, f"flowfs {name}")
        deadline = time.monotonic() + 60
        while not util.is_mounted(self.path):
            if self.child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"flowfs did not mount: {util.tail(work / f'{name}.log')}")
            time.sleep(0.05)

    def rss_mib(self) -> float:
        return (util.proc_status_kib(self.child.pid, "VmRSS") or 0) / 1024

    def close(self, exe: str, server: Server) -> None:
        r = subprocess.run([exe, "unmount", str(self.path)], capture_output=True, text=True, timeout=120,
                           env=server.env(), stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            util.force_unmount(self.path)
        util.unregister_mount(self.path)
        self.child.wait(timeout=30)


def ls_l(d: Path) -> int:
    n = 0
    with os.scandir(d) as it:
        for e in it:
            e.stat(follow_symlinks=False)
            n += 1
    return n


def relist(d: Path, runs: int, want: int) -> float:
    times = []
    for _ in range(runs):
        # The TTL has to run out for the listing to cost a LIST again: a wait on the clock
        # is the point here, not a race.
        time.sleep(TTL_S + 0.2)
        t = time.perf_counter()
        n = ls_l(d)
        times.append(time.perf_counter() - t)
        if n != want:
            raise RuntimeError(f"{d}: {n} entries, want {want}")
    return statistics.median(times)


def measure(exe: str, server: Server, work: Path, tag: str, args) -> dict:
    per = args.files // args.dirs
    probe = f"scale/d{args.dirs // 2:03}"
    big = Mount(exe, server, work, f"{tag}-big")
    try:
        rss0 = big.rss_mib()
        t = time.perf_counter()
        r = subprocess.run(["find", str(big.path / "scale"), "-type", "f"], capture_output=True, text=True,
                           timeout=1800, check=True)
        find_s = time.perf_counter() - t
        found = len(r.stdout.splitlines())
        if found != per * args.dirs:
            raise RuntimeError(f"find saw {found} files, want {per * args.dirs}")
        rss = big.rss_mib()
        big_s = relist(big.path / probe, args.runs, per)
    finally:
        big.close(exe, server)
    small = Mount(exe, server, work, f"{tag}-small")
    try:
        ls_l(small.path / probe)
        small_s = relist(small.path / probe, args.runs, per)
    finally:
        small.close(exe, server)
    out = {"build": tag, "find_s": find_s, "rss_before_mib": rss0, "rss_after_find_mib": rss,
           "relist_big_ms": big_s * 1000, "relist_small_ms": small_s * 1000, "ratio": big_s / small_s}
    util.log(json.dumps(out))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    util.install_signal_handlers()
    work = Path(tempfile.mkdtemp(prefix="flowfs-scale-", dir=args.tmp))
    try:
        server = Server(work).start()
        populate(server, args.files, args.dirs)
        builds = [("this", args.bin)] + ([("before", args.baseline_bin)] if args.baseline_bin else [])
        results = [measure(exe, server, work, tag, args) for tag, exe in builds]
    finally:
        util.cleanup_all()
        util.rm_rf(work)
    util.save_results(args.out, "scale", {"args": vars(args), "results": results})
    print(f"\n{args.files} files in {args.dirs} directories, {args.runs} re-listings each (median)\n")
    print("| build | find | RSS after find | re-list, big mount | re-list, small mount | ratio |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['build']} | {r['find_s']:.2f} s | {r['rss_after_find_mib']:.0f} MiB "
              f"(+{r['rss_after_find_mib'] - r['rss_before_mib']:.0f}) | {r['relist_big_ms']:.1f} ms "
              f"| {r['relist_small_ms']:.1f} ms | {r['ratio']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
