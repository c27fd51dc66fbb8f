#!/usr/bin/env python3
"""Issue 30's store benchmark: B1 (many 1 MiB objects copied to local disk) and B3 (one big
object read sequentially) on Azure Blob (Azurite 3.35.0) or GCS (fake-gcs-server v1.54.0),
on 127.0.0.1, through flowfs against the copiers available here for the same store, in one
run:

- `flowfs`: `flowfs mount az://CONTAINER` (or `gs://BUCKET`), then `cp -r` (B1) or
  `cat > /dev/null` (B3), a fresh cache dir and a fresh mount each run; tool CPU is the
  mount process's;
- `rclone`: rclone 1.75's azureblob or gcs backend (`rclone copy`, its default 4 transfers;
  B3: `rclone cat`), a Go copier (the pip package the main bench installs);
- `azure-sdk` (Azure only): azure-storage-blob 12.31 (Azure's own Python library),
  `download_blob` with `max_concurrency=8` per object and 16 objects at once (B1).

Azure's own fastest copier, AzCopy, is distributed only from Microsoft's release pages and
package feeds, which this machine does not reach; Google's (`gcloud storage`) only from
Google's SDK archive and apt repository, which it does not reach either: neither is
measured.

    python3 bench/stores.py [--store azure|gcs] [--b1-files 2000] [--b3-size 2G] [--runs 3]

Medians (min-max) of wall time and tool CPU per workload and tool, the ratio of flowfs to
the fastest peer, and every copy verified by sha256. Page cache dropped before each run.
Results go to bench/results/stores-<time>.json and are printed as a markdown table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(BENCH))

from emulators import AZURE_ACCOUNT, AZURE_KEY, Azurite, FakeGcs  # noqa: E402
from gcs_store import GcsS3  # noqa: E402
from flowbench import util  # noqa: E402

CONTAINER = "bench"
MiB = 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()


def parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid: int) -> float:
    st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


class Data:
    """B1's files and B3's object, made once from a seeded generator, uploaded by the SDK."""

    def __init__(self, files: int, big: int):
        import random

        rng = random.Random(30)
        self.b1 = {f"b1/f{i:05d}.bin": rng.randbytes(MiB) for i in range(files)}
        self.b3_key = "b3/big.bin"
        self.b3_size = big
        self.b3_sha = ""
        self._rng = rng

    def chunks(self, h):
        left = self.b3_size
        while left:
            b = self._rng.randbytes(min(left, 8 * MiB))
            h.update(b)
            left -= len(b)
            yield b

    def upload(self, store) -> None:
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda kv: store.put(kv[0], kv[1]), self.b1.items()))
        h = hashlib.sha256()
        store.put_big(self.b3_key, self.chunks(h), self.b3_size)
        self.b3_sha = h.hexdigest()


class AzureStore:
    """Azurite, a container of its development account."""

    name, tools = "azure", ["flowfs", "rclone", "azure-sdk"]

    def __init__(self, work: Path):
        self.emulator = Azurite(work / "azurite").start()
        self.container = self.emulator.service().create_container(CONTAINER)

    def put(self, key: str, data: bytes) -> None:
        self.container.upload_blob(key, data, overwrite=True)

    def put_big(self, key: str, chunks, size: int) -> None:
        self.container.get_blob_client(key).upload_blob(chunks, length=size, overwrite=True, max_concurrency=4)

    def source(self) -> str:
        return f"az://{CONTAINER}"

    def env(self) -> dict[str, str]:
        return dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=self.emulator.connection_string,
                    RCLONE_CONFIG="/dev/null")

    def rclone_remote(self) -> str:
        # An on-the-fly remote: the key goes in the environment, never on the command line.
        return f":azureblob,account={AZURE_ACCOUNT},endpoint='{self.emulator.blob_endpoint}':{CONTAINER}"

    def rclone_env(self) -> dict[str, str]:
        return self.env() | {"RCLONE_AZUREBLOB_KEY": AZURE_KEY}


class GcsStore:
    """fake-gcs-server, one bucket (no credentials: STORAGE_EMULATOR_HOST)."""

    name, tools = "gcs", ["flowfs", "rclone"]

    def __init__(self, work: Path):
        self.emulator = FakeGcs(work / "fake-gcs").start()
        self.gcs = GcsS3(self.emulator.url)
        self.gcs.create_bucket(Bucket=CONTAINER)

    def put(self, key: str, data: bytes) -> None:
        self.gcs.put_object(Bucket=CONTAINER, Key=key, Body=data)

    def put_big(self, key: str, chunks, size: int) -> None:
        """In at most 32 pieces composed into one: fake-gcs-server copies a resumable
        upload's whole content at every chunk (hours for 2 GiB in 8 MiB chunks)."""
        piece = max(64 * MiB, -(-size // 32))
        names, buf = [], bytearray()

        def flush():
            names.append(f"{key}.piece{len(names):02d}")
            self.gcs.put_object(Bucket=CONTAINER, Key=names[-1], Body=bytes(buf))
            buf.clear()

        for c in chunks:
            buf += c
            if len(buf) >= piece:
                flush()
        if buf:
            flush()
        self.gcs.compose(CONTAINER, key, names)
        for n in names:
            self.gcs.delete_object(Bucket=CONTAINER, Key=n)

    def source(self) -> str:
        return f"gs://{CONTAINER}"

    def env(self) -> dict[str, str]:
        host = self.emulator.url.split("://", 1)[1]
        return dict(os.environ, STORAGE_EMULATOR_HOST=host, RCLONE_CONFIG="/dev/null")

    def rclone_remote(self) -> str:
        return f":gcs,endpoint='{self.emulator.url}/storage/v1/',anonymous=true:{CONTAINER}"

    def rclone_env(self) -> dict[str, str]:
        return self.env()


class Bench:
    def __init__(self, args, work: Path, store, data: Data):
        self.args = args
        self.work = work
        self.store = store
        self.data = data
        self.flowfs = os.environ.get("FLOWFS_BIN", str(ROOT / "target" / "release" / "flowfs"))

    # ------------------------------------------------------------ tools
    def run_flowfs(self, workload: str, dest: Path) -> tuple[float, float]:
        mnt, cache = self.work / "mnt", self.work / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        mnt.mkdir(exist_ok=True)
        pidf = self.work / "flowfs.pid"
        r = subprocess.run([self.flowfs, "mount", self.store.source(), str(mnt), "--cache-dir", str(cache),
                            "--pid-file", str(pidf)], env=self.store.env(), capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"flowfs mount: {r.stderr.strip()}")
        pid = int(pidf.read_text())
        try:
            t0 = time.monotonic()
            if workload == "B1":
                subprocess.run(["cp", "-r", str(mnt / "b1"), str(dest)], check=True)
            else:
                with open(dest, "wb") as out:
                    subprocess.run(["cat", str(mnt / self.data.b3_key)], stdout=out, check=True)
            wall = time.monotonic() - t0
            cpu = proc_cpu(pid)
        finally:
            subprocess.run([self.flowfs, "unmount", str(mnt)], capture_output=True, timeout=300)
        return wall, cpu

    def run_rclone(self, workload: str, dest: Path) -> tuple[float, float]:
        before = child_cpu()
        t0 = time.monotonic()
        if workload == "B1":
            subprocess.run(["rclone", "copy", f"{self.store.rclone_remote()}/b1", str(dest)],
                           env=self.store.rclone_env(), check=True, capture_output=True)
        else:
            with open(dest, "wb") as out:
                subprocess.run(["rclone", "cat", f"{self.store.rclone_remote()}/{self.data.b3_key}"],
                               env=self.store.rclone_env(), stdout=out, check=True)
        return time.monotonic() - t0, child_cpu() - before

    def run_sdk(self, workload: str, dest: Path) -> tuple[float, float]:
        code = SDK_COPY.format(conn=self.store.emulator.connection_string, container=CONTAINER,
                               what=workload, key=self.data.b3_key, dest=str(dest))
        before = child_cpu()
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True, env=self.store.env())
        return time.monotonic() - t0, child_cpu() - before

    # ------------------------------------------------------------ checks
    def verify(self, workload: str, dest: Path) -> bool:
        if workload == "B1":
            got = {f"b1/{p.name}": sha_file(p) for p in dest.iterdir()}
            return got == {k: sha(v) for k, v in self.data.b1.items()}
        return sha_file(dest) == self.data.b3_sha

    def one(self, workload: str, tool: str) -> dict:
        dest = self.work / "dest" / (workload.lower() + ("" if workload == "B1" else ".bin"))
        shutil.rmtree(dest.parent, ignore_errors=True)
        dest.parent.mkdir(parents=True)
        if workload == "B1" and tool != "flowfs":
            dest.mkdir()
        drop_caches()
        fn = {"flowfs": self.run_flowfs, "rclone": self.run_rclone, "azure-sdk": self.run_sdk}[tool]
        wall, cpu = fn(workload, dest)
        ok = self.verify(workload, dest)
        shutil.rmtree(dest.parent, ignore_errors=True)
        return {"workload": workload, "tool": tool, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "verified": ok}


SDK_COPY = r'''
import concurrent.futures, os
from azure.storage.blob import ContainerClient
c = ContainerClient.from_connection_string("{conn}", "{container}")
if "{what}" == "B1":
    names = [b.name for b in c.list_blobs(name_starts_with="b1/")]
    def one(n):
        with open(os.path.join("{dest}", os.path.basename(n)), "wb") as f:
            c.download_blob(n, max_concurrency=8).readinto(f)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        list(ex.map(one, names))
else:
    with open("{dest}", "wb") as f:
        c.download_blob("{key}", max_concurrency=8).readinto(f)
'''


def table(records: list[dict], tools: list[str]) -> str:
    out = ["| workload | tool | wall s, median (min-max) | tool CPU s | flowfs ÷ fastest peer | verified |",
           "|---|---|---|---|---|---|"]
    for w in ("B1", "B3"):
        med = {}
        for t in tools:
            rs = [r for r in records if r["workload"] == w and r["tool"] == t]
            if rs:
                med[t] = statistics.median(r["wall_s"] for r in rs)
        peers = [v for t, v in med.items() if t != "flowfs"]
        for t in tools:
            rs = [r for r in records if r["workload"] == w and r["tool"] == t]
            if not rs:
                continue
            walls = [r["wall_s"] for r in rs]
            cpu = statistics.median(r["cpu_s"] for r in rs)
            ratio = f"{med['flowfs'] / min(peers):.2f}×" if t == "flowfs" and peers else ""
            ok = "yes" if all(r["verified"] for r in rs) else "**no**"
            out.append(f"| {w} | {t} | {med[t]:.2f} ({min(walls):.2f}-{max(walls):.2f}) | {cpu:.2f} | {ratio} | {ok} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--b1-files", type=int, default=2000)
    ap.add_argument("--b3-size", default="2G")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--store", choices=["azure", "gcs"], default="azure")
    ap.add_argument("--tools", default="", help="default: every tool of the store")
    ap.add_argument("--workloads", default="B1,B3")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flowfs-stores-"))
    store = {"azure": AzureStore, "gcs": GcsStore}[args.store](work)
    tools = args.tools.split(",") if args.tools else store.tools
    try:
        util.log(f"{args.store} emulator on {store.emulator.url}; data: {args.b1_files} x 1 MiB, "
                 f"one object of {args.b3_size}")
        data = Data(args.b1_files, parse_size(args.b3_size))
        data.upload(store)
        bench = Bench(args, work, store, data)
        records = []
        for run in range(1, args.runs + 1):
            for w in args.workloads.split(","):
                for t in tools:
                    rec = bench.one(w, t) | {"run": run}
                    util.log(f"run {run} {w} {t}: {rec['wall_s']:.2f} s, CPU {rec['cpu_s']:.2f} s, "
                             f"verified {rec['verified']}")
                    records.append(rec)
        md = table(records, tools)
        print(md)
        out = BENCH / "results" / f"stores-{args.store}-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"args": vars(args), "records": records}, indent=1))
        util.log(f"results: {out}")
        return 0 if all(r["verified"] for r in records) else 1
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(work / "mnt")], capture_output=True)
        store.emulator.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
