"""The read path through a real FUSE mount. Data is always uploaded with boto3 straight
to the server, never through flowfs."""

from __future__ import annotations

import errno
import os
import random
import stat
import subprocess

import pytest

import s3proxy as P
from conftest import WIDE_COUNT
from flowfs_mount import errno_of
from helpers import MiB, forget_pages, payload, put_many, sha256, sha256_file, upload_large

# ------------------------------------------------------------------ listings


def test_wide_directory_listdir_and_sizes(mount, wide_dir):
    m = mount(wide_dir.bucket)
    names = os.listdir(m / "wide")
    assert len(names) == len(set(names)), "duplicate names in a listing"
    assert len(names) == WIDE_COUNT
    assert set(names) == set(wide_dir.sizes)
    wrong = {n: (os.stat(m / "wide" / n).st_size, sz) for n, sz in wide_dir.sizes.items()
             if os.stat(m / "wide" / n).st_size != sz}
    assert not wrong, f"{len(wrong)} sizes differ, e.g. {list(wrong.items())[:5]}"
    assert os.listdir(m.path) == ["wide"]


def test_wide_directory_ls_l_issues_no_per_file_head(mount, wide_dir, proxy, s3):
    m = mount(wide_dir.bucket, proxy=proxy)
    proxy.reset()
    r = subprocess.run(["ls", "-l", "--time-style=+%s", str(m / "wide")], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if not ln.startswith("total")]
    assert len(lines) == WIDE_COUNT
    sizes = {ln.split()[-1]: int(ln.split()[4]) for ln in lines}
    assert sizes == wide_dir.sizes
    heads = proxy.count(P.HEAD)
    lists = proxy.count(P.LIST)
    print(f"ls -l of {WIDE_COUNT} entries: {proxy.stats.snapshot()}")
    assert heads <= 2, f"ls -l issued {heads} HEADs (per-file HEAD?)\n{proxy.stats.summary()}"
    # A page is 1,000 keys on S3, 5,000 on Azure (test_azure.py's client says so).
    pages = -(-WIDE_COUNT // getattr(s3, "LIST_PAGE", 1000))
    assert pages <= lists <= pages + 3, (f"expected about {pages} LIST pages for {WIDE_COUNT} entries, "
                                         f"got {lists}\n{proxy.stats.summary()}")
    assert proxy.count(P.GET, P.GET_RANGE) == 0, "listing must not read object bodies"


# ------------------------------------------------------------------ names and shapes

ODD = {
    "with space.txt": b"space\n",
    "\u00fcn\u00efc\u00f8d\u00e9-\u540d\u524d-\U0001F600.txt": b"unicode\n",
    "plus+eq=amp&.txt": b"plus eq amp\n",
    "percent%20lit.txt": b"percent literal\n",
    ".hidden": b"dot file\n",
    "empty": b"",
    "nested/deep/er/file.txt": b"nested\n",
    "marked/": b"",  # marker-only empty directory
    "withmarker/": b"",  # a marker and a child: listed once
    "withmarker/child.bin": b"child of marked dir\n",
    "a": b"i am an object shadowed by a directory\n",
    "a/child.txt": b"directory wins\n",
}


@pytest.fixture
def odd_bucket(s3, bucket):
    put_many(s3, bucket, {f"odd/{k}": v for k, v in ODD.items()})
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="odd/")["Contents"]}
    assert listed == {f"odd/{k}" for k in ODD}, "server did not keep the keys as uploaded"
    return bucket


def test_odd_names_listing(mount, odd_bucket):
    m = mount(odd_bucket)
    names = os.listdir(m / "odd")
    assert len(names) == len(set(names)), f"duplicates: {sorted(names)}"
    assert set(names) == {"with space.txt", "\u00fcn\u00efc\u00f8d\u00e9-\u540d\u524d-\U0001F600.txt",
                          "plus+eq=amp&.txt", "percent%20lit.txt", ".hidden", "empty", "nested", "marked",
                          "withmarker", "a"}


@pytest.mark.parametrize("name", [k for k, v in ODD.items() if not k.endswith("/") and k != "a"])
def test_odd_names_content(mount, odd_bucket, name):
    m = mount(odd_bucket)
    p = m / "odd" / name
    st = os.stat(p)
    assert stat.S_ISREG(st.st_mode)
    assert st.st_size == len(ODD[name])
    with open(p, "rb") as f:
        assert f.read() == ODD[name]


