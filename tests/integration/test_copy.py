"""Copies within a mount (issue 49, docs/SEMANTICS.md "Copies within a mount"): `cp`, which
calls `copy_file_range`, of an object onto a new file of the same mount is one copy on the
server (CopyObject), with no byte of the file through the node; everything else (a passthrough
writer, a range, a source still being written) is copied by the kernel through reads and
writes, and is right too. Bytes through the node are counted by a proxy; objects are read with
boto3 straight from the server and through a second mount with an empty cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import pytest

import s3proxy as P
from copy_helpers import check_cp_copies_on_the_server, cp as _cp
from helpers import MiB, payload
from flowfs_mount import wait_killed
from write_helpers import delaying_proxy, list_keys, object_bytes, wait_object

PT = ["off", "auto"]


@pytest.mark.parametrize("size", [0, 64 * MiB, 300 * MiB], ids=["empty", "64MiB", "300MiB"])
def test_cp_within_a_mount_is_a_copy_on_the_server(mount, bucket, s3, proxy, size):
    """`cp` of an object to a new file: one CopyObject, at most 1 MiB of GET and PUT bodies
    through the node, the copy's bytes in the bucket, its own time (not the source's), and
    the same bytes through a remount with an empty cache."""
    check_cp_copies_on_the_server(mount, bucket, s3, proxy, size)
    assert proxy.count(P.COPY) == (0 if size == 0 else 1), proxy.stats.summary()
    assert list_keys(s3, bucket) == {"in/src.bam": size, "out/": 0, "out/dst.bam": size}


def test_cp_through_a_passthrough_writer_copies_the_bytes(mount, bucket, s3, seaweed):
    """A destination the kernel writes itself (passthrough) cannot be a copy on the server:
    the kernel would go on writing into the local file. The bytes are copied, and right."""
    data = payload(8 * MiB + 5, "pt-src")
    s3.put_object(Bucket=bucket, Key="src", Body=data)
    proxy = P.CountingProxy(seaweed.endpoint).start()
    try:
        m = mount(bucket, proxy=proxy, extra=["--passthrough", "auto"])
        r = _cp(m / "src", m / "dst")
        assert r.returncode == 0, r.stderr
        assert m.unmount().returncode == 0
        assert proxy.count(P.COPY) == 0, proxy.stats.summary()
    finally:
        proxy.stop()
    assert object_bytes(s3, bucket, "dst") == data


@pytest.mark.parametrize("pt", PT)
def test_a_write_into_the_copy_changes_the_copy_only(mount, bucket, s3, pt):
    data = payload(3 * MiB, "w-src")
    s3.put_object(Bucket=bucket, Key="src", Body=data)
    m = mount(bucket, extra=["--passthrough", pt])
    assert _cp(m / "src", m / "dst").returncode == 0
    with open(m / "dst", "r+b") as f:
        f.seek(MiB)
        f.write(b"patched")
    with open(m / "dst", "ab") as f:
        f.write(b"tail")
    want = data[:MiB] + b"patched" + data[MiB + 7:] + b"tail"
    assert (m / "dst").read_bytes() == want
    assert m.unmount().returncode == 0
    assert object_bytes(s3, bucket, "dst") == want
    assert object_bytes(s3, bucket, "src") == data


@pytest.mark.parametrize("pt", PT)
def test_a_copy_of_a_file_still_being_written_has_what_was_written(mount, bucket, s3, pt):
    """The source's bytes are staged on the node, not in the bucket: the kernel copies them."""
    m = mount(bucket, extra=["--passthrough", pt])
    first = payload(5 * MiB, "being-written")
    with open(m / "src", "wb") as w:
        w.write(first)
        w.flush()
        assert _cp(m / "src", m / "dst").returncode == 0
        w.write(b"more after the copy")
    assert (m / "dst").read_bytes() == first
    assert m.unmount().returncode == 0
    assert object_bytes(s3, bucket, "dst") == first
    assert object_bytes(s3, bucket, "src") == first + b"more after the copy"


@pytest.mark.parametrize("pt", PT)
def test_the_source_removed_and_the_copy_renamed_at_once(mount, bucket, s3, pt):
    """`cp a b && rm a && mv b c`: the copy never depends on the source after `cp` returns,
    and lands under its final name only."""
    data = payload(2 * MiB + 3, "rm-src")
    s3.put_object(Bucket=bucket, Key="a", Body=data)
    m = mount(bucket, extra=["--passthrough", pt])
    assert _cp(m / "a", m / "b").returncode == 0
    os.unlink(m / "a")
    os.rename(m / "b", m / "c")
    assert (m / "c").read_bytes() == data
    assert m.unmount().returncode == 0
    assert list_keys(s3, bucket) == {"c": len(data)}
    assert object_bytes(s3, bucket, "c") == data
    m2 = mount(bucket)
    assert sorted(os.listdir(m2)) == ["c"]
    assert (m2 / "c").read_bytes() == data


