"""Helpers of test_realworld.py (issue 26 item 2): the state of a tree as the everyday tools
see it (path, type, mode bits, mtime in whole seconds, sha256, symlink target), differences
named path by path, the bucket's keys against a tree (stray temp names), a test tree of
varied files, a tiny wheel for pip, and running a tool under a deadline."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import shutil
import stat
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from exerciser_helpers import ToolRun, run_tool, tail
from helpers import sha256_file
from write_helpers import list_keys

OLD = 1_000_000_000  # 2001-09-09: mtimes of the test tree start here


# ------------------------------------------------------------------ tree state


@dataclass(frozen=True)
class Entry:
    kind: str  # "file", "dir", "link", or "other"
    mode: int  # st_mode & 0o7777
    mtime: int | None  # whole seconds; None where not compared
    size: int = 0
    sha: str = ""
    target: str = ""


def tree_state(root: str | os.PathLike, *, mtimes: bool = True, skip=None) -> dict[str, Entry]:
    """relpath -> Entry for everything below root (symlinks not followed). Directories carry
    their mode but no mtime: SeaweedFS keeps no metadata on a directory marker, so after a
    remount a directory shows this mount's times (docs/SEMANTICS.md, *Attributes*). Symlinks
    carry their target and mtime (their mode is always 0777). `skip(rel)` leaves a path and
    everything below it out; `mtimes=False` leaves every mtime out."""
    root = os.fspath(root)
    out: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        keep = []
        for n in sorted(dirnames) + sorted(filenames):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            if skip is not None and skip(rel):
                continue
            st = os.lstat(p)
            mt = int(st.st_mtime) if mtimes else None
            if stat.S_ISLNK(st.st_mode):
                out[rel] = Entry("link", 0, mt, target=os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = Entry("dir", stat.S_IMODE(st.st_mode), None)
                keep.append(n)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = Entry("file", stat.S_IMODE(st.st_mode), mt, st.st_size, sha256_file(p))
            else:
                out[rel] = Entry("other", st.st_mode, mt)
        dirnames[:] = [d for d in dirnames if d in keep]
    return out


def without_mtimes(state: dict[str, Entry]) -> dict[str, Entry]:
    return {k: Entry(e.kind, e.mode, None, e.size, e.sha, e.target) for k, e in state.items()}


def without_dir_modes(state: dict[str, Entry]) -> dict[str, Entry]:
    """For trees whose directories a tool made with other modes than 0755 (stress-ng and
    dbench make theirs 0700): SeaweedFS keeps no directory mode, so after a remount every
    directory shows --dir-mode (docs/SEMANTICS.md, *Attributes*)."""
    return {k: (Entry("dir", 0, None) if e.kind == "dir" else e) for k, e in state.items()}


def under(state: dict[str, Entry], top: str, mode: int = 0o755) -> dict[str, Entry]:
    """`state` moved below the directory `top` (which is added, with `mode`)."""
    out = {top: Entry("dir", mode, None)}
    out.update({f"{top}/{k}": e for k, e in state.items()})
    return out


def _describe(e: Entry) -> str:
    if e.kind == "file":
        return f"file mode {oct(e.mode)} mtime {e.mtime} size {e.size} sha256 {e.sha[:12]}"
    if e.kind == "link":
        return f"symlink -> {e.target!r} mtime {e.mtime}"
    if e.kind == "dir":
        return f"dir mode {oct(e.mode)}"
    return f"{e.kind} st_mode {oct(e.mode)}"


def diff_states(want: dict[str, Entry], got: dict[str, Entry], limit: int = 30) -> list[str]:
    """One line per difference, naming the path, the field, what was expected and what was
    found; empty when equal."""
    out: list[str] = []
    for k in sorted(set(want) - set(got)):
        out.append(f"{k!r}: missing (want {_describe(want[k])})")
    for k in sorted(set(got) - set(want)):
        out.append(f"{k!r}: unexpected {_describe(got[k])}")
    for k in sorted(set(want) & set(got)):
        w, g = want[k], got[k]
        if w == g:
            continue
        if w.kind != g.kind:
            out.append(f"{k!r}: type want {w.kind} got {g.kind}")
            continue
        parts = []
        if w.mode != g.mode:
            parts.append(f"mode want {oct(w.mode)} got {oct(g.mode)}")
        if w.mtime != g.mtime:
            parts.append(f"mtime want {w.mtime} got {g.mtime}")
        if w.size != g.size:
            parts.append(f"size want {w.size} got {g.size}")
        elif w.sha != g.sha:
            parts.append(f"bytes differ (sha256 want {w.sha[:12]} got {g.sha[:12]})")
        if w.target != g.target:
            parts.append(f"target want {w.target!r} got {g.target!r}")
        out.append(f"{k!r}: " + "; ".join(parts))
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


def bucket_problems(s3, bucket: str, prefix: str, state: dict[str, Entry]) -> list[str]:
    """The keys under `prefix/` (boto3, straight to the server) against `state`, the tree the
    mount at `prefix` must hold: a key that is no file, symlink or directory (marker) of it
    is a stray (a tool's temporary name left behind, say), and a file or symlink without its
    key is missing. A marker of the prefix itself is allowed."""
    keys = list_keys(s3, bucket, prefix + "/")
    objects = {f"{prefix}/{rel}" for rel, e in state.items() if e.kind in ("file", "link", "other")}
    markers = {f"{prefix}/{rel}/" for rel, e in state.items() if e.kind == "dir"} | {prefix + "/"}
    out = [f"stray key {k!r} ({n} bytes): no file, directory or symlink of the tree has this name"
           for k, n in sorted(keys.items()) if k not in objects and k not in markers]
    out += [f"missing key {k!r}: the tree has it" for k in sorted(objects - set(keys))]
    # A listing with delimiter also shows folders the flat listing does not (SeaweedFS keeps
    # an emptied folder of its filer, and a mount shows it as a directory).
    todo = [prefix + "/"]
    while todo:
        cur = todo.pop()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=cur, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                p = cp["Prefix"]
                if p in markers:
                    todo.append(p)
                else:
                    out.append(f"stray prefix {p!r} (a listing with delimiter shows it; the mount shows it as "
                               f"a directory): no directory of the tree has this name")
    return out


# ------------------------------------------------------------------ mounts


def pt_args(mode: str) -> list[str]:
    return ["--passthrough", mode]


def unmount_ok(m, what: str, timeout: float = 180.0) -> None:
    r = m.unmount(timeout=timeout)
    assert r.returncode == 0, f"{what}: flowfs unmount exit {r.returncode}: {r.stderr.strip()[-2000:]}"


def remount(mount, m, bucket: str, prefix: str, mode: str, work_dir: Path, what: str):
    """`flowfs unmount` (must exit 0), then a new mount of the same prefix with an empty new
    cache directory, so that every byte and attribute comes from the bucket."""
    unmount_ok(m, what)
    n = 0
    while (work_dir / f"empty-cache-{n}").exists():
        n += 1
    cache = work_dir / f"empty-cache-{n}"
    cache.mkdir()
    return mount(bucket, prefix, cache_dir=cache, extra=pt_args(mode))


# ------------------------------------------------------------------ tools


def need(*tools: str) -> None:
    miss = [t for t in tools if shutil.which(t) is None]
    if miss:
        pytest.skip(f"{', '.join(miss)} not installed (scripts/setup.sh installs it: `make setup`)")


def run(args: list[str], out_dir: Path, name: str, timeout: float = 300.0, cwd=None, env=None) -> ToolRun:
    """Runs a tool in its own process group under a deadline (always stopped); its output
    goes to OUT_DIR/NAME.stdout and .stderr."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return run_tool([str(a) for a in args], out_dir / name, timeout, cwd=cwd, env=env)


def must(args: list[str], out_dir: Path, name: str, timeout: float = 300.0, cwd=None, env=None,
         quiet: bool = False) -> str:
    """run() that must exit 0 (and, with quiet=True, print nothing); returns its stdout."""
    r = run(args, out_dir, name, timeout, cwd=cwd, env=env)
    cmd = " ".join(str(a) for a in args)
    if r.timed_out:
        pytest.fail(f"HANG: {name}: `{cmd}` not done in {timeout:.0f} s\nstdout:\n{tail(r.stdout(), 20)}\n"
                    f"stderr:\n{tail(r.stderr(), 20)}", pytrace=False)
    assert r.returncode == 0, (f"{name}: `{cmd}` exit {r.returncode}\nstdout:\n{tail(r.stdout(), 30)}\n"
                               f"stderr:\n{tail(r.stderr(), 30)}")
    if quiet:
        out = (r.stdout() + r.stderr()).strip()
        assert not out, f"{name}: `{cmd}` reported differences:\n{tail(out, 40)}"
    return r.stdout()


def py(script: str, out_dir: Path, name: str, *args, timeout: float = 300.0, env=None) -> str:
    """A Python script in a process of its own (a FUSE call that hangs cannot hang pytest)."""
    return must([sys.executable, "-c", script, *args], out_dir, name, timeout, env=env)


# ------------------------------------------------------------------ the test tree

DIRS = ["a", "a/b", "a/b/c", "a/b/c/d", "with space", "with space/inner dir", "ünïcödé",
        "ünïcödé/日本語", "data", "data/x1", "data/x2", ".hidden"]
MODES = [0o644, 0o755, 0o600, 0o444, 0o640, 0o700, 0o664, 0o555]
NAMES = ["file{i:03d}.txt", "name with space {i}.dat", "café-{i}.txt", "データ{i}.bin", ".dot{i}",
         "x-+=&%,{i}", "UPPER_{i}.TSV", "tab\u00a0nbsp {i}"]


def make_tree(root: Path, files: int = 300, seed: int = 26) -> None:
    """A tree of `files` regular files (sizes 0 to 200 KiB, one of 9 MiB: a multipart
    upload) in nested directories, with modes 0644/0755/0600/0444/0640/0700/0664/0555, old
    mtimes, names with spaces, UTF-8 and punctuation, symlinks (relative, absolute, to a
    directory, dangling, with a space) and one hard link. Directories are 0755 (SeaweedFS
    keeps no directory mode: after a remount they show --dir-mode, 755)."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    for d in DIRS:
        (root / d).mkdir()
    all_dirs = [""] + DIRS
    made: list[str] = []
    for i in range(files):
        d = all_dirs[i % len(all_dirs)]
        rel = os.path.join(d, NAMES[(i // len(all_dirs)) % len(NAMES)].format(i=i))
        size = rng.choice([0, rng.randrange(1, 100), rng.randrange(100, 5000), rng.randrange(5000, 200_000)])
        if i == 7:
            size = 9 * 1024 * 1024 + 17
        p = root / rel
        p.write_bytes(rng.randbytes(size))
        os.chmod(p, MODES[i % len(MODES)])
        t = OLD + rng.randrange(10**8)
        os.utime(p, (t, t))
        made.append(rel)
    links = {
        "a/link-to-file": os.path.relpath(root / made[1], root / "a"),
        "a/b/link-up": "../../data",
        "with space/link with space": "inner dir",
        "dangling": "does/not/exist",
        "absolute": "/etc/hostname",
        "ünïcödé/リンク": "日本語",
    }
    for rel, target in links.items():
        os.symlink(target, root / rel)
        t = OLD + rng.randrange(10**8)
        os.utime(root / rel, (t, t), follow_symlinks=False)
    os.link(root / made[2], root / "data" / "hard link")
    for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
        t = OLD + rng.randrange(10**8)
        os.utime(dirpath, (t, t))


# ------------------------------------------------------------------ a tiny wheel for pip


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_tiny_wheel(out_dir: Path) -> Path:
    """flowfs_tiny-1.0-py3-none-any.whl, written here with zipfile (no build backend, no
    network): a package with a submodule and a data file, and a console script."""
    name, ver = "flowfs_tiny", "1.0"
    di = f"{name}-{ver}.dist-info"
    files = {
        f"{name}/__init__.py": "from .core import VALUE, checksum\n\ndef main():\n    print(VALUE, checksum())\n",
        f"{name}/core.py": ("import hashlib, pathlib\nVALUE = 'flowfs-tiny-ok'\n"
                            "def checksum():\n    p = pathlib.Path(__file__).with_name('table.tsv')\n"
                            "    return hashlib.sha256(p.read_bytes()).hexdigest()\n"),
        f"{name}/table.tsv": "".join(f"row{i}\t{i * i}\n" for i in range(2000)),
        f"{di}/METADATA": f"Metadata-Version: 2.1\nName: flowfs-tiny\nVersion: {ver}\n",
        f"{di}/WHEEL": "Wheel-Version: 1.0\nGenerator: flowfs-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{di}/entry_points.txt": "[console_scripts]\nflowfs-tiny = flowfs_tiny:main\n",
        f"{di}/top_level.txt": f"{name}\n",
    }
    record = "".join(f"{p},{_record_hash(c.encode())},{len(c.encode())}\n" for p, c in files.items())
    record += f"{di}/RECORD,,\n"
    whl = out_dir / f"{name}-{ver}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for p, c in [*files.items(), (f"{di}/RECORD", record)]:
            z.writestr(zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0)), c)
    return whl