def test_directory_shapes(mount, odd_bucket):
    m = mount(odd_bucket)
    odd = m / "odd"
    # marker-only directory: exists, is a directory, is empty
    assert stat.S_ISDIR(os.stat(odd / "marked").st_mode)
    assert os.listdir(odd / "marked") == []
    # marker plus child: one directory with the child, no "" entry from the marker itself
    assert stat.S_ISDIR(os.stat(odd / "withmarker").st_mode)
    assert os.listdir(odd / "withmarker") == ["child.bin"]
    # object "a" and prefix "a/": the directory wins
    assert stat.S_ISDIR(os.stat(odd / "a").st_mode)
    assert os.listdir(odd / "a") == ["child.txt"]
    assert (odd / "a" / "child.txt").read_bytes() == ODD["a/child.txt"]
    assert errno_of(open, odd / "a", "rb") == errno.EISDIR
    # implicit directories from common prefixes only
    assert stat.S_ISDIR(os.stat(odd / "nested" / "deep").st_mode)
    assert os.listdir(odd / "nested" / "deep" / "er") == ["file.txt"]
    # a walk finds exactly the files
    files = sorted(os.path.relpath(os.path.join(d, f), odd) for d, _, fs in os.walk(odd) for f in fs)
    expected = sorted(k for k in ODD if not k.endswith("/") and k != "a")
    assert files == expected


def test_missing_paths_are_enoent(mount, odd_bucket):
    m = mount(odd_bucket)
    assert errno_of(os.stat, m / "nope") == errno.ENOENT
    assert errno_of(os.stat, m / "odd" / "nope.txt") == errno.ENOENT
    assert errno_of(os.stat, m / "odd" / "nested" / "nope" / "deeper") == errno.ENOENT
    assert errno_of(open, m / "odd" / "missing.bin", "rb") == errno.ENOENT
    assert errno_of(os.listdir, m / "no-such-dir") == errno.ENOENT
    # a prefix of a real name is not a name
    assert errno_of(os.stat, m / "odd" / "with") == errno.ENOENT
    # a file is not a directory
    assert errno_of(os.listdir, m / "odd" / "empty") == errno.ENOTDIR
    assert errno_of(os.stat, m / "odd" / "empty" / "x") == errno.ENOTDIR


# ------------------------------------------------------------------ sizes and contents

BOUNDARY_SIZES = [0, 1, 8 * MiB - 1, 8 * MiB, 8 * MiB + 1, 16 * MiB + 3]


@pytest.fixture
def boundary_bucket(s3, bucket):
    objs = {}
    for sz in BOUNDARY_SIZES:
        data = payload(sz, f"boundary-{sz}")
        objs[f"sizes/{sz}.bin"] = data
        s3.put_object(Bucket=bucket, Key=f"sizes/{sz}.bin", Body=data)
    # the largest once more as a multipart object (parts of 5 MiB, an odd layout)
    upload_large(s3, bucket, "sizes/multipart.bin", objs[f"sizes/{16 * MiB + 3}.bin"], part_size=5 * MiB)
    objs["sizes/multipart.bin"] = objs[f"sizes/{16 * MiB + 3}.bin"]
    return bucket, objs


def test_part_boundary_sizes_sha256(mount, boundary_bucket):
    bucket, objs = boundary_bucket
    m = mount(bucket)
    for key, data in objs.items():
        p = m / key
        assert os.stat(p).st_size == len(data), key
        assert sha256_file(p) == sha256(data), key


def test_reads_across_block_boundaries(mount, boundary_bucket):
    bucket, objs = boundary_bucket
    m = mount(bucket)
    data = objs[f"sizes/{16 * MiB + 3}.bin"]
    fd = os.open(m / f"sizes/{16 * MiB + 3}.bin", os.O_RDONLY)
    try:
        for off, n in [(8 * MiB - 10, 20), (MiB - 1, 2), (16 * MiB - 5, 100), (0, 1), (len(data) - 1, 10),
                       (len(data), 10), (len(data) + 4096, 10), (4 * MiB + 123, 3 * MiB)]:
            assert os.pread(fd, n, off) == data[off:off + n], (off, n)
        # odd-sized sequential reads
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while True:
            b = os.read(fd, 1 * MiB + 7)
            if not b:
                break
            chunks.append(b)
        assert sha256(b"".join(chunks)) == sha256(data)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ a large object and the cache


