"""What flowfs fetches ahead of readers and walkers (issue 27), through a real mount and a
counting proxy: a `find` has the directories it reaches next listed ahead, a `cat` of a
directory's files in listing order has the next files fetched ahead, nothing is fetched
twice, and `flowfs status --json` says what was fetched ahead and how much of it was read."""

from __future__ import annotations

import json
import subprocess

import s3proxy as P
from flowfs_mount import flowfs_bin
from helpers import drop_kernel_caches, payload, put_many, sha256

DIRS, PER_DIR = 40, 5


def _status(m) -> dict:
    r = subprocess.run([flowfs_bin(), "status", str(m.path), "--json"], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL, env=m.env, check=False)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_find_has_the_next_directories_listed_ahead_and_lists_each_once(mount, s3, bucket, proxy):
    objects = {f"tree/d{d:02}/f{f}": b"x" * (d + f) for d in range(DIRS) for f in range(PER_DIR)}
    put_many(s3, bucket, objects)
    m = mount(bucket, proxy=proxy)
    proxy.reset()
    r = subprocess.run(["find", str(m / "tree"), "-type", "f", "-printf", "%P %s\n"], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL, check=True)
    seen = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
    assert {k: int(v) for k, v in seen.items()} == {k[len("tree/"):]: len(v) for k, v in objects.items()}
    # One LIST per directory (and the tree's own): a listing fetched ahead is the one used.
    assert proxy.count(P.LIST) <= DIRS + 2, proxy.stats.summary()
    assert proxy.count(P.GET, P.GET_RANGE) == 0
    ahead = _status(m)["read_ahead"]
    assert ahead["listings"] >= DIRS - 1, ahead
    assert ahead["listings_dropped"] == 0, ahead


def test_a_reader_in_listing_order_reads_what_was_fetched_ahead(mount, s3, bucket, proxy, work_dir):
    files = {f"flat/f{i:03}": payload(64 << 10, f"ahead{i}") for i in range(60)}
    put_many(s3, bucket, files)
    m = mount(bucket, proxy=proxy)
    proxy.reset()
    got = {}
    for name in sorted(p.name for p in (m / "flat").iterdir()):
        got[f"flat/{name}"] = sha256((m / "flat" / name).read_bytes())
    assert got == {k: sha256(v) for k, v in files.items()}
    # Every file fetched once, whether ahead of the reader or by it.
    assert proxy.count(P.GET, P.GET_RANGE) == len(files), proxy.stats.summary()
    assert proxy.stats.get_bytes == sum(len(v) for v in files.values())
    ahead = _status(m)["read_ahead"]
    assert ahead["files"] > len(files) // 2, ahead
    # Read in full: nothing fetched ahead was left unread.
    assert (ahead["files_read"], ahead["bytes_read"]) == (ahead["files"], ahead["bytes"]), ahead


def test_names_the_kernel_forgot_are_answered_by_the_listing_it_just_took(mount, s3, bucket, proxy):
    """`echo 3 > drop_caches` (or memory pressure) drops the kernel's dentries: it forgets
    the directory and its files, then looks each up again. The listing, a moment old,
    answers: no HEAD, no LIST (each name cost a HEAD and a one-key LIST before)."""
    files = {f"top/dir/f{i:02}": payload(1000 + i, f"forgot{i}") for i in range(20)}
    put_many(s3, bucket, files)
    m = mount(bucket, proxy=proxy, extra=["--metadata-ttl", "3600"])
    names = sorted(p.name for p in (m / "top" / "dir").iterdir())
    assert len(names) == len(files)
    subprocess.run(["sync"], check=True, timeout=60)
    drop_kernel_caches()
    proxy.reset()
    sizes = {f"top/dir/{n}": (m / "top" / "dir" / n).stat().st_size for n in names}
    assert sizes == {k: len(v) for k, v in files.items()}
    assert proxy.count(P.HEAD, P.LIST) == 0, proxy.stats.summary()
