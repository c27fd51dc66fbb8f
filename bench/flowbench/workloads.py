"""The data set and the workloads B1-B6, B8 (B7: b7.py, B11: b11.py); each measurement returns
records (dicts).

Timed: only the tool's work (a CLI command; or on a mount, the task's I/O plus, for writes,
the wait until the data is durable). Counted: the requests and bytes the counting proxy saw
during that window, the CPU of the tool (mount daemon or CLI process), of SeaweedFS and of
the proxy. Verified afterwards, outside the window, against the local reference copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import util
from .tools import CliTool, JuiceFS, LocalDisk, MountError, MountHandle, MountTool, Ratarmount, Tool

MiB = 1 << 20
IO_OPS = str(Path(__file__).resolve().with_name("io_ops.py"))


@dataclass
class Sizes:
    b1_files: int
    b1_size: int
    big: int  # B3/B4 object and the B6 file
    b4_reads: int
    b4_size: int
    b5_files: int
    b5_size: int
    b1s_files: int = 10_000
    b1s_size: int = 64 << 10
    b8_dirs: int = 1000  # B8 (issue 27): a directory walk of b8_dirs × b8_per_dir objects
    b8_per_dir: int = 100
    chunk: int = MiB

    def describe(self) -> dict[str, str]:
        return {
            "B1": f"{self.b1_files} × {util.fmt_bytes(self.b1_size)} objects, cold copy of the prefix",
            "B1s": f"{self.b1s_files} × {util.fmt_bytes(self.b1s_size)} objects, cold copy of the prefix",
            "B1p": f"B1's objects read by {PARALLEL_READERS} readers at once (xargs -P{PARALLEL_READERS} cp), cold",
            "B1c": "a task consumes B1's objects (`cat b1/* | sha256sum`): through the mount, or after the copier "
                   "downloaded them; wall time of both steps, CPU of the tool and the task together",
            "B2": f"tar of the B1 files ({util.fmt_bytes(self.b1_files * (self.b1_size + 512))}) streamed into tar -x",
            "B3": f"one {util.fmt_bytes(self.big)} object read sequentially, cold then warm",
            "B4": f"{self.b4_reads} random {util.fmt_bytes(self.b4_size)} preads in a {util.fmt_bytes(self.big)} object (cold)",
            "B5": f"{self.b5_files} files of {self.b5_size} B written, until all are durable",
            "B6": f"one {util.fmt_bytes(self.big)} file written, until durable",
            "B8": f"find + stat of {self.b8_dirs * self.b8_per_dir} objects in {self.b8_dirs} directories, cold "
                  "(a copier: one flat listing)",
        }


FULL = Sizes(b1_files=2000, b1_size=MiB, big=2 << 30, b4_reads=200, b4_size=64 << 10, b5_files=1000, b5_size=400)
QUICK = Sizes(b1_files=200, b1_size=MiB, big=256 * MiB, b4_reads=200, b4_size=64 << 10, b5_files=200, b5_size=400,
              b1s_files=1000, b8_dirs=100, b8_per_dir=20)

TINY = Sizes(b1_files=20, b1_size=MiB, big=32 * MiB, b4_reads=50, b4_size=64 << 10, b5_files=40, b5_size=400,
             b1s_files=50, b8_dirs=10, b8_per_dir=5)

# B1s (issue 27): many small files, where the per-file cost and the store's latency decide.
# B1p (issue 27): B1's files copied by 16 processes at once, as parallel task stagers read.
PARALLEL_READERS = 16
# B1c (issue 48): a task that reads its inputs, against a copier that stages them first.
CONSUME = 'cat "$1"/* | sha256sum'
WORKLOADS = ["B1", "B1s", "B1p", "B1c", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B11"]
QUICK_WORKLOADS = ["B1", "B2", "B3", "B4", "B5", "B6", "B8"]  # B7 (a pipeline per tool) only when asked
# B11 (archives read in place, flowfs and ratarmount only: flowbench/b11.py) runs only when
# asked (`--workloads B11`, `make bench-archives`), in quick mode and in full mode alike.
ONLY_WHEN_ASKED = {"B11"}
DEFAULT_WORKLOADS = [w for w in WORKLOADS if w not in ONLY_WHEN_ASKED]


@dataclass
class Ctx:
    server: object
    work: Path
    sizes: Sizes
    timeout: float
    poll_timeout: float
    flowfs_cache_size: str | None = None
    mount_timeout: float = 60
    data: "Dataset | None" = None

    @property
    def scratch(self) -> Path:
        return self.work / "scratch"


# ====================================================================== data set


@dataclass
class Dataset:
    root: Path
    sizes: Sizes
    b1_manifest: dict[str, str] = field(default_factory=dict)  # name -> sha256
    b1s_manifest: dict[str, str] = field(default_factory=dict)
    b1_digest: str | None = None  # B1c: sha256 of B1's files one after another
    b5_manifest: dict[str, str] = field(default_factory=dict)
    b8_names: set[str] = field(default_factory=set)  # DIR/NAME of every B8 object (1 byte each)
    big_chunks: list[str] = field(default_factory=list)  # sha256 of each 1 MiB chunk of big.bin
    b4_offsets: list[int] = field(default_factory=list)
    b4_hashes: list[str] = field(default_factory=list)

    @property
    def b1_dir(self) -> Path:
        return self.root / "b1"

    @property
    def b1s_dir(self) -> Path:
        return self.root / "b1s"

    @property
    def b8_dir(self) -> Path:
        return self.root / "b8"

    @property
    def b5_dir(self) -> Path:
        return self.root / "b5"

    @property
    def tar(self) -> Path:
        return self.root / "many.tar"

    @property
    def big(self) -> Path:
        return self.root / "big.bin"

    @property
    def offsets_file(self) -> Path:
        return self.root / "b4-offsets.json"

    def generate(self) -> None:
        s = self.sizes
        rng = random.Random(20260401)
        self.b1_dir.mkdir(parents=True, exist_ok=True)
        for i in range(s.b1_files):
            name = f"f{i:05d}.bin"
            data = rng.randbytes(s.b1_size)
            (self.b1_dir / name).write_bytes(data)
            self.b1_manifest[name] = hashlib.sha256(data).hexdigest()
        r = util.run(["tar", "-cf", str(self.tar), "-C", str(self.root), "b1"], timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"tar -c failed: {r.stderr}")
        with open(self.big, "wb") as f:
            left = s.big
            while left:
                n = min(s.chunk, left)
                data = rng.randbytes(n)
                f.write(data)
                self.big_chunks.append(hashlib.sha256(data).hexdigest())
                left -= n
        self.b4_offsets = [rng.randrange(0, s.big - s.b4_size) for _ in range(s.b4_reads)]
        self.offsets_file.write_text(json.dumps(self.b4_offsets))
        with open(self.big, "rb") as f:
            self.b4_hashes = [hashlib.sha256(os.pread(f.fileno(), s.b4_size, o)).hexdigest()
                              for o in self.b4_offsets]
        self.b5_dir.mkdir(exist_ok=True)
        for i in range(s.b5_files):
            name = f"s{i:05d}.txt"
            data = rng.randbytes(s.b5_size)
            (self.b5_dir / name).write_bytes(data)
            self.b5_manifest[name] = hashlib.sha256(data).hexdigest()

    def generate_small(self) -> None:
        """B1s's files (made only when B1s runs: 10,000 files take a while to make and upload)."""
        rng = random.Random(20261127)
        self.b1s_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.sizes.b1s_files):
            name = f"s{i:05d}.bin"
            data = rng.randbytes(self.sizes.b1s_size)
            (self.b1s_dir / name).write_bytes(data)
            self.b1s_manifest[name] = hashlib.sha256(data).hexdigest()

    def generate_walk(self) -> None:
        """B8's tree: directories of one-byte files (made only when B8 runs)."""
        for d in range(self.sizes.b8_dirs):
            sub = self.b8_dir / f"d{d:04d}"
            sub.mkdir(parents=True, exist_ok=True)
            for f in range(self.sizes.b8_per_dir):
                (sub / f"f{f:03d}").write_bytes(b"x")
                self.b8_names.add(f"d{d:04d}/f{f:03d}")

    def sample_every(self) -> int:
        return max(1, len(self.big_chunks) // 32)


def upload_dataset(ctx: Ctx, s5cmd: str) -> None:
    """Into the bucket with s5cmd, straight to SeaweedFS (not through the proxy)."""
    d = ctx.data
    env = ctx.server.env(endpoint=ctx.server.direct_endpoint)
    base = [s5cmd, "--endpoint-url", ctx.server.direct_endpoint]
    uploads = [["cp", f"{d.b1_dir}/*", "s3://bench/b1/"],
               ["cp", str(d.tar), "s3://bench/b2/many.tar"],
               ["cp", str(d.big), "s3://bench/b3/big.bin"]]
    if d.b1s_manifest:
        uploads.append(["cp", f"{d.b1s_dir}/*", "s3://bench/b1s/"])
    if d.b8_names:
        uploads.append(["cp", f"{d.b8_dir}/*", "s3://bench/b8/"])
    for args in uploads:
        r = util.run(base + args, env=env, timeout=3600, secrets_=ctx.server.secrets)
        if r.returncode != 0:
            raise RuntimeError(f"upload failed: s5cmd {' '.join(args)}: {r.stderr.strip()[-800:]}")
    for prefix, manifest in (("b1/", d.b1_manifest), ("b1s/", d.b1s_manifest), ("b8/", d.b8_names)):
        keys = ctx.server.list_keys(prefix)
        if len(keys) != len(manifest):
            raise RuntimeError(f"upload check: {len(keys)} of {len(manifest)} objects under {prefix} in the bucket")


def import_into_juicefs(ctx: Ctx, tool: JuiceFS) -> None:
    """JuiceFS reads only its own format: copy the data set in through a mount (untimed)."""
    tool.format(ctx)
    h = tool.mount(ctx, "import", timeout=90)
    try:
        d = ctx.data
        steps = [["cp", "-r", str(d.b1_dir), str(h.path / "b1")],
                 ["mkdir", "-p", str(h.path / "b2"), str(h.path / "b3")],
                 ["cp", str(d.tar), str(h.path / "b2" / "many.tar")],
                 ["cp", str(d.big), str(h.path / "b3" / "big.bin")]]
        if d.b1s_manifest:
            steps.append(["cp", "-r", str(d.b1s_dir), str(h.path / "b1s")])
        if d.b8_names:
            steps.append(["cp", "-r", str(d.b8_dir), str(h.path / "b8")])
        for cmd in steps:
            r = util.run(cmd, timeout=3600)
            if r.returncode != 0:
                raise MountError(f"juicefs import: {' '.join(cmd[:2])} failed: {r.stderr.strip()[-500:]}")
    finally:
        ok, _, err = h.unmount(ctx, timeout=600)
    if not ok:
        raise MountError(f"juicefs import: unmount failed: {err}")


# ====================================================================== measurement plumbing


def new_record(workload: str, variant: str, tool: Tool, run: int) -> dict:
    return {"workload": workload, "variant": variant, "tool": tool.name, "kind": tool.kind, "run": run,
            "wall_s": None, "verified": False, "error": None, "skipped": False,
            "tool_cpu_s": None, "client_cpu_s": None, "server_cpu_s": None, "proxy_cpu_s": None,
            "peak_rss_mib": None, "cache_written": None, "requests": None, "requests_by_type": {}, "bytes_down": None,
            "bytes_up": None, "mount_s": None, "notes": ""}


# flowfs's request names (its usage report) by the proxy's classes of S3 requests.
USAGE_CLASSES = {
    "GetObject": "GET*", "HeadObject": "HEAD", "ListObjectsV2": "LIST", "PutObject": "PUT",
    "CopyObject": "COPY", "UploadPartCopy": "COPY", "CreateMultipartUpload": "CREATE_MULTIPART",
    "UploadPart": "UPLOAD_PART", "CompleteMultipartUpload": "COMPLETE_MULTIPART",
    "AbortMultipartUpload": "ABORT_MULTIPART", "ListMultipartUploads": "LIST_MULTIPART",
    "DeleteObject": "DELETE", "HeadBucket": "HEAD_BUCKET",
}


def flowfs_usage(ctx: Ctx, handle: MountHandle | None) -> dict | None:
    """The usage report of a running flowfs mount so far (`flowfs report --mount`),
    or None for another tool (or an flowfs without the command)."""
    from .tools import FlowFS
    if handle is None or not isinstance(handle.tool, FlowFS):
        return None
    import subprocess
    try:
        r = subprocess.run([handle.tool.exe, "report", "--mount", str(handle.path), "--json"], timeout=30,
                           env=handle.tool.env(ctx), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        return json.loads(r.stdout) if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return None


def by_class(counts: dict[str, int], names: dict[str, str] | None = None) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, n in counts.items():
        c = names.get(k, k) if names else ("GET*" if k in ("GET", "GET_RANGE") else k)
        if n:
            out[c] = out.get(c, 0) + n
    return out


def outcome_delta(u0: dict, u1: dict, outcome: str) -> int:
    """How many requests of one outcome the mount counted between two usage reports."""
    return u1.get("outcomes", {}).get(outcome, 0) - u0.get("outcomes", {}).get(outcome, 0)


def cancelled_unseen(mine: tuple, seen: tuple, cancelled: int) -> int | None:
    """Requests the mount counted that the proxy never saw, when requests it cancelled
    explain them: a request handed to the HTTP client and dropped (the loser of a lookup's
    race, a read abandoned) may end before its bytes reach the server. None when the
    counts agree or the cancellations cannot explain the difference."""
    (m_req, m_down, m_up), (s_req, s_down, s_up) = mine, seen
    if mine == seen or (m_down, m_up) != (s_down, s_up):
        return None
    if any(s_req.get(k, 0) > n for k, n in m_req.items()) or set(s_req) - set(m_req):
        return None
    extra = sum(m_req.values()) - sum(s_req.values())
    return extra if 0 < extra <= cancelled else None


class Window:
    """The measured interval: proxy counters reset, CPU counters read at both ends; for
    flowfs, its own usage report read at both ends too, to check that it counts what the
    proxy saw (issue 31: `usage_matches_proxy`)."""

    def __init__(self, ctx: Ctx, handle: MountHandle | None = None):
        self.ctx, self.handle = ctx, handle
        self.u0 = flowfs_usage(ctx, handle)
        ctx.server.reset_counts()
        self.s0, self.p0 = ctx.server.server_cpu_s(), ctx.server.proxy_cpu_s()
        self.h0 = handle.cpu_now() if handle else 0.0
        self.closed = False

    def close(self, rec: dict) -> None:
        if self.closed:
            return
        self.closed = True
        c = self.ctx.server.counts()
        ops = {k: v for k, v in sorted(c.get("ops", {}).items()) if v}
        if self.u0 is not None:
            # A mount unmounted inside the window said its last counts at the unmount.
            u1 = flowfs_usage(self.ctx, self.handle) or self.handle.usage_at_unmount
            if u1 is not None:
                r0 = self.u0["requests"]
                delta = {k: n - r0.get(k, 0) for k, n in u1["requests"].items()}
                mine = (by_class(delta, USAGE_CLASSES), u1["bytes_down"] - self.u0["bytes_down"],
                        u1["bytes_up"] - self.u0["bytes_up"])
                seen = (by_class(ops), c.get("get_bytes", 0), c.get("put_bytes", 0))
                rec["usage_requests"] = sum(delta.values())
                rec["usage_matches_proxy"] = mine == seen
                rec["usage_cancelled"] = outcome_delta(self.u0, u1, "cancelled")
                unseen = cancelled_unseen(mine, seen, rec["usage_cancelled"])
                if unseen is not None:
                    rec["usage_cancelled_unseen"] = unseen
                if mine != seen:
                    util.log(f"  flowfs usage (requests, bytes down, up) {mine} != proxy {seen}")
        rec["requests_by_type"] = ops
        rec["requests"] = sum(ops.values())
        rec["bytes_down"] = c.get("get_bytes", 0)
        rec["bytes_up"] = c.get("put_bytes", 0)
        rec["server_cpu_s"] = round(self.ctx.server.server_cpu_s() - self.s0, 3)
        rec["proxy_cpu_s"] = round(self.ctx.server.proxy_cpu_s() - self.p0, 3)
        if self.handle is not None:
            rec["cache_written"] = cache_bytes(self.handle.cache_dir)
            rec["tool_cpu_s"] = round(self.handle.cpu_now() - self.h0, 3)
            rss = self.handle.peak_rss_mib()
            rec["peak_rss_mib"] = round(rss, 1) if rss else None


def cache_bytes(cache_dir: Path) -> int | None:
    """Bytes allocated to object data in a flowfs cache dir (issue 48: what admission
    wrote), None for a tool without one."""
    objects = Path(cache_dir) / "objects"
    if not objects.is_dir():
        return None
    total = 0
    for e in os.scandir(objects):
        if e.name.endswith(".bytes"):
            try:
                total += e.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
    return total


def io_op(ctx: Ctx, *args: str, handle: MountHandle | None = None) -> dict:
    """Run io_ops.py; its JSON result, or {"error": ...}. A stuck mount is aborted on timeout."""
    out = ctx.work / "io_op.json"
    r = util.run([sys.executable, IO_OPS, *args], timeout=ctx.timeout, stdout_path=str(out),
                 on_timeout=(handle.abort if handle else None))
    if r.timed_out:
        return {"error": f"timed out after {ctx.timeout:.0f}s"}
    try:
        res = json.loads(out.read_text().strip().splitlines()[-1])
    except (ValueError, IndexError, OSError):
        return {"error": f"io_ops {args[0]} exit {r.returncode}: {r.stderr.strip()[-500:]}"}
    res["proc_cpu"] = r.cpu_s
    return res


def run_tool(ctx: Ctx, cmd: list[str], tool: CliTool) -> util.RunResult:
    return util.run(cmd, env=tool.env(ctx), timeout=ctx.timeout, secrets_=ctx.server.secrets)


def cli_result(rec: dict, r: util.RunResult) -> bool:
    rec["wall_s"] = round(r.wall_s, 3)
    rec["tool_cpu_s"] = round(r.cpu_s, 3)
    rec["peak_rss_mib"] = round(r.maxrss_kib / 1024, 1) if r.maxrss_kib else None
    if r.timed_out:
        rec["error"] = f"timed out after {r.wall_s:.0f}s"
    elif r.returncode != 0:
        rec["error"] = f"exit {r.returncode}: {r.stderr.strip()[-600:]}"
    return rec["error"] is None


def fresh_scratch(ctx: Ctx) -> Path:
    util.rm_rf(ctx.scratch)
    ctx.scratch.mkdir(parents=True)
    return ctx.scratch


@contextmanager
def mounted(ctx: Ctx, tool: MountTool, tag: str):
    h = tool.mount(ctx, tag, timeout=ctx.mount_timeout)
    try:
        yield h
    finally:
        if not h.closed:
            ok, _, err = h.unmount(ctx, timeout=300)
            if not ok:
                util.log(f"  warning: {tool.name} unmount: {err}")


@contextmanager
def cold_mount(ctx: Ctx, tool: MountTool, tag: str, rec: dict):
    """A fresh mount of `tool` (its mount time in `rec`) with the page cache dropped, and
    the measured window opened on it: yields (handle, window); the caller closes the window."""
    with mounted(ctx, tool, tag) as h:
        rec["mount_s"] = round(h.mount_s, 3)
        util.drop_caches()
        yield h, Window(ctx, h)


# ---------------------------------------------------------------------- verification


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 * MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def verify_dir(d: Path, manifest: dict[str, str]) -> tuple[bool, str]:
    if not d.is_dir():
        return False, f"{d.name}/ missing"
    names = set(os.listdir(d))
    missing = set(manifest) - names
    if missing:
        return False, f"{len(missing)} of {len(manifest)} files missing"
    bad = [n for n in manifest if sha256_file(d / n) != manifest[n]]
    if bad:
        return False, f"{len(bad)} files differ (sha256), e.g. {bad[0]}"
    return True, f"sha256 of all {len(manifest)} files"


def verify_samples(ctx: Ctx, res: dict) -> tuple[bool, str]:
    d = ctx.data
    if res.get("bytes") != ctx.sizes.big:
        return False, f"read {res.get('bytes')} bytes, expected {ctx.sizes.big}"
    bad = [i for i, h in res["samples"].items() if d.big_chunks[int(i)] != h]
    if bad:
        return False, f"{len(bad)} of {len(res['samples'])} sampled chunks differ"
    return True, f"size + sha256 of {len(res['samples'])} sampled 1 MiB chunks"


def verify_local_big(ctx: Ctx, path: Path) -> tuple[bool, str]:
    d = ctx.data
    if not path.exists() or path.stat().st_size != ctx.sizes.big:
        return False, "downloaded file missing or wrong size"
    every = d.sample_every()
    n = len(d.big_chunks)
    idx = sorted(set(range(0, n, every)) | {n - 1})
    with open(path, "rb") as f:
        for i in idx:
            if hashlib.sha256(os.pread(f.fileno(), ctx.sizes.chunk, i * ctx.sizes.chunk)).hexdigest() != d.big_chunks[i]:
                return False, f"chunk {i} differs"
    return True, f"size + sha256 of {len(idx)} sampled 1 MiB chunks"


def verify_remote_big(ctx: Ctx, key: str) -> tuple[bool, str]:
    d = ctx.data
    size = ctx.server.head_size(key)
    if size != ctx.sizes.big:
        return False, f"object {key}: size {size}, expected {ctx.sizes.big}"
    n = len(d.big_chunks)
    idx = sorted(set(range(0, n, d.sample_every())) | {n - 1})
    for i in idx:
        data = ctx.server.get_range(key, i * ctx.sizes.chunk, min(ctx.sizes.chunk, ctx.sizes.big - i * ctx.sizes.chunk))
        if hashlib.sha256(data).hexdigest() != d.big_chunks[i]:
            return False, f"object {key}: chunk {i} differs"
    return True, f"size + sha256 of {len(idx)} sampled 1 MiB ranges of the object"


def verify_remote_small(ctx: Ctx, prefix: str) -> tuple[bool, str]:
    m = ctx.data.b5_manifest
    keys = ctx.server.list_keys(prefix)
    names = {k[len(prefix):]: s for k, s in keys.items()}
    missing = [n for n in m if n not in names]
    if missing:
        return False, f"{len(missing)} of {len(m)} objects missing"
    wrong = [n for n in m if names[n] != ctx.sizes.b5_size]
    if wrong:
        return False, f"{len(wrong)} objects with wrong size"
    sample = sorted(m)[:: max(1, len(m) // 25)]
    for n in sample:
        if hashlib.sha256(ctx.server.get(prefix + n)).hexdigest() != m[n]:
            return False, f"object {prefix}{n} differs"
    return True, f"all {len(m)} objects listed with their size; sha256 of {len(sample)}"


def visible_small(ctx: Ctx, prefix: str) -> bool:
    keys = ctx.server.list_keys(prefix)
    return len(keys) >= len(ctx.data.b5_manifest) and all(
        keys.get(prefix + n) == ctx.sizes.b5_size for n in ctx.data.b5_manifest)


def poll(ctx: Ctx, check, interval: float = 0.1) -> float | None:
    """Seconds until check() holds, or None after ctx.poll_timeout."""
    t0 = time.monotonic()
    while True:
        if check():
            return time.monotonic() - t0
        if time.monotonic() - t0 > ctx.poll_timeout:
            return None
        time.sleep(interval)


# ====================================================================== workloads


def measure(ctx: Ctx, tool: Tool, workload: str, run: int) -> list[dict]:
    from .b7 import b7
    from .b11 import b11

    fn = {"B1": b1, "B1s": b1s, "B1p": b1p, "B1c": b1c, "B2": b2, "B3": b3, "B4": b4, "B5": b5, "B6": b6, "B7": b7, "B8": b8,
          "B11": b11}[workload]
    variants = ["cold", "warm"] if workload == "B3" else [""]
    try:
        return fn(ctx, tool, run)
    except Exception as e:  # noqa: BLE001 - one failed measurement must not stop the suite
        msg = f"{type(e).__name__}: {e}"
        if not isinstance(e, (MountError, TimeoutError)):
            msg += " | " + traceback.format_exc(limit=3).strip().splitlines()[-3].strip()
        recs = []
        for v in variants:
            rec = new_record(workload, v, tool, run)
            rec["error"] = util.redact(msg, ctx.server.secrets)[-1500:]
            recs.append(rec)
        return recs
    finally:
        util.rm_rf(ctx.scratch)


def b1(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    return copy_prefix(ctx, tool, run, "B1", "b1", ctx.data.b1_manifest)


def b1s(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    return copy_prefix(ctx, tool, run, "B1s", "b1s", ctx.data.b1s_manifest)


def b1p(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    return copy_prefix(ctx, tool, run, "B1p", "b1", ctx.data.b1_manifest, readers=PARALLEL_READERS)


def consumed_digest(d: Path) -> str:
    """The sha256 of the files of `d` one after another, in the order `cat d/*` takes them
    (LC_ALL=C: byte order)."""
    h = hashlib.sha256()
    for n in sorted(os.listdir(d), key=os.fsencode):
        with open(d / n, "rb") as f:
            while b := f.read(4 * MiB):
                h.update(b)
    return h.hexdigest()


def consume(ctx: Ctx, d: Path, on_timeout=None) -> tuple[util.RunResult, bool, str]:
    """The task: `cat d/* | sha256sum`; its result, and whether it printed the digest of B1."""
    out = ctx.work / "consumed.txt"
    r = util.run(["sh", "-c", CONSUME, "consume", str(d)], timeout=ctx.timeout, stdout_path=str(out),
                 env={**os.environ, "LC_ALL": "C"}, on_timeout=on_timeout)
    if ctx.data.b1_digest is None:
        ctx.data.b1_digest = consumed_digest(ctx.data.b1_dir)
    got = out.read_text().split()[:1] if out.exists() else []
    ok = got == [ctx.data.b1_digest]
    return r, ok, "sha256 of the files read in order" if ok else f"digest {got} != {ctx.data.b1_digest[:12]}…"


def b1c(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    """B1c (issue 48): a task consumes its inputs. The copier downloads the prefix, then the
    task reads every file; on a mount the task reads them in place. Wall time of both steps;
    tool CPU = the tool's (copier or mount) plus the task's."""
    rec = new_record("B1c", "", tool, run)
    dest = fresh_scratch(ctx)
    if isinstance(tool, CliTool):
        util.drop_caches()
        w = Window(ctx)
        r = run_tool(ctx, tool.get_prefix(ctx, "b1/", dest / "b1"), tool)
        ok = cli_result(rec, r)
        if ok:
            c, ok, rec["notes"] = consume(ctx, dest / "b1")
            rec["wall_s"] = round(rec["wall_s"] + c.wall_s, 3)
            rec["client_cpu_s"] = round(c.cpu_s, 3)
            rec["tool_cpu_s"] = round(rec["tool_cpu_s"] + c.cpu_s, 3)
            ok = ok and c.returncode == 0 and not c.timed_out
        w.close(rec)
    else:
        with cold_mount(ctx, tool, f"r{run}-b1c", rec) as (h, w):
            c, ok, rec["notes"] = consume(ctx, h.path / "b1", on_timeout=h.abort)
            w.close(rec)
            rec["wall_s"], rec["client_cpu_s"] = round(c.wall_s, 3), round(c.cpu_s, 3)
            if rec["tool_cpu_s"] is not None:
                rec["tool_cpu_s"] = round(rec["tool_cpu_s"] + c.cpu_s, 3)
            ok = ok and c.returncode == 0 and not c.timed_out
    rec["verified"] = ok
    if not ok and not rec["error"]:
        rec["error"] = f"the task failed: {rec['notes']}"
    return [rec]


def copy_cmd(src: Path, dest: Path, readers: int) -> list[str]:
    """`cp -r`, or `readers` cp processes at once, 8 files each, over the files of a flat `src`."""
    if readers <= 1:
        return ["cp", "-r", str(src), str(dest)]
    out = dest / src.name
    script = (f'mkdir -p "$2" && find "$1" -maxdepth 1 -type f -print0 | '
              f'xargs -0 -P{readers} -n 8 cp -t "$2"')
    return ["sh", "-c", script, "copy", str(src), str(out)]


def copy_prefix(ctx: Ctx, tool: Tool, run: int, workload: str, prefix: str, manifest: dict[str, str],
                readers: int = 1) -> list[dict]:
    """A cold copy of every object under `prefix`: `cp -r` (or `readers` cp at once) from a mount,
    the copier's own command."""
    rec = new_record(workload, "", tool, run)
    dest = fresh_scratch(ctx)
    if isinstance(tool, CliTool):
        util.drop_caches()
        w = Window(ctx)
        r = run_tool(ctx, tool.get_prefix(ctx, f"{prefix}/", dest / prefix), tool)
        w.close(rec)
        ok = cli_result(rec, r)
    else:
        with cold_mount(ctx, tool, f"r{run}-{prefix}", rec) as (h, w):
            r = util.run(copy_cmd(h.path / prefix, dest, readers), timeout=ctx.timeout, on_timeout=h.abort)
            w.close(rec)
            rec["wall_s"], rec["client_cpu_s"] = round(r.wall_s, 3), round(r.cpu_s, 3)
            ok = r.returncode == 0 and not r.timed_out
            if not ok:
                rec["error"] = "timed out" if r.timed_out else f"cp exit {r.returncode}: {r.stderr.strip()[-500:]}"
    if ok:
        rec["verified"], rec["notes"] = verify_dir(dest / prefix, manifest)
    return [rec]


def b8(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    """A directory walk: `find -printf '%s %P'` on a cold mount (a LIST per directory, a stat
    per file), against a copier's one flat listing of the same keys (`s5cmd ls 'b8/*'`)."""
    rec = new_record("B8", "", tool, run)
    out = fresh_scratch(ctx) / "walk.txt"
    want = ctx.data.b8_names
    if isinstance(tool, CliTool):
        w = Window(ctx)
        r = util.run(tool.list_prefix(ctx, "b8/"), env=tool.env(ctx), timeout=ctx.timeout,
                     stdout_path=str(out), secrets_=ctx.server.secrets)
        w.close(rec)
        if cli_result(rec, r):
            # "DATE TIME SIZE KEY": s5cmd names the key below the wildcard's prefix (DIR/NAME),
            # aws in full (b8/DIR/NAME).
            keys = [ln.split()[-1] for ln in out.read_text().splitlines() if ln.strip()]
            got = {k[len("b8/"):] if k.startswith("b8/") else k for k in keys}
            rec["verified"] = got == want
            rec["notes"] = "" if rec["verified"] else f"listed {len(got)} of {len(want)} keys"
        return [rec]
    with mounted(ctx, tool, f"r{run}-b8") as h:
        rec["mount_s"] = round(h.mount_s, 3)
        w = Window(ctx, h)
        r = util.run(["find", str(h.path / "b8"), "-type", "f", "-printf", "%s %P\n"], timeout=ctx.timeout,
                     stdout_path=str(out), on_timeout=h.abort)
        w.close(rec)
        rec["wall_s"], rec["client_cpu_s"] = round(r.wall_s, 3), round(r.cpu_s, 3)
        if r.returncode != 0 or r.timed_out:
            rec["error"] = "timed out" if r.timed_out else f"find exit {r.returncode}: {r.stderr.strip()[-500:]}"
            return [rec]
    lines = [ln.split(" ", 1) for ln in out.read_text().splitlines()]
    got = {name for size, name in lines if size == "1"}
    rec["verified"] = got == want and len(lines) == len(want)
    rec["notes"] = "" if rec["verified"] else f"found {len(got)} of {len(want)} one-byte files in {len(lines)} lines"
    return [rec]


def b2(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    rec = new_record("B2", "", tool, run)
    dest = fresh_scratch(ctx)
    tar = ["tar", "-x", "-C", str(dest)]
    if isinstance(tool, CliTool):
        util.drop_caches()
        w = Window(ctx)
        p = util.run_pipe(tool.stream(ctx, "b2/many.tar"), tar, env1=tool.env(ctx), timeout=ctx.timeout,
                          secrets_=ctx.server.secrets)
        w.close(rec)
        cli_result(rec, p.first)
        rec["client_cpu_s"] = round(p.second.cpu_s, 3)
        ok = p.ok
        if not ok and not rec["error"]:
            rec["error"] = f"tar exit {p.second.returncode}: {p.second.stderr.strip()[-400:]}"
    elif isinstance(tool, Ratarmount):
        # mounting the tar builds ratarmount's index: that is part of its work, so it is timed
        util.drop_caches()
        w = Window(ctx)
        t0 = time.monotonic()
        h = tool.mount(ctx, f"r{run}-b2", timeout=ctx.timeout)
        try:
            w.handle = h
            rec["mount_s"] = round(h.mount_s, 3)
            r = util.run(["cp", "-r", str(h.path / "b1"), str(dest)], timeout=ctx.timeout, on_timeout=h.abort)
            rec["wall_s"] = round(time.monotonic() - t0, 3)
            w.close(rec)
            rec["client_cpu_s"] = round(r.cpu_s, 3)
            ok = r.returncode == 0 and not r.timed_out
            if not ok:
                rec["error"] = "timed out" if r.timed_out else f"cp -r exit {r.returncode}: {r.stderr.strip()[-500:]}"
        finally:
            h.unmount(ctx)
    else:
        with cold_mount(ctx, tool, f"r{run}-b2", rec) as (h, w):
            p = util.run_pipe(["cat", str(h.path / "b2" / "many.tar")], tar, timeout=ctx.timeout)
            w.close(rec)
            rec["wall_s"] = round(p.wall_s, 3)
            rec["client_cpu_s"] = round(p.first.cpu_s + p.second.cpu_s, 3)
            ok = p.ok
            if not ok:
                rec["error"] = ("timed out" if p.first.timed_out else
                                f"cat|tar failed: {(p.first.stderr + p.second.stderr).strip()[-500:]}")
    if ok:
        rec["verified"], rec["notes"] = verify_dir(dest / "b1", ctx.data.b1_manifest)
    return [rec]


def b3(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    recs = []
    if isinstance(tool, CliTool):
        for variant in ("cold", "warm"):
            rec = new_record("B3", variant, tool, run)
            dest = fresh_scratch(ctx) / "big.bin"
            if variant == "cold":
                util.drop_caches()
            w = Window(ctx)
            r = run_tool(ctx, tool.get(ctx, "b3/big.bin", dest), tool)
            w.close(rec)
            if cli_result(rec, r):
                rec["verified"], rec["notes"] = verify_local_big(ctx, dest)
            recs.append(rec)
        return recs
    with mounted(ctx, tool, f"r{run}-b3") as h:
        for variant in ("cold", "warm"):
            rec = new_record("B3", variant, tool, run)
            rec["mount_s"] = round(h.mount_s, 3) if variant == "cold" else None
            if variant == "cold":
                util.drop_caches()
            w = Window(ctx, h)
            res = io_op(ctx, "seqread", str(h.path / "b3" / "big.bin"), str(ctx.sizes.chunk),
                        str(ctx.data.sample_every()), handle=h)
            w.close(rec)
            recs.append(rec)
            if "error" in res:
                rec["error"] = f"read: {res['error']}"
                if h.closed:
                    break
                continue
            rec["wall_s"], rec["client_cpu_s"] = round(res["elapsed"], 3), round(res["cpu"], 3)
            rec["verified"], rec["notes"] = verify_samples(ctx, res)
    if len(recs) == 1:
        rec = new_record("B3", "warm", tool, run)
        rec["error"] = "not run: the cold read failed and the mount was aborted"
        recs.append(rec)
    return recs


def b4(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    rec = new_record("B4", "", tool, run)
    d = ctx.data
    if isinstance(tool, CliTool):
        # a copier cannot read a range: the task stages the whole object, then preads locally
        dest = fresh_scratch(ctx) / "big.bin"
        util.drop_caches()
        w = Window(ctx)
        r = run_tool(ctx, tool.get(ctx, "b3/big.bin", dest), tool)
        w.close(rec)
        if not cli_result(rec, r):
            return [rec]
        res = io_op(ctx, "pread", str(dest), str(d.offsets_file), str(ctx.sizes.b4_size))
        rec["notes"] = "whole object staged, then local preads"
    else:
        with mounted(ctx, tool, f"r{run}-b4") as h:
            rec["mount_s"] = round(h.mount_s, 3)
            util.drop_caches()
            w = Window(ctx, h)
            res = io_op(ctx, "pread", str(h.path / "b3" / "big.bin"), str(d.offsets_file),
                        str(ctx.sizes.b4_size), handle=h)
            w.close(rec)
            rec["wall_s"] = 0.0
    if "error" in res:
        rec["error"] = f"pread: {res['error']}"
        return [rec]
    rec["wall_s"] = round((rec["wall_s"] or 0.0) + res["elapsed"], 3)
    rec["client_cpu_s"] = round(res["cpu"], 3)
    bad = sum(1 for a, b in zip(res["hashes"], d.b4_hashes) if a != b)
    rec["verified"] = bad == 0 and len(res["hashes"]) == len(d.b4_hashes)
    rec["notes"] = ((rec["notes"] + "; ") if rec["notes"] else "") + (
        f"sha256 of all {len(d.b4_hashes)} reads" if rec["verified"] else f"{bad} reads differ")
    return [rec]


def _durable(ctx: Ctx, tool: MountTool, h: MountHandle, rec: dict, check) -> float | None:
    """Seconds from the last close() until the data is durable, per the tool's own contract."""
    if tool.durable == "close":
        return 0.0
    if tool.durable == "unmount":
        ok, dt, err = h.unmount(ctx, timeout=max(ctx.timeout, 300))
        if not ok:
            rec["error"] = f"unmount (durability point) failed: {err}"
            return None
        return dt if check() else poll(ctx, check)
    dt = poll(ctx, check)
    if dt is None:
        rec["error"] = f"not visible in the bucket {ctx.poll_timeout:.0f}s after close()"
    return dt


def b5(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    rec = new_record("B5", "", tool, run)
    d = ctx.data
    prefix = f"b5/{tool.name}-r{run}/"
    if isinstance(tool, LocalDisk):
        return [b5_local(ctx, rec)]
    try:
        if isinstance(tool, CliTool):
            util.drop_caches()
            w = Window(ctx)
            r = run_tool(ctx, tool.put_dir(ctx, d.b5_dir, prefix), tool)
            w.close(rec)
            if cli_result(rec, r):
                rec["verified"], rec["notes"] = verify_remote_small(ctx, prefix)
            return [rec]
        with mounted(ctx, tool, f"r{run}-b5") as h:
            rec["mount_s"] = round(h.mount_s, 3)
            util.drop_caches()
            w = Window(ctx, h)
            res = io_op(ctx, "smallwrite", str(d.b5_dir), str(h.path / prefix.rstrip("/")), handle=h)
            if "error" in res:
                w.close(rec)
                rec["error"] = f"write: {res['error']}"
                return [rec]
            rec["write_s"] = round(res["elapsed"], 3)
            rec["client_cpu_s"] = round(res["cpu"], 3)
            dt = _durable(ctx, tool, h, rec, lambda: visible_small(ctx, prefix))
            w.close(rec)
            if dt is None:
                return [rec]
            rec["wall_s"] = round(res["elapsed"] + dt, 3)
        if isinstance(tool, JuiceFS):
            rec["verified"], rec["notes"] = _verify_via_remount(ctx, tool, run, prefix=prefix)
        else:
            rec["verified"], rec["notes"] = verify_remote_small(ctx, prefix)
        return [rec]
    finally:
        ctx.server.delete_prefix(prefix)


def b5_local(ctx: Ctx, rec: dict) -> dict:
    """B5's files written into a local directory by the same writer: the baseline of the
    write phase (issue 27: a mount's ≤ 2x local disk); durable when `sync -f` returns."""
    dest = fresh_scratch(ctx) / "b5"
    util.drop_caches()
    res = io_op(ctx, "smallwrite", str(ctx.data.b5_dir), str(dest))
    if "error" in res:
        rec["error"] = f"write: {res['error']}"
        return rec
    s = util.run(["sync", "-f", str(dest)], timeout=ctx.timeout)
    rec["write_s"] = round(res["elapsed"], 3)
    rec["client_cpu_s"] = round(res["cpu"], 3)
    rec["wall_s"] = round(res["elapsed"] + s.wall_s, 3)
    rec["verified"], rec["notes"] = verify_dir(dest, ctx.data.b5_manifest)
    return rec


def b6(ctx: Ctx, tool: Tool, run: int) -> list[dict]:
    rec = new_record("B6", "", tool, run)
    d = ctx.data
    key = f"b6-{tool.name}-r{run}.bin"
    try:
        if isinstance(tool, CliTool):
            util.drop_caches()
            with open(d.big, "rb") as f:  # source into the page cache, like the mounts' writer
                while f.read(64 * MiB):
                    pass
            w = Window(ctx)
            r = run_tool(ctx, tool.put(ctx, d.big, key), tool)
            w.close(rec)
            if cli_result(rec, r):
                rec["verified"], rec["notes"] = verify_remote_big(ctx, key)
            return [rec]
        with mounted(ctx, tool, f"r{run}-b6") as h:
            rec["mount_s"] = round(h.mount_s, 3)
            util.drop_caches()
            w = Window(ctx, h)
            res = io_op(ctx, "bigwrite", str(d.big), str(h.path / key), str(ctx.sizes.chunk), handle=h)
            if "error" in res:
                w.close(rec)
                rec["error"] = f"write: {res['error']}"
                return [rec]
            rec["write_s"] = round(res["elapsed"], 3)
            rec["client_cpu_s"] = round(res["cpu"], 3)
            dt = _durable(ctx, tool, h, rec, lambda: ctx.server.head_size(key) == ctx.sizes.big)
            w.close(rec)
            if dt is None:
                return [rec]
            rec["wall_s"] = round(res["elapsed"] + dt, 3)
        if isinstance(tool, JuiceFS):
            rec["verified"], rec["notes"] = _verify_via_remount(ctx, tool, run, key=key)
        else:
            rec["verified"], rec["notes"] = verify_remote_big(ctx, key)
        return [rec]
    finally:
        ctx.server.delete_prefix(key)


def _verify_via_remount(ctx: Ctx, tool: JuiceFS, run: int, prefix: str | None = None,
                        key: str | None = None) -> tuple[bool, str]:
    """For a tool with its own format: read the data back through a fresh mount, then delete it."""
    with mounted(ctx, tool, f"r{run}-verify") as h:
        try:
            if prefix is not None:
                ok, msg = verify_dir(h.path / prefix.rstrip("/"), ctx.data.b5_manifest)
                return ok, msg + " (read back through a fresh mount)"
            res = io_op(ctx, "seqread", str(h.path / key), str(ctx.sizes.chunk), str(ctx.data.sample_every()),
                        handle=h)
            if "error" in res:
                return False, f"read back: {res['error']}"
            ok, msg = verify_samples(ctx, res)
            return ok, msg + " (read back through a fresh mount)"
        finally:
            if not h.closed:
                util.run(["rm", "-rf", str(h.path / (prefix or key))], timeout=600)