def test_big_object_sequential_sha256(mount, big_object):
    m = mount(big_object.bucket)
    p = m / big_object.key
    assert os.stat(p).st_size == len(big_object.data)
    assert sha256_file(p) == big_object.sha256


def test_big_object_random_preads_are_lazy(mount, big_object, proxy, work_dir):
    cache = work_dir / "fresh-cache"
    cache.mkdir()
    m = mount(big_object.bucket, proxy=proxy, cache_dir=cache)
    proxy.reset()
    rng = random.Random(4096)
    size = len(big_object.data)
    fd = os.open(m / big_object.key, os.O_RDONLY)
    try:
        for _ in range(64):
            off = rng.randrange(0, size - 4096)
            assert os.pread(fd, 4096, off) == big_object.data[off:off + 4096], off
    finally:
        os.close(fd)
    got = proxy.get_bytes
    print(f"64 random 4 KiB preads: {proxy.stats.snapshot()}")
    assert got < 16 * MiB, f"64 random 4 KiB reads fetched {got / MiB:.1f} MiB\n{proxy.stats.summary()}"
    assert proxy.count(P.GET, P.GET_RANGE) >= 1


def test_big_object_second_read_comes_from_cache(mount, big_object, proxy, work_dir):
    """Under `--cache-admit reuse` (the default) a version read once is not written to the
    cache, its second open fetches it again and keeps it, every later read (this mount or a
    new one on the cache dir) comes from the disk. The page cache is dropped before each
    reread, so what is counted is flowfs's own, not what the kernel happened to keep."""
    cache = work_dir / "shared-cache"
    cache.mkdir()
    size = len(big_object.data)
    first = mount(big_object.bucket, proxy=proxy, cache_dir=cache, extra=["--cache-size", "2G"])
    assert sha256_file(first / big_object.key) == big_object.sha256
    fetched = proxy.get_bytes
    assert fetched >= size, f"first read fetched only {fetched} bytes?"

    forget_pages(first / big_object.key)
    proxy.reset()  # the second open on the node: fetched again, each byte once, and kept
    assert sha256_file(first / big_object.key) == big_object.sha256
    print(f"same-mount second open: {proxy.stats.snapshot()}")
    assert proxy.get_bytes <= size + MiB, f"second open fetched {proxy.get_bytes} bytes\n{proxy.stats.summary()}"

    forget_pages(first / big_object.key)
    proxy.reset()  # the third: read off the disk
    assert sha256_file(first / big_object.key) == big_object.sha256
    print(f"same-mount third open: {proxy.stats.snapshot()}")
    assert proxy.get_bytes < MiB, f"third open fetched {proxy.get_bytes} bytes\n{proxy.stats.summary()}"

    r = first.unmount()
    assert r.returncode == 0, r.stderr
    proxy.reset()
    second = mount(big_object.bucket, proxy=proxy, cache_dir=cache, extra=["--cache-size", "2G"])
    assert sha256_file(second / big_object.key) == big_object.sha256
    print(f"new mount, same cache dir: {proxy.stats.snapshot()}")
    assert proxy.get_bytes < MiB, f"new mount, same cache: fetched {proxy.get_bytes} bytes\n{proxy.stats.summary()}"


# ------------------------------------------------------------------ prefix mounts


@pytest.fixture
def prefix_bucket(s3, bucket):
    put_many(s3, bucket, {
        "proj/inside/a.txt": b"a\n",
        "proj/inside/sub/b.txt": b"bb\n",
        "proj/inside-not/c.txt": b"not me\n",
        "proj/insidefile": b"not me either\n",
        "proj/outside.txt": b"outside\n",
        "top.txt": b"top\n",
    })
    return bucket


@pytest.mark.parametrize("prefix", ["proj/inside", "proj/inside/"])
def test_prefix_mount_shows_only_prefix(mount, prefix_bucket, prefix):
    m = mount(prefix_bucket, prefix)
    assert sorted(os.listdir(m.path)) == ["a.txt", "sub"]
    assert (m / "a.txt").read_bytes() == b"a\n"
    assert (m / "sub" / "b.txt").read_bytes() == b"bb\n"
    assert errno_of(os.stat, m / "outside.txt") == errno.ENOENT
    assert errno_of(os.stat, m / "top.txt") == errno.ENOENT
    assert errno_of(os.stat, m / "c.txt") == errno.ENOENT
