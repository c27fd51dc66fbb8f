"""Issue 3, "How it will be checked": a seeded mix of writes that flowfs never saw, applied
both to a local directory and to a mount, must leave the mount identical to the local
directory (names, kinds, sizes, sha256, symlink targets) while mounted, after `flowfs
unmount` and a remount with a fresh cache dir, and as plain objects fetched with boto3.

FLOWFS_MIX_SEED=N replays another mix; the operations applied are printed on failure."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from helpers import MiB, payload, put_many
from write_helpers import check_objects, diff_snapshots, snapshot, wait_settled

SEED = int(os.environ.get("FLOWFS_MIX_SEED", "20250603"))
PREFIX = "runs/mix-1"  # the mount shows s3://BUCKET/runs/mix-1
BIG = 40 * MiB


# ------------------------------------------------------------------ operations on one root
# Each takes the root first; the same call with the same arguments goes to both trees.

def op_mkdir(root, rel):
    os.mkdir(root / rel)


def op_makedirs(root, rel):
    os.makedirs(root / rel, exist_ok=True)


def op_write(root, rel, data, chunk=64 * 1024):
    with open(root / rel, "wb") as f:
        for i in range(0, len(data), chunk):
            f.write(data[i:i + chunk])


def op_append(root, rel, data):
    with open(root / rel, "ab") as f:
        f.write(data)


def op_append_many(root, rel, pieces):
    """One open, many small writes (a logger that keeps its file open)."""
    fd = os.open(root / rel, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for p in pieces:
            os.write(fd, p)
    finally:
        os.close(fd)


def op_patch(root, rel, patches):
    """Overwrite in place at offsets (one open)."""
    fd = os.open(root / rel, os.O_RDWR)
    try:
        for off, data in patches:
            os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def op_truncate(root, rel, size):
    os.truncate(root / rel, size)


def op_ftruncate_then_write(root, rel, size, tail):
    with open(root / rel, "r+b") as f:
        f.truncate(size)
        f.seek(0, os.SEEK_END)
        f.write(tail)


def op_sparse(root, rel, pieces, final_size=None):
    """Writes by seeking past EOF; final_size extends with a hole at the end."""
    fd = os.open(root / rel, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        for off, data in pieces:
            os.lseek(fd, off, os.SEEK_SET)
            os.write(fd, data)
        if final_size is not None:
            os.ftruncate(fd, final_size)
    finally:
        os.close(fd)


def op_rename(root, a, b):
    os.rename(root / a, root / b)


def op_write_then_rename(root, rel, data, tmp):
    """The pipeline idiom: write a temp file, rename it over the final name. (Temp names are
    unique here: reusing one while its earlier upload runs is test_write.py::
    test_temp_name_reused_while_old_upload_runs.)"""
    op_write(root, tmp, data)
    os.rename(root / tmp, root / rel)


def op_fsync_write(root, rel, data):
    with open(root / rel, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def op_symlink(root, target, rel):
    os.symlink(target, root / rel)


def op_unlink(root, rel):
    os.unlink(root / rel)


def op_rmdir(root, rel):
    os.rmdir(root / rel)


def op_chmod(root, rel, mode):
    os.chmod(root / rel, mode)


def op_utime(root, rel, t):
    os.utime(root / rel, (t, t))


class Twin:
    """Applies every operation to the local tree, then to the mount, and records any
    operation whose outcome (success or errno) differs."""

    def __init__(self, local: Path, mnt: Path):
        self.local, self.mnt = local, mnt
        self.log: list[str] = []
        self.mismatches: list[str] = []

    def __call__(self, fn, *args, **kw):
        desc = f"{fn.__name__}({', '.join(_short(a) for a in args)})"
        self.log.append(desc)
        outcome = []
        for root in (self.local, self.mnt):
            try:
                fn(root, *args, **kw)
                outcome.append("ok")
            except OSError as e:
                outcome.append(f"{type(e).__name__}(errno {e.errno}: {e.strerror})")
        if outcome[0] != outcome[1]:
            self.mismatches.append(f"#{len(self.log)} {desc}: local {outcome[0]}, mount {outcome[1]}")
        return outcome[0] == "ok"


def _short(a) -> str:
    if isinstance(a, (bytes, bytearray)):
        return f"<{len(a)} bytes>"
    if isinstance(a, list):
        return f"[{len(a)} items]"
    return repr(a)


# ------------------------------------------------------------------ the mix


def _text(rng: random.Random, n: int) -> bytes:
    words = ["INFO", "WARN", "sample", "read", "aligned", "chr1", "chr7", "ok", "done", "step", "42", "0.5"]
    out = []
    size = 0
    while size < n:
        w = rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return (" ".join(out)[:n - 1] + "\n").encode() if n else b""


def _files(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                  if not os.path.islink(os.path.join(d, f)))


def _empty_dirs(root: Path) -> list[str]:
    out = []
    for d, ds, fs in os.walk(root):
        if d != str(root) and not ds and not fs:
            out.append(os.path.relpath(d, root))
    return sorted(out)


def _dirs(root: Path) -> list[str]:
    return [""] + sorted(os.path.relpath(os.path.join(d, x), root) for d, ds, _ in os.walk(root) for x in ds
                         if not os.path.islink(os.path.join(d, x)))


def run_mix(t: Twin, rng: random.Random, dir_rename: bool = True, scale: float = 1.0) -> None:
    """`scale` shrinks the repeated parts (small files, appends, the random tail) for runs
    that are slow per operation (under injected faults); 1.0 is the full mix."""
    local = t.local

    def scaled(k: int) -> int:
        return max(1, round(k * scale))

    # --- layout, and an empty directory that must survive everything
    for d in ["logs", "data/raw", "data/proc", "work/a/b/c", "work/a/empty_sub", "results", "links", "tmp"]:
        t(op_makedirs, d)
    t(op_mkdir, "empty_keep")

    # --- hundreds of small files
    small_dirs = ["data/raw", "data/proc", "work/a", "work/a/b", "work/a/b/c", "tmp", "results", ""]
    for i in range(scaled(240)):
        d = small_dirs[i % len(small_dirs)]
        size = rng.choice([0, 1, 17, 400, 4096, 8191, rng.randrange(0, 20000)])
        t(op_write, os.path.join(d, f"s{i:04d}.dat"), rng.randbytes(size))

    # --- logs written in many small appends, each reopening the file, round robin
    logs = [f"logs/task{i:02d}.log" for i in range(24)]
    for _round in range(scaled(15)):
        for lg in logs:
            t(op_append, lg, _text(rng, rng.randrange(10, 160)))
    # ... and loggers that keep their file open
    for i in range(4):
        t(op_append_many, f"logs/stream{i}.log", [_text(rng, rng.randrange(5, 120)) for _ in range(scaled(150))])

    # --- a 40 MiB file patched in place at random offsets (incl. across 8 MiB part edges)
    t(op_write, "data/big.bin", rng.randbytes(BIG), 1 * MiB)
    for _ in range(12):  # reopen for each patch
        off = rng.choice([rng.randrange(0, BIG), rng.randrange(1, 5) * 8 * MiB - rng.randrange(1, 5000)])
        t(op_patch, "data/big.bin", [(off, rng.randbytes(rng.randrange(1, 200 * 1024)))])
    t(op_patch, "data/big.bin", [(rng.randrange(0, BIG - 70000), rng.randbytes(rng.randrange(1, 65536)))
                                 for _ in range(30)])  # many patches in one open
    t(op_patch, "data/big.bin", [(BIG - 100, rng.randbytes(4096))])  # patch that extends the file

    # --- sparse files
    t(op_sparse, "data/sparse1.bin", [(5 * MiB, rng.randbytes(100)), (12 * MiB + 7, rng.randbytes(4096))])
    t(op_write, "data/sparse2.bin", rng.randbytes(1000))
    t(op_truncate, "data/sparse2.bin", 9 * MiB + 3)  # extend: a hole at the end
    t(op_sparse, "data/proc/s0001.dat", [(3 * MiB, b"after a hole\n")])  # seek past EOF of an existing file
    t(op_sparse, "data/sparse3.bin", [(100, b"x")], 20 * MiB)

    # --- truncates: shrink and extend, by path and by fd
    smalls = [f for f in _files(local) if os.path.basename(f).startswith("s0")]
    for rel in rng.sample(smalls, 16):
        size = os.path.getsize(local / rel)
        t(op_truncate, rel, size // 2 if rng.random() < 0.5 else size + rng.randrange(1, 100000))
    for rel in rng.sample(smalls, 6):
        size = os.path.getsize(local / rel)
        t(op_ftruncate_then_write, rel, rng.randrange(0, size + 1), _text(rng, 50))

    # --- write-then-rename replacing an existing file
    for i in range(8):
        t(op_write, f"results/out{i}.txt", _text(rng, 300))  # the previous result
    t(op_fsync_write, "results/durable.txt", _text(rng, 1000))  # a target known to be in the bucket
    for i in range(8):
        t(op_write_then_rename, f"results/out{i}.txt", _text(rng, rng.randrange(1, 3000)), f"results/out{i}.tmp")
    t(op_write_then_rename, "results/durable.txt", _text(rng, 2000), "results/durable.tmp")
    t(op_write_then_rename, "results/fresh.txt", _text(rng, 10), "results/fresh.tmp")  # no previous file

    # --- symlinks with relative targets (to a file, a directory, dangling, inside a dir that moves)
    t(op_symlink, "../data/big.bin", "links/big")
    t(op_symlink, "../work", "links/work_dir")
    t(op_symlink, "../nowhere/missing.txt", "links/dangling")
    t(op_symlink, "b/c", "work/a/to_c")
    t(op_symlink, "../../../data/raw/s0000.dat", "work/a/b/up_link")

    # --- rmdir of empty directories
    t(op_makedirs, "tmp/e1/e2")
    t(op_mkdir, "tmp/e3")
    t(op_rmdir, "tmp/e1/e2")
    t(op_rmdir, "tmp/e1")
    # fsync'ed first: unlink + rmdir while the upload is still in flight is
    # test_write.py::test_rmdir_right_after_unlinking_a_just_written_file
    t(op_fsync_write, "tmp/e3/short-lived", b"gone soon\n")
    t(op_unlink, "tmp/e3/short-lived")
    t(op_rmdir, "tmp/e3")

    # --- directory rename with contents (files just written and not yet uploaded among them)
    t(op_write, "work/a/b/just_written.txt", _text(rng, 500))
    if dir_rename:
        t(op_rename, "work/a", "work/renamed_a")
        t(op_rename, "work/renamed_a/b/c", "work/c_moved_up")
        t(op_write, "work/renamed_a/after_rename.txt", _text(rng, 123))
    else:
        t(op_write, "work/a/after_rename.txt", _text(rng, 123))

    # --- unlink (staged and uploaded files)
    files = [f for f in _files(local) if "s0" in f]
    for rel in rng.sample(files, 20):
        t(op_unlink, rel)

    # --- chmod / utimens are accepted
    t(op_chmod, "results/out0.txt", 0o600)
    t(op_utime, "results/out1.txt", 1_600_000_000)

    # --- a random tail of the same kinds of operations
    for n in range(scaled(220)):
        files = _files(local)
        kind = rng.choices(
            ["append", "patch", "trunc", "new", "wtr", "unlink", "mvfile", "mkdir", "rmdir", "symlink", "sparse"],
            weights=[20, 10, 8, 15, 8, 8, 8, 5, 4, 3, 3])[0]
        if kind == "append" and files:
            t(op_append, rng.choice(files), _text(rng, rng.randrange(1, 300)))
        elif kind == "patch" and files:
            rel = rng.choice(files)
            size = os.path.getsize(local / rel)
            if size > 0:
                t(op_patch, rel, [(rng.randrange(0, size), rng.randbytes(rng.randrange(1, 2000)))])
        elif kind == "trunc" and files:
            rel = rng.choice(files)
            size = os.path.getsize(local / rel)
            t(op_truncate, rel, rng.choice([0, size // 3, size + rng.randrange(1, 5000)]))
        elif kind == "new":
            d = rng.choice(_dirs(local))
            t(op_write, os.path.join(d, f"n{n:04d}.bin"), rng.randbytes(rng.randrange(0, 50000)))
        elif kind == "wtr" and files:
            rel = rng.choice(files)
            t(op_write_then_rename, rel, rng.randbytes(rng.randrange(0, 20000)), f"{rel}.{n}.tmp")
        elif kind == "unlink" and files:
            t(op_unlink, rng.choice(files))
        elif kind == "mvfile" and files:
            rel = rng.choice(files)
            d = rng.choice(_dirs(local))
            # sometimes onto an existing file (replace), sometimes a new name
            dest = rng.choice(files) if rng.random() < 0.3 else os.path.join(d, f"m{n:04d}.mv")
            if dest != rel:
                t(op_rename, rel, dest)
        elif kind == "mkdir":
            d = rng.choice(_dirs(local))
            t(op_mkdir, os.path.join(d, f"d{n:04d}"))
        elif kind == "rmdir":
            empties = [d for d in _empty_dirs(local) if d != "empty_keep"]
            if empties:
                t(op_rmdir, rng.choice(empties))
        elif kind == "symlink":
            d = rng.choice(_dirs(local))
            t(op_symlink, rng.choice(["x", "../y/z", "./s", "a b"]), os.path.join(d, f"l{n:04d}"))
        elif kind == "sparse":
            d = rng.choice(_dirs(local))
            t(op_sparse, os.path.join(d, f"sp{n:04d}.bin"), [(rng.randrange(0, 3 * MiB), rng.randbytes(100))])


def seed_trees(s3, bucket: str, local: Path, prefix: str = PREFIX) -> None:
    """Objects already in the bucket under `prefix`, put by another S3 client (directories
    without marker objects), and the same files in the local tree: the mix modifies some of
    them."""
    seeded = {f"data/raw/seeded{i}.dat": payload(size, f"seed-{i}")
              for i, size in enumerate([0, 10, 5000, 70000, 3 * MiB + 1])}
    seeded |= {"work/a/seeded/t.dat": b"seeded t\n", "work/a/seeded/deep/s.dat": payload(12345, "deep-s")}
    put_many(s3, bucket, {f"{prefix}/{k}": v for k, v in seeded.items()})
    for k, v in seeded.items():
        (local / k).parent.mkdir(parents=True, exist_ok=True)
        (local / k).write_bytes(v)



@pytest.mark.parametrize("dir_rename", [
    pytest.param(True, id="full"),
    pytest.param(False, id="no-dir-rename"),
])
def test_write_mix(mount, bucket, s3, work_dir, dir_rename):
    local = work_dir / "local"
    local.mkdir()
    seed_trees(s3, bucket, local)
    m = mount(bucket, PREFIX)
    t = Twin(local, m.path)
    rng = random.Random(SEED)
    t0 = time.monotonic()
    run_mix(t, rng, dir_rename)
    print(f"seed {SEED}: {len(t.log)} operations in {time.monotonic() - t0:.1f}s")
    ops = "\n".join(t.log[-40:])
    assert not t.mismatches, (f"seed {SEED}: operations whose outcome differs on the mount:\n"
                              + "\n".join(t.mismatches[:30]) + f"\nlast operations:\n{ops}")

    want = snapshot(local)
    kinds = [v[0] for v in want.values()]
    print(f"reference tree: {kinds.count('file')} files, {kinds.count('dir')} dirs, {kinds.count('link')} links")

    # (a) while mounted, once the uploads have landed. (Comparing while they still land meets
    # the listing race of test_write.py::test_listing_during_upload_*: files missing from a
    # listing, old sizes, ESTALE on read.)
    settled = wait_settled(s3, bucket, PREFIX + "/", want)
    time.sleep(1.2)  # past the metadata TTL: listings cached while uploads landed are gone
    got = snapshot(m.path)
    d = diff_snapshots(want, got)
    assert not d, (f"seed {SEED}: mount differs from the local directory while mounted "
                   f"(bucket settled: {settled}):\n" + "\n".join(d))

    # (b) unmount (everything durable), then a new mount with a fresh, empty cache dir
    r = m.unmount(timeout=300)
    assert r.returncode == 0, f"flowfs unmount failed ({r.returncode}): {r.stderr}"
    fresh = work_dir / "fresh-cache"
    fresh.mkdir()
    m2 = mount(bucket, PREFIX, cache_dir=fresh)
    got = snapshot(m2.path)
    d = diff_snapshots(want, got)
    assert not d, f"seed {SEED}: after unmount and remount with a fresh cache:\n" + "\n".join(d)

    # (c) as plain objects
    problems = check_objects(s3, bucket, PREFIX + "/", want)
    assert not problems, f"seed {SEED}: objects in s3://{bucket}/{PREFIX}/ differ:\n" + "\n".join(problems[:40])
