#!/usr/bin/env python3
"""Issue 16's passthrough benchmark: flowfs with FUSE passthrough (`--passthrough auto`)
and without (`--passthrough off`, the same binary) against the same operations on local
disk, in one run, interleaved.

    python3 bench/passthrough.py [--size 2G] [--files 1000] [--runs 3]

Starts its own SeaweedFS on 127.0.0.1 (bench/flowbench/server.py), uploads one object of
SIZE random bytes, mounts it twice (one mount per mode, a cache directory each) and keeps
a copy on local disk, then per run and per case (local, auto, off):

- **cached read**: the whole object, sequentially in 1 MiB reads, after `drop_caches`
  (page cache cold; for the mounts the disk cache is warm: read twice through the mount
  before the first run);
- **big write** (B6's write phase): SIZE bytes written in 1 MiB writes to a new file,
  until its close() returns (the source is in the page cache, untimed);
- **small writes** (B5's write phase): FILES files of 400 bytes created, written and
  closed one after another, until the last close() returns.

Between cases every upload a write started is awaited (the object visible in the bucket)
and the files are removed, so that one case's uploads never run during another's timing.
Reports the median of RUNS per case and the ratio of each mode to local disk (targets,
issue 16: cached read >= 0.9x local throughput; write phases <= 1.1x local time). Every
byte read is checked (sha256 of the whole object); every mount and process is gone at
the end.
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

KEY = "pt/object.bin"
MODES = ["auto", "off"]
IO_OPS = str(BENCH / "flowbench" / "io_ops.py")
MiB = 1 << 20


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2G", help="object and big-write size: 256M, 2G, ...")
    ap.add_argument("--files", type=int, default=1000, help="small files written per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=os.environ.get("FLOWFS_BIN", str(ROOT / "target" / "release" / "flowfs")))
    ap.add_argument("--out", default=str(BENCH / "results"))
    ap.add_argument("--tmp", default=os.environ.get("FLOWFS_BENCH_TMP", tempfile.gettempdir()))
    return ap.parse_args(argv)


def make_object(server: Server, path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            b = os.urandom(min(left, 8 * MiB))
            h.update(b)
            f.write(b)
            left -= len(b)
    server.direct.upload_file(str(path), BUCKET, KEY)
    return h.hexdigest()


def io_op(*args: str) -> dict:
    r = subprocess.run([sys.executable, IO_OPS, *args], capture_output=True, text=True, timeout=1800,
                       stdin=subprocess.DEVNULL)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if r.returncode != 0 or "error" in res:
        raise RuntimeError(f"{args[0]} failed: {res.get('error', r.stderr[-500:])}")
    return res


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while b := f.read(8 * MiB):
            h.update(b)
    return h.hexdigest()


def mount(args, server: Server, work: Path, mode: str) -> Path:
    mnt = work / f"mnt-{mode}"
    mnt.mkdir()
    cmd = [args.bin, "mount", f"s3://{BUCKET}", str(mnt), "--cache-dir", str(work / f"cache-{mode}"),
           "--endpoint-url", server.endpoint, "--region", REGION, "--passthrough", mode, "--cache-min-free", "0",
           "--log-file", str(work / f"flowfs-{mode}.log")]
    r = subprocess.run(cmd, env={**server.env(), "FLOWFS_LOG": "info"}, capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"mount {mode} failed: {r.stderr}")
    util.register_mount(mnt, f"flowfs {mode}")
    return mnt


def settle(server: Server, keys: list[str], want: int) -> None:
    """Waits until every upload a write case started has landed (at most 10 minutes)."""
    deadline = time.monotonic() + 600
    while True:
        found = sum(len(server.list_keys(k)) for k in keys)
        if found >= want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"uploads did not land: {found} of {want} objects")
        time.sleep(0.2)


def one_run(args, server: Server, work: Path, dirs: dict[str, Path], size: int, want: str, r: int) -> list[dict]:
    out = []
    for case, d in dirs.items():
        util.drop_caches()
        res = io_op("seqread", str(d / KEY), str(MiB), "1000000000")
        out.append({"run": r, "case": case, "op": "cached read", "s": res["elapsed"], "bytes": res["bytes"]})
        dst = d / f"w{r}.bin"
        res = io_op("bigwrite", str(work / "object.bin"), str(dst), str(MiB))
        out.append({"run": r, "case": case, "op": "big write", "s": res["elapsed"]})
        sdir = d / f"small{r}"
        res = io_op("smallwrite", str(work / "small"), str(sdir))
        out.append({"run": r, "case": case, "op": "small writes", "s": res["elapsed"]})
        if case != "local":
            settle(server, [f"w{r}.bin", f"small{r}/"], 1 + args.files)
        subprocess.run(["rm", "-rf", str(dst), str(sdir)], check=True)
        util.log(json.dumps(out[-3:]))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    util.install_signal_handlers()
    size = util.parse_size(args.size)
    work = Path(tempfile.mkdtemp(prefix="flowfs-pt-", dir=args.tmp))
    records: list[dict] = []
    try:
        server = Server(work).start()
        want = make_object(server, work / "object.bin", size)
        (work / "small").mkdir()
        for i in range(args.files):
            (work / "small" / f"f{i:05d}.txt").write_bytes(os.urandom(400))
        local = work / "local"
        (local / "pt").mkdir(parents=True)
        os.link(work / "object.bin", local / KEY)
        dirs = {"local": local}
        for mode in MODES:
            dirs[mode] = mount(args, server, work, mode)
            for _ in range(2):  # fills the cache; the second read is served by it
                if sha256_file(dirs[mode] / KEY) != want:
                    raise RuntimeError(f"{mode}: wrong bytes read")
        for r in range(args.runs):
            records += one_run(args, server, work, dirs, size, want, r)
        for mode in MODES:
            util.fuse_unmount(dirs[mode])
        in_use = {m: "FUSE passthrough in use" in (work / f"flowfs-{m}.log").read_text() for m in MODES}
    finally:
        util.cleanup_all()
        util.rm_rf(work)
    report(args, size, records, in_use)
    return 0


def report(args, size: int, records: list[dict], in_use: dict) -> None:
    util.save_results(args.out, "passthrough", {"args": vars(args), "size": size, "in_use": in_use,
                                                "records": records})
    med = {}
    for rec in records:
        med.setdefault((rec["op"], rec["case"]), []).append(rec["s"])
    print(f"\nFUSE passthrough: {args.size} object, {args.files} small files, median of {args.runs} runs; "
          f"passthrough in use: {in_use}\n")
    print("| operation | local disk | passthrough auto | passthrough off | auto vs local | off vs local |")
    print("|---|---|---|---|---|---|")
    for op in ("cached read", "big write", "small writes"):
        loc, auto, off = (statistics.median(med[(op, c)]) for c in ("local", "auto", "off"))
        if op == "cached read":  # throughput ratio: local time / mode time
            ra, ro = loc / auto, loc / off
            cells = [f"{size / loc / MiB:.0f} MiB/s", f"{size / auto / MiB:.0f} MiB/s", f"{size / off / MiB:.0f} MiB/s"]
        else:  # time ratio
            ra, ro = auto / loc, off / loc
            cells = [f"{loc:.2f} s", f"{auto:.2f} s", f"{off:.2f} s"]
        print(f"| {op} | {' | '.join(cells)} | {ra:.2f}x | {ro:.2f}x |")


if __name__ == "__main__":
    sys.exit(main())