def test_ranges_and_reflinks_are_not_server_copies(mount, bucket, s3):
    """A range from an offset is copied by the kernel; `cp --reflink=always` fails cleanly
    (no clone in object storage) and leaves the source as it was."""
    data = payload(MiB, "range-src")
    s3.put_object(Bucket=bucket, Key="src", Body=data)
    m = mount(bucket, extra=["--passthrough", "off"])
    src = os.open(m / "src", os.O_RDONLY)
    dst = os.open(m / "part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = os.copy_file_range(src, dst, 4 * MiB, 1000)
    finally:
        os.close(dst)
        os.close(src)
    assert n == MiB - 1000
    assert (m / "part").read_bytes() == data[1000:]
    r = _cp("--reflink=always", m / "src", m / "clone")
    assert r.returncode != 0, r
    assert (m / "src").read_bytes() == data
    assert m.unmount().returncode == 0
    assert object_bytes(s3, bucket, "part") == data[1000:]
    assert object_bytes(s3, bucket, "src") == data


_COPY_IN_CALLS = """
import os, sys
src, dst, chunk, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = os.open(src, os.O_RDONLY)
d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
got = []
while calls:
    n = os.copy_file_range(s, d, chunk)
    got.append(n)
    calls -= 1
    if n == 0:
        break
print(got, flush=True)
os._exit(0)  # as a killed copy: the kernel closes the descriptors
"""


def _copy_in_calls(src, dst, chunk: int, calls: int = 1 << 30) -> list[int]:
    r = subprocess.run([sys.executable, "-c", _COPY_IN_CALLS, str(src), str(dst), str(chunk), str(calls)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout)  # noqa: S307 - a list of ints this test printed


def test_a_copy_asked_for_in_chunks_is_one_copy_on_the_server(mount, bucket, s3, proxy):
    """The JDK asks for 2 GiB at a time and the kernel passes at most 4 GiB − 4 KiB per call
    (lowered here with --copy-chunk): the first call copies the whole object on the server,
    the next ones are answered at once; a copy cut short (the process gone after one call)
    is what it was answered."""
    data = payload(5 * MiB + 3, "chunks")
    s3.put_object(Bucket=bucket, Key="src", Body=data)
    m = mount(bucket, proxy=proxy, extra=["--passthrough", "off", "--copy-chunk", "1M"])
    os.stat(m / "src")
    proxy.reset()
    assert _copy_in_calls(m / "src", m / "whole", MiB) == [MiB] * 5 + [3, 0]
    assert proxy.count(P.COPY) == 1 and proxy.count(P.PUT, P.UPLOAD_PART) == 0, proxy.stats.summary()
    assert _copy_in_calls(m / "src", m / "cut", MiB, calls=2) == [MiB, MiB]
    assert os.stat(m / "cut").st_size == 2 * MiB
    assert (m / "cut").read_bytes() == data[:2 * MiB]
    assert m.unmount().returncode == 0
    assert object_bytes(s3, bucket, "whole") == data
    assert object_bytes(s3, bucket, "cut") == data[:2 * MiB]


def test_kill_9_during_a_copy_leaves_it_whole_or_absent(mount, bucket, s3, seaweed):
    """The mount killed while its CopyObject is on its way (held 3 s in a proxy, then sent on
    to the server): after a remount with the same cache directory (its journal recovered) the
    destination is the whole copy, never the empty file `cp` had created (whose journal record
    a recovery would upload over it)."""
    data = payload(8 * MiB, "kill-copy")
    s3.put_object(Bucket=bucket, Key="src", Body=data)
    proxy = delaying_proxy(seaweed.endpoint).start()
    try:
        m = mount(bucket, proxy=proxy, extra=["--passthrough", "off"])
        os.stat(m / "src")
        proxy.delay(P.COPY, "dst", 3)
        cp = subprocess.Popen(["cp", str(m / "src"), str(m / "dst")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        assert proxy.wait_held(P.COPY, "dst", 30), "no copy request reached the proxy"
        pid = m.daemon_pid()
        os.kill(pid, signal.SIGKILL)
        wait_killed(m, pid, "kill -9 during a copy")
        assert cp.wait(timeout=60) != 0, "cp succeeded on a dead mount"
        assert wait_object(s3, bucket, "dst", timeout=30) is not None, "the held copy never landed"
        m2 = mount(bucket, cache_dir=m.cache_dir)  # recovery runs before this returns
        assert object_bytes(s3, bucket, "dst") == data, "the copy was replaced after the crash"
        assert (m2 / "dst").read_bytes() == data
    finally:
        proxy.stop()


@pytest.mark.parametrize("pt", PT)
def test_a_file_just_written_is_published_by_a_copy_on_the_server(mount, bucket, s3, proxy, pt):
    """A task's output, closed and still uploading, copied at once (Nextflow's publishDir,
    `cp out results/`): the copy waits for that upload and copies the object on the server;
    its bytes go up once, not twice, and none comes back down. A passthrough writer's
    staged file gets the bytes on local disk too (the kernel reads it), and its upload is
    that copy."""
    data = payload(64 * MiB, "published")
    m = mount(bucket, proxy=proxy, extra=["--passthrough", pt])
    os.mkdir(m / "work")
    os.mkdir(m / "results")
    proxy.reset()
    (m / "work/out.bam").write_bytes(data)
    r = _cp(m / "work/out.bam", m / "results/out.bam")
    assert r.returncode == 0, r.stderr
    assert m.unmount().returncode == 0
    s = proxy.stats.snapshot()
    assert s["put_bytes"] <= len(data) + MiB, proxy.stats.summary()
    assert s["get_bytes"] <= MiB, proxy.stats.summary()
    assert proxy.count(P.COPY) >= 1, proxy.stats.summary()
    assert object_bytes(s3, bucket, "results/out.bam") == data
    assert (mount(bucket) / "results/out.bam").read_bytes() == data
