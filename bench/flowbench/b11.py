"""B11: archives read in place (issue 29): a .tar and its .tar.gz mounted as the tree of their
members, by flowfs (`flowfs mount s3://bench/b11/data.tar DIR`) and by ratarmount (its s3://
backend through fsspec's s3fs), on the same objects, server and run.

Per tool and format, four steps, each a record (variant "FORMAT STEP"):

1. `list-cold`: mount (the index is built: one pass over the archive) + `find DIR`, page
   cache dropped, empty cache dir: timed from the mount command to the end of `find`.
2. `list-cached`: unmount, mount again on the same cache dir (flowfs: its
   `archives/<archive>-<version>.idx`/`.gzi`; ratarmount: its `--index-file CACHE/ratarmount.index.sqlite`),
   `find DIR`: the find is timed; the window (requests, bytes, CPU) also holds the remount.
3. `members-100`: 100 members drawn with a fixed seed, read whole and hashed, cold data but the
   index present (flowfs: `flowfs cache clear` of that cache dir, which keeps the index;
   ratarmount keeps no data between mounts); the reads are timed, the window holds the mount.
4. `cp-r`: `cp -r DIR local/` of every member, cold data, index present; timed as step 3.

And the peers a user would otherwise run, through a normal flowfs mount of the bucket (fresh
cache), recorded under the flowfs tool: `seq-read` (`cat NAME > /dev/null`, the archive read
sequentially: step 1's yardstick) and `cat-tar-x` (`cat NAME | tar -x[z]`: step 4's).

Everything is verified: listings against the data set's names, types and sizes, every member
read or copied against its sha256, the sequential read against the archive's sha256.

The data set (deterministic, made once and cached under FLOWFS_BENCH_CACHE/data/): N files of
FASTA-like text (a header line, then random ACGT in 60-column lines; gzip -1 packs it about
3.5x) in N/100 directories, sizes log-normal around a mean that makes the tar FULL 2 GiB of
10,000 files, QUICK 64 MiB of 1,000, with an empty file every 997; written with Python's
tarfile (GNU format, fixed owner and mtimes), gzipped with `gzip -1 -n` (GNU gzip).
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import util
from .install import CACHE
from .tools import FlowFS, MountError, MountHandle, MountTool, Tool
from .workloads import sha256_file

MiB = 1 << 20
SEED = 20261128
PICKS = 100  # members read in step 3
SPAN = 4 * MiB  # flowfs's gzip restart spacing (of uncompressed output)
FORMATS = {"tar": "b11/data.tar", "tar.gz": "b11/data.tar.gz"}
# FLOWFS_B11_FORMATS=tar: one format only, to measure a change to it (not for reported runs)
if os.environ.get("FLOWFS_B11_FORMATS"):
    FORMATS = {f: FORMATS[f] for f in os.environ["FLOWFS_B11_FORMATS"].split(",")}
STEPS = ["list-cold", "list-cached", "members-100", "cp-r"]
PEERS = ["seq-read", "cat-tar-x"]  # flowfs through a normal mount of the bucket
MTIME = 1_764_000_000


@dataclass
class ArchiveSizes:
    label: str
    files: int
    tar_bytes: int  # about the tar's size
    per_dir: int = 100

    def describe(self) -> str:
        return (f"a {util.fmt_bytes(self.tar_bytes)} tar of {self.files} FASTA-like files (log-normal sizes, "
                f"{self.files // self.per_dir} directories) and its gzip -1 .tar.gz, mounted in place: first "
                f"listing (index build), listing with the index kept, {PICKS} random members, cp -r of all")


B11_FULL = ArchiveSizes("full", 10_000, 2 << 30)
B11_QUICK = ArchiveSizes("quick", 1_000, 64 * MiB)
B11_TINY = ArchiveSizes("tiny", 100, 4 * MiB, per_dir=20)


# ====================================================================== the data set


@dataclass
class ArchiveData:
    root: Path
    sizes: ArchiveSizes
    files: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (size, sha256)
    dirs: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # sizes and sha256 of the archives, compressor
    picks: list[str] = field(default_factory=list)
    picks_path: Path | None = None  # the picks as JSON, for io_ops readfiles

    def path(self, fmt: str) -> Path:
        return self.root / Path(FORMATS[fmt]).name

    def size(self, fmt: str) -> int:
        return self.info[fmt]["size"]

    @property
    def member_bytes(self) -> int:
        return sum(s for s, _ in self.files.values())

    @property
    def picks_bytes(self) -> int:
        return sum(self.files[n][0] for n in self.picks)


def _sizes(rng: random.Random, s: ArchiveSizes) -> list[int]:
    raw = [rng.lognormvariate(0.0, 1.2) for _ in range(s.files)]
    dirs = (s.files + s.per_dir - 1) // s.per_dir
    # tar: a 512-byte header per entry, data padded to 512 (256 on average), the end blocks
    budget = s.tar_bytes - s.files * (512 + 256) - dirs * 512 - 10240
    scale = budget / sum(raw)
    out = [min(int(x * scale), 64 * MiB) for x in raw]
    for i in range(0, s.files, 997):
        out[i] = 0
    return out


def generate(root: Path, s: ArchiveSizes) -> dict:
    """Writes data.tar, data.tar.gz and manifest.json into `root`; returns the manifest."""
    rng = random.Random(SEED)
    pool_len = 64 * MiB
    seq = rng.randbytes(pool_len).translate(bytes(b"ACGT"[i & 3] for i in range(256)))
    lines = [seq[i:i + 60] for i in range(0, len(seq), 60)]
    # Tandem repeats, as a genome has: a quarter of the lines copy one of the two before with
    # one base changed. Random ACGT alone packs only 2.9x with gzip -1, which looks for a
    # match among the last 4 places its 3 bytes were seen (about 256 bytes back here).
    for i in range(2, len(lines)):
        if rng.random() < 0.25:
            line = bytearray(lines[i - rng.randrange(1, 3)])
            line[rng.randrange(60)] = b"ACGT"[rng.randrange(4)]
            lines[i] = bytes(line)
    pool = b"\n".join(lines)
    sizes = _sizes(rng, s)
    files: dict[str, list] = {}
    dirs: list[str] = []
    tar_path = root / "data.tar"
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tf:
        for i, size in enumerate(sizes):
            d = f"d{i // s.per_dir:03d}"
            if i % s.per_dir == 0:
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, MTIME
                ti.uid = ti.gid = 1000
                ti.uname = ti.gname = "bench"
                tf.addfile(ti)
                dirs.append(d)
            name = f"{d}/s{i:05d}.fa"
            head = f">s{i:05d} random ACGT, {size} bytes\n".encode()
            off = rng.randrange(0, len(pool) - size) if size < len(pool) else 0
            data = (head + pool[off:off + size])[:size]
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, MTIME + i
            ti.uid = ti.gid = 1000
            ti.uname = ti.gname = "bench"
            tf.addfile(ti, io.BytesIO(data))
            files[name] = [len(data), hashlib.sha256(data).hexdigest()]
    gz_path = root / "data.tar.gz"
    with open(gz_path, "wb") as out:
        subprocess.run(["gzip", "-1", "-n", "-c", str(tar_path)], stdout=out, check=True, timeout=1800)
    ver = subprocess.run(["gzip", "--version"], capture_output=True, text=True).stdout.splitlines()[0].strip()
    info = {fmt: {"size": p.stat().st_size, "sha256": sha256_file(p)} for fmt, p in
            (("tar", tar_path), ("tar.gz", gz_path))}
    info["compressor"] = f"gzip -1 -n ({ver})"
    manifest = {"files": files, "dirs": dirs, "info": info}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def data_dir(s: ArchiveSizes) -> Path:
    """The cached data set for these sizes: made on the first call, reused after (the key
    holds the sizes, the seed and the generator's own source)."""
    src = inspect.getsource(generate) + inspect.getsource(_sizes)
    key = f"b11-{s.label}-{s.files}-{s.tar_bytes}-{SEED}-{hashlib.sha256(src.encode()).hexdigest()[:12]}"
    base = CACHE / "data"
    d = base / key
    if (d / "manifest.json").exists():
        return d
    base.mkdir(parents=True, exist_ok=True)
    for old in base.glob(f"b11-{s.label}-*"):  # an older generator's data: 2.6 GiB each at full size
        shutil.rmtree(old, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=base))
    try:
        t0 = time.monotonic()
        generate(tmp, s)
        os.replace(tmp, d)
        util.log(f"B11: data set made in {time.monotonic() - t0:.0f}s: {d}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return d


def prepare(ctx, s5cmd: str, s: ArchiveSizes) -> ArchiveData:
    """The data set (cached), uploaded once to s3://bench/b11/ straight to SeaweedFS."""
    util.log(f"B11: data set ({s.label}; generated once, then cached)")
    root = data_dir(s)
    m = json.loads((root / "manifest.json").read_text())
    data = ArchiveData(root, s, {k: (v[0], v[1]) for k, v in m["files"].items()}, m["dirs"], m["info"])
    data.picks = sorted(random.Random(SEED + 1).sample(sorted(data.files), min(PICKS, len(data.files))))
    ctx.work.mkdir(parents=True, exist_ok=True)
    picks = ctx.work / "b11-picks.json"
    picks.write_text(json.dumps(data.picks))
    data.picks_path = picks
    env = ctx.server.env(endpoint=ctx.server.direct_endpoint)
    for fmt, key in FORMATS.items():
        r = util.run([s5cmd, "--endpoint-url", ctx.server.direct_endpoint, "cp", str(data.path(fmt)),
                      f"s3://bench/{key}"], env=env, timeout=3600, secrets_=ctx.server.secrets)
        if r.returncode != 0:
            raise RuntimeError(f"B11 upload of {key} failed: {r.stderr.strip()[-800:]}")
        if ctx.server.head_size(key) != data.size(fmt):
            raise RuntimeError(f"B11 upload check: {key} has size {ctx.server.head_size(key)}")
    util.log(f"B11: {len(data.files)} members, {util.fmt_bytes(data.member_bytes)}; tar "
             f"{util.fmt_bytes(data.size('tar'))}, tar.gz {util.fmt_bytes(data.size('tar.gz'))} "
             f"({data.size('tar') / data.size('tar.gz'):.2f}x, {data.info['compressor']})")
    ctx.b11 = data
    return data


# ====================================================================== verification


def verify_listing(out: Path, data: ArchiveData) -> tuple[bool, str]:
    """`find -printf '%y %s %P'`: every directory, and every file with its size, nothing else."""
    got_files, got_dirs, other = {}, set(), []
    for line in out.read_text(errors="replace").splitlines():
        kind, size, name = (line.split(" ", 2) + ["", ""])[:3]
        if not name:
            continue  # the mount's root
        if kind == "f":
            got_files[name] = int(size)
        elif kind == "d":
            got_dirs.add(name)
        else:
            other.append(name)
    want = {n: s for n, (s, _) in data.files.items()}
    if got_files != want or got_dirs != set(data.dirs) or other:
        missing = len(set(want) - set(got_files))
        wrong = sum(1 for n in want if n in got_files and got_files[n] != want[n])
        return False, (f"listing: {len(got_files)} files ({missing} missing, {wrong} of wrong size, "
                       f"{len(set(got_files) - set(want))} unexpected), {len(got_dirs)} of {len(data.dirs)} dirs, "
                       f"{len(other)} other entries")
    return True, f"listing: all {len(want)} files with their sizes and {len(data.dirs)} directories"


def verify_tree(dest: Path, data: ArchiveData) -> tuple[bool, str]:
    """Every member copied, with its sha256; no other file."""
    seen = set()
    for dirpath, _, names in os.walk(dest):
        for n in names:
            seen.add(os.path.relpath(os.path.join(dirpath, n), dest))
    missing = set(data.files) - seen
    extra = seen - set(data.files)
    if missing or extra:
        return False, f"{len(missing)} of {len(data.files)} members missing, {len(extra)} unexpected files"
    bad = [n for n, (_, h) in data.files.items() if sha256_file(dest / n) != h]
    if bad:
        return False, f"{len(bad)} members differ (sha256), e.g. {bad[0]}"
    return True, f"sha256 of all {len(data.files)} members"


# ====================================================================== the measurement


def b11(ctx, tool: Tool, run: int) -> list[dict]:
    from .workloads import new_record

    data: ArchiveData | None = getattr(ctx, "b11", None)
    recs: list[dict] = []
    for fmt in FORMATS:
        variants = STEPS + (PEERS if isinstance(tool, FlowFS) else [])
        if data is None:
            for st in variants:
                rec = new_record("B11", f"{fmt} {st}", tool, run)
                rec["error"] = getattr(ctx, "b11_error", None) or "B11 data set not prepared"
                recs.append(rec)
            continue
        mine: list[dict] = []
        try:
            _archive_steps(ctx, tool, run, fmt, data, mine)
        except Exception as e:  # noqa: BLE001 - one format's failure must not stop the other
            msg = util.redact(f"{type(e).__name__}: {e}", ctx.server.secrets)[-1500:]
            if mine and mine[-1]["error"] is None and not mine[-1]["verified"]:
                mine[-1]["error"] = msg  # the step it happened in
            done = {r["variant"] for r in mine}
            mine += _unavailable(tool, run, fmt, [st for st in STEPS if f"{fmt} {st}" not in done],
                                 f"not run: {msg[:600]}")
        recs += mine
        if isinstance(tool, FlowFS):
            recs += _peers(ctx, tool, run, fmt, data)
    for rec in recs:
        # what a task waits for in all: list-cold's wall has its mount in it already; the
        # other steps' walls do not (ratarmount's remount also fetches data: see its Down)
        if rec.get("wall_s") is not None and not rec.get("error"):
            extra = 0.0 if rec["variant"].endswith("list-cold") else (rec.get("mount_s") or 0.0)
            rec["wall_with_mount_s"] = round(rec["wall_s"] + extra, 3)
    return recs


def variants(tool: Tool) -> list[str]:
    """The records a tool's B11 run gives: its steps per format (flowfs: and the peers)."""
    return [f"{fmt} {st}" for fmt in FORMATS for st in STEPS + (PEERS if isinstance(tool, FlowFS) else [])]


def _finish(rec: dict, data: ArchiveData, fmt: str) -> None:
    ops = rec.get("requests_by_type") or {}
    rec["gets"] = ops.get("GET", 0) + ops.get("GET_RANGE", 0)
    rec["format"] = fmt
    rec["archive_bytes"] = data.size(fmt)
    rec["tar_bytes"] = data.size("tar")


def _unavailable(tool: Tool, run: int, fmt: str, steps: list[str], why: str) -> list[dict]:
    from .workloads import new_record

    out = []
    for st in steps:
        rec = new_record("B11", f"{fmt} {st}", tool, run)
        rec["error"] = why
        rec["format"] = fmt
        out.append(rec)
    return out


def _find(ctx, h: MountHandle, out: Path) -> util.RunResult:
    return util.run(["find", str(h.path), "-printf", "%y %s %P\n"], timeout=ctx.timeout, stdout_path=str(out),
                    on_timeout=h.abort)


def _archive_steps(ctx, tool: MountTool, run: int, fmt: str, data: ArchiveData, recs: list[dict]) -> None:
    """The four steps on one archive, each record appended to `recs` as it starts."""
    from .workloads import Window, fresh_scratch, io_op, new_record

    key = FORMATS[fmt]
    at = tool.of_archive(key)
    cache = ctx.work / "b11" / f"{tool.name}-{fmt}-r{run}"
    util.rm_rf(cache)
    tag = f"r{run}-b11-{fmt}"
    try:
        # 1. first listing, cold: the mount builds the index; timed with the find
        rec = new_record("B11", f"{fmt} list-cold", tool, run)
        recs.append(rec)
        out = ctx.work / "b11-find.txt"
        util.drop_caches()
        w = Window(ctx)
        t0 = time.monotonic()
        try:
            h = at.mount(ctx, tag, timeout=ctx.timeout, cache=cache)
        except MountError as e:
            w.close(rec)
            _finish(rec, data, fmt)
            rec["error"] = util.redact(str(e), ctx.server.secrets)[-1500:]
            recs += _unavailable(tool, run, fmt, STEPS[1:], f"unavailable: the first mount failed: "
                                                             f"{rec['error'][:600]}")
            return
        try:
            w.handle = h
            rec["mount_s"] = round(h.mount_s, 3)
            r = _find(ctx, h, out)
            rec["wall_s"] = round(time.monotonic() - t0, 3)
            w.close(rec)
            rec["client_cpu_s"] = round(r.cpu_s, 3)
        finally:
            ok_u, _, err_u = h.unmount(ctx, timeout=300)
        _finish(rec, data, fmt)
        rec["payload_bytes"] = data.size(fmt)
        if r.returncode != 0 or r.timed_out:
            rec["error"] = "timed out" if r.timed_out else f"find exit {r.returncode}: {r.stderr.strip()[-500:]}"
            recs += _unavailable(tool, run, fmt, STEPS[1:], f"not run: {rec['error'][:600]}")
            return
        rec["verified"], rec["notes"] = verify_listing(out, data)
        rec["index_bytes"] = _index_bytes(cache)
        rec["notes"] += f"; index kept: {util.fmt_bytes(rec['index_bytes'])}"
        if not ok_u:
            rec["notes"] += f"; unmount: {err_u}"

        # 2. find with the index kept: a remount on the same cache dir
        rec = new_record("B11", f"{fmt} list-cached", tool, run)
        recs.append(rec)
        util.drop_caches()
        w = Window(ctx)
        h = at.mount(ctx, tag, timeout=ctx.timeout, cache=cache)
        try:
            w.handle = h
            rec["mount_s"] = round(h.mount_s, 3)
            r = _find(ctx, h, out)
            w.close(rec)
            rec["wall_s"], rec["client_cpu_s"] = round(r.wall_s, 3), round(r.cpu_s, 3)
        finally:
            h.unmount(ctx, timeout=300)
        _finish(rec, data, fmt)
        if r.returncode != 0 or r.timed_out:
            rec["error"] = "timed out" if r.timed_out else f"find exit {r.returncode}: {r.stderr.strip()[-500:]}"
        else:
            rec["verified"], rec["notes"] = verify_listing(out, data)

        # 3. 100 random members, cold data, index present
        rec = new_record("B11", f"{fmt} members-100", tool, run)
        recs.append(rec)
        _drop_data(ctx, at, cache)
        w = Window(ctx)
        h = at.mount(ctx, tag, timeout=ctx.timeout, cache=cache)
        try:
            w.handle = h
            rec["mount_s"] = round(h.mount_s, 3)
            res = io_op(ctx, "readfiles", str(h.path), str(data.picks_path), str(MiB), handle=h)
            w.close(rec)
        finally:
            h.unmount(ctx, timeout=300)
        _finish(rec, data, fmt)
        rec["member_bytes"] = rec["payload_bytes"] = data.picks_bytes
        rec["members"] = len(data.picks)
        if "error" in res:
            rec["error"] = f"read: {res['error']}"
        else:
            rec["wall_s"], rec["client_cpu_s"] = round(res["elapsed"], 3), round(res["cpu"], 3)
            bad = [n for n, hx in zip(data.picks, res["hashes"]) if data.files[n][1] != hx]
            rec["verified"] = not bad and len(res["hashes"]) == len(data.picks)
            rec["notes"] = (f"sha256 of all {len(data.picks)} members read" if rec["verified"] else
                            f"{len(bad)} of {len(data.picks)} members differ (sha256), e.g. {bad[:1]}")

        # 4. cp -r of every member, cold data, index present
        rec = new_record("B11", f"{fmt} cp-r", tool, run)
        recs.append(rec)
        dest = fresh_scratch(ctx) / "tree"
        _drop_data(ctx, at, cache)
        w = Window(ctx)
        h = at.mount(ctx, tag, timeout=ctx.timeout, cache=cache)
        try:
            w.handle = h
            rec["mount_s"] = round(h.mount_s, 3)
            r = util.run(["cp", "-r", str(h.path), str(dest)], timeout=ctx.timeout, on_timeout=h.abort)
            w.close(rec)
            rec["wall_s"], rec["client_cpu_s"] = round(r.wall_s, 3), round(r.cpu_s, 3)
        finally:
            h.unmount(ctx, timeout=300)
        _finish(rec, data, fmt)
        rec["member_bytes"] = rec["payload_bytes"] = data.member_bytes
        if r.returncode != 0 or r.timed_out:
            rec["error"] = "timed out" if r.timed_out else f"cp -r exit {r.returncode}: {r.stderr.strip()[-500:]}"
        else:
            rec["verified"], rec["notes"] = verify_tree(dest, data)
        util.rm_rf(dest)
    finally:
        util.rm_rf(cache)


def _index_bytes(cache: Path) -> int:
    """What the tool kept of the index in its cache dir (flowfs: archives/; ratarmount: its sqlite)."""
    total = 0
    for dirpath, _, names in os.walk(cache):
        if "objects" in Path(dirpath).relative_to(cache).parts or "staging" in Path(dirpath).parts:
            continue
        for n in names:
            if n.endswith((".idx", ".gzi", ".sqlite")):
                total += os.path.getsize(os.path.join(dirpath, n))
    return total


def _drop_data(ctx, tool: MountTool, cache: Path) -> None:
    """Cold data, index kept: flowfs's cached objects removed (`flowfs cache clear`, the index
    stays in archives/); ratarmount keeps no data between mounts. Then the page cache."""
    if isinstance(tool, FlowFS):
        tool.clear_cache(ctx, cache)
    util.drop_caches()


def _peers(ctx, tool: FlowFS, run: int, fmt: str, data: ArchiveData) -> list[dict]:
    """The archive through a normal mount of the bucket (fresh cache each): read sequentially
    (step 1's yardstick), and streamed into tar -x (step 4's)."""
    from .workloads import cold_mount, fresh_scratch, new_record

    recs = []
    key = FORMATS[fmt]
    # seq-read: cat NAME > /dev/null
    rec = new_record("B11", f"{fmt} seq-read", tool, run)
    recs.append(rec)
    try:
        with cold_mount(ctx, tool, f"r{run}-b11-{fmt}-seq", rec) as (h, w):
            r = util.run(["cat", str(h.path / key)], timeout=ctx.timeout, stdout_path="/dev/null", on_timeout=h.abort)
            w.close(rec)
            rec["wall_s"], rec["client_cpu_s"] = round(r.wall_s, 3), round(r.cpu_s, 3)
            if r.returncode != 0 or r.timed_out:
                rec["error"] = "timed out" if r.timed_out else f"cat exit {r.returncode}: {r.stderr.strip()[-500:]}"
            else:
                # the bytes the mount serves (from its cache now), against the archive's sha256
                got = sha256_file(h.path / key)
                rec["verified"] = got == data.info[fmt]["sha256"]
                rec["notes"] = ("sha256 of the whole archive (read again through the mount)" if rec["verified"]
                                else "the archive read through the mount differs (sha256)")
            cache = h.cache_dir
        util.rm_rf(cache)
    except Exception as e:  # noqa: BLE001
        rec["error"] = util.redact(f"{type(e).__name__}: {e}", ctx.server.secrets)[-1500:]
    _finish(rec, data, fmt)
    rec["payload_bytes"] = data.size(fmt)

    # cat-tar-x: cat NAME | tar -x (-z for the tar.gz), as B2
    rec = new_record("B11", f"{fmt} cat-tar-x", tool, run)
    recs.append(rec)
    dest = fresh_scratch(ctx) / "tree"
    dest.mkdir()
    tar = ["tar", "-x", "-C", str(dest)] + (["-z"] if fmt == "tar.gz" else [])
    try:
        with cold_mount(ctx, tool, f"r{run}-b11-{fmt}-tarx", rec) as (h, w):
            p = util.run_pipe(["cat", str(h.path / key)], tar, timeout=ctx.timeout)
            w.close(rec)
            rec["wall_s"] = round(p.wall_s, 3)
            rec["client_cpu_s"] = round(p.first.cpu_s + p.second.cpu_s, 3)
            if not p.ok:
                rec["error"] = ("timed out" if p.first.timed_out else
                                f"cat|tar failed: {(p.first.stderr + p.second.stderr).strip()[-500:]}")
            cache = h.cache_dir
        util.rm_rf(cache)
        if not rec["error"]:
            rec["verified"], rec["notes"] = verify_tree(dest, data)
    except Exception as e:  # noqa: BLE001
        rec["error"] = util.redact(f"{type(e).__name__}: {e}", ctx.server.secrets)[-1500:]
    util.rm_rf(dest)
    _finish(rec, data, fmt)
    rec["member_bytes"] = rec["payload_bytes"] = data.member_bytes
    return recs
