"""Nothing acknowledged is lost (issue 3, durability contract): `kill -9` of flowfs in the
middle of a large upload, and `flowfs unmount` while the server is down. Staged files stay
in the journal under CACHE_DIR/staging/, and the next mount with the same cache dir uploads
them before it serves."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import MountFactory, create_bucket
from flowfs_mount import is_mounted, wait_killed
from helpers import MiB, payload, sha256
from seaweed import SeaweedServer
from write_helpers import list_keys, object_bytes, restart_same_ports


def _write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        for i in range(0, len(data), 4 * MiB):
            f.write(data[i:i + 4 * MiB])


def _head_size(s3, bucket, key) -> int | None:
    try:
        return s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
    except s3.exceptions.ClientError:
        return None


def _journal_records(cache_dir) -> list[str]:
    root = cache_dir / "staging"
    return sorted(str(p.relative_to(root)) for p in root.glob("*/*.rec")) if root.exists() else []


def test_kill_9_during_upload_then_remount_recovers(mount, bucket, s3):
    m = mount(bucket, "crash")
    cache = m.cache_dir
    big = payload(200 * MiB, "crash-200")
    small = {"out/a.txt": b"a small output\n", "out/sub/b.txt": payload(5000, "b")}
    os.makedirs(m / "out/sub")
    for rel, data in small.items():
        _write(m / rel, data)
    # the pipeline idiom just before the crash: write a temp name, rename it over the result
    with open(m / "out/result.txt", "wb") as f:  # an earlier result, durable
        f.write(b"old result\n")
        f.flush()
        os.fsync(f.fileno())
    _write(m / "out/result.txt.tmp", b"new result\n")
    os.rename(m / "out/result.txt.tmp", m / "out/result.txt")
    _write(m / "out/gone.txt", b"unlinked before the crash\n")
    os.unlink(m / "out/gone.txt")
    _write(m / "out/big.bin", big)  # close: the upload of 200 MiB starts
    # ... and one renamed while its own upload is (very likely) still running
    mid = payload(24 * MiB, "crash-mid")
    _write(m / "out/mid.bin.tmp", mid)
    os.rename(m / "out/mid.bin.tmp", m / "out/mid.bin")

    pid = m.daemon_pid()
    assert pid is not None, "no pid file"
    os.kill(pid, signal.SIGKILL)
    t_kill = time.monotonic()
    big_before = _head_size(s3, bucket, "crash/out/big.bin")
    wait_killed(m, pid, "kill -9 during the upload")
    print(f"killed; big.bin in the bucket at the kill: {big_before}; journal: {_journal_records(cache)}")
    assert big_before in (None, len(big)), f"a partial object of {big_before} bytes is visible"

    m2 = mount(bucket, "crash", cache_dir=cache)  # recovery runs before this returns
    print(f"remount with recovery took {time.monotonic() - t_kill:.1f}s after the kill")
    got = object_bytes(s3, bucket, "crash/out/big.bin")
    assert got is not None, "the 200 MiB file is not in the bucket once the new mount is ready"
    assert len(got) == len(big) and sha256(got) == sha256(big), f"recovered object is wrong ({len(got)} bytes)"
    del got
    for rel, data in small.items():
        assert object_bytes(s3, bucket, f"crash/{rel}") == data, rel
    assert object_bytes(s3, bucket, "crash/out/result.txt") == b"new result\n"
    got = object_bytes(s3, bucket, "crash/out/mid.bin")
    assert got is not None and sha256(got) == sha256(mid), "the file renamed just before the crash is lost"
    keys = list_keys(s3, bucket, "crash/")
    assert "crash/out/mid.bin.tmp" not in keys, f"the old name of a renamed file came back: {sorted(keys)}"
    assert "crash/out/gone.txt" not in keys, "an unlinked file came back"
    assert "crash/out/result.txt.tmp" not in keys, f"the renamed temp file came back: {sorted(keys)}"
    # the new mount serves it too
    assert os.stat(m2 / "out/big.bin").st_size == len(big)
    assert (m2 / "out/result.txt").read_bytes() == b"new result\n"
    assert sorted(os.listdir(m2 / "out")) == ["a.txt", "big.bin", "mid.bin", "result.txt", "sub"]

    r = m2.unmount()
    assert r.returncode == 0, r.stderr
    if big_before is None:  # it was not complete at the kill: this mount recovered it
        lines = [ln for ln in r.stderr.splitlines() if "recovered" in ln]
        assert any("crash/out/big.bin" in ln for ln in lines), f"no `recovered` line on stderr: {r.stderr!r}"
    assert _journal_records(cache) == [], "journal records left after a clean recovery"


def test_unmount_with_server_down_reports_and_loses_nothing(flowfs_binary, session_dir, work_dir, request):
    """A dedicated server (the session one must stay up): files are written, the server
    stops, `flowfs unmount` fails naming them; the server comes back on the same ports and
    data dir; the next mount with the same cache dir uploads them."""
    # a short path: weed's unix sockets live in it (108 bytes at most)
    server = SeaweedServer(Path(tempfile.mkdtemp(prefix="sw-", dir=session_dir))).start()
    factory = MountFactory(server, work_dir)
    request.node._flowfs_factory = factory  # flowfs logs in the report on failure
    try:
        s3 = server.client()
        bucket = create_bucket(s3, "server-down")
        # A short retry budget: each request to the stopped server gives up after 8 s instead
        # of 60 s (the default), which is what this test would otherwise wait for (66 s of CI
        # with 20 s).
        m = factory(bucket, "p", extra=["--retry-budget", "8"])
        cache = m.cache_dir
        os.makedirs(m / "out/deep")
        files = {
            "out/a.txt": b"written while the server was up, closed while it was down\n",
            "out/deep/b.bin": payload(20 * MiB + 11, "down-b"),  # multipart
            "top.txt": payload(3000, "down-top"),
        }
        with open(m / "out/durable.txt", "wb") as f:  # durable before the outage
            f.write(b"durable\n")
            f.flush()
            os.fsync(f.fileno())
        handles = {rel: open(m / rel, "wb") for rel in files}  # created while the server is up
        for rel, f in handles.items():
            f.write(files[rel][: len(files[rel]) // 2])
        server.stop()
        for rel, f in handles.items():
            f.write(files[rel][len(files[rel]) // 2:])
            f.close()  # close() does not wait for the network: it must not fail

        t0 = time.monotonic()
        r = m.unmount(timeout=240)
        took = time.monotonic() - t0
        print(f"unmount with the server down: exit {r.returncode} after {took:.0f}s\nstderr: {r.stderr}")
        assert r.returncode != 0, "unmount must fail when files could not be uploaded"
        for rel in files:
            assert f"p/{rel}" in r.stderr, f"unmount's error does not name p/{rel}: {r.stderr!r}"
        assert "p/out/durable.txt" not in r.stderr
        assert took < 150, f"unmount took {took:.0f}s (retries with backoff should give up within ~2 min)"
        assert not is_mounted(m.path), "unmount must still unmount"
        assert len(_journal_records(cache)) >= len(files), f"journal: {_journal_records(cache)}"

        restart_same_ports(server)
        keys = list_keys(s3, bucket)
        assert "p/out/durable.txt" in keys
        for rel in files:
            assert f"p/{rel}" not in keys, f"p/{rel} is in the bucket although the server was down"

        m2 = factory(bucket, "p", cache_dir=cache)  # recovery runs before this returns
        for rel, data in files.items():
            got = object_bytes(s3, bucket, f"p/{rel}")
            assert got is not None, f"p/{rel} not uploaded once the new mount is ready"
            assert sha256(got) == sha256(data), f"p/{rel}: wrong content ({len(got)} bytes)"
        assert (m2 / "out/deep/b.bin").stat().st_size == len(files["out/deep/b.bin"])
        r2 = m2.unmount()
        assert r2.returncode == 0, r2.stderr
        for rel in files:
            assert any("recovered" in ln and f"p/{rel}" in ln for ln in r2.stderr.splitlines()), \
                f"no `recovered` line for p/{rel}: {r2.stderr!r}"
        assert _journal_records(cache) == []
    finally:
        factory.close_all()
        server.stop()


def test_kill_9_after_cache_eviction_serves_right_bytes(mount, bucket, s3, proxy):
    """The disk cache survives a crash without vouching for evicted bytes: with a 4 MiB cache,
    reading B evicts most of A; after `kill -9` and a remount on the same cache dir, A and B
    read back exactly (what the cache no longer holds is fetched again, never served as
    zeros)."""
    a, b = payload(3 * MiB, "evict-a"), payload(3 * MiB + 17, "evict-b")
    s3.put_object(Bucket=bucket, Key="e/a.bin", Body=a)
    s3.put_object(Bucket=bucket, Key="e/b.bin", Body=b)
    m = mount(bucket, "e", extra=["--cache-size", "4M"])
    cache = m.cache_dir
    assert sha256((m / "a.bin").read_bytes()) == sha256(a)
    assert sha256((m / "b.bin").read_bytes()) == sha256(b)  # evicts most of a.bin
    pid = m.daemon_pid()
    assert pid is not None, "no pid file"
    os.kill(pid, signal.SIGKILL)
    wait_killed(m, pid, "kill -9 after eviction")

    m2 = mount(bucket, "e", cache_dir=cache, proxy=proxy, extra=["--cache-size", "4M"])
    proxy.stats.reset()
    assert sha256((m2 / "a.bin").read_bytes()) == sha256(a), "a.bin read wrong bytes from the cache after the crash"
    assert sha256((m2 / "b.bin").read_bytes()) == sha256(b), "b.bin read wrong bytes from the cache after the crash"
    # a.bin was (mostly) evicted: it must have been fetched again
    assert proxy.stats.get_bytes >= 2 * MiB, f"only {proxy.stats.get_bytes} bytes fetched after the crash"
    assert m2.unmount().returncode == 0


def _read_uncached(path) -> bytes:
    """The file's bytes as the mount serves them now, not the kernel's copy from before."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        out = bytearray()
        while chunk := os.read(fd, 4 * MiB):
            out += chunk
        return bytes(out)
    finally:
        os.close(fd)


def test_two_live_mounts_on_one_cache_dir_read_right_bytes(mount, bucket, s3):
    """Two mounts running at the same time on one cache dir (the default one, for tasks on
    a node) share it (issue 16): m2 reading a, then b into 4 MiB evicts most of the a.bin
    that m1 has cached, and m1 still reads the right bytes (it fetches them again, never
    the holes). One after the other, they share the cache too."""
    a, b = payload(3 * MiB, "two-a"), payload(3 * MiB + 17, "two-b")
    s3.put_object(Bucket=bucket, Key="two/a.bin", Body=a)
    s3.put_object(Bucket=bucket, Key="two/b.bin", Body=b)
    m1 = mount(bucket, "two", extra=["--cache-size", "4M"])
    cache = m1.cache_dir
    assert sha256((m1 / "a.bin").read_bytes()) == sha256(a)
    m2 = mount(bucket, "two", cache_dir=cache, extra=["--cache-size", "4M"])
    assert not (cache / "objects.private").exists(), "the second mount got a private cache"
    assert sha256(_read_uncached(m2 / "a.bin")) == sha256(a)
    assert sha256(_read_uncached(m2 / "b.bin")) == sha256(b)
    assert sha256(_read_uncached(m1 / "a.bin")) == sha256(a), "m1 read what m2's eviction punched"
    assert sha256(_read_uncached(m1 / "b.bin")) == sha256(b)
    assert sha256(_read_uncached(m1 / "a.bin")) == sha256(a)
    assert m2.unmount().returncode == 0
    assert m1.unmount().returncode == 0
    m3 = mount(bucket, "two", cache_dir=cache, extra=["--cache-size", "4M"])
    # A read returns once its bytes are in memory; their store and the eviction after it
    # follow. A mount evicts before it is ready: by then the directory is within its limit.
    cached = sum(p.stat().st_blocks * 512 for p in (cache / "objects").glob("*.cache"))
    assert cached <= 4 * MiB + 256 * 1024, f"{cached} bytes in a 4M cache shared by two mounts"
    assert sha256(_read_uncached(m3 / "b.bin")) == sha256(b)
    assert sha256(_read_uncached(m3 / "a.bin")) == sha256(a)
    assert m3.unmount().returncode == 0


@pytest.fixture
def tiny_cache_dir(work_dir):
    """A cache dir on a 24 MiB tmpfs: a local disk that fills up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    d = work_dir / "tiny-cache"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", str(d)], check=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def test_a_full_staging_disk_is_enospc_and_loses_nothing_written(tiny_cache_dir, mount, bucket, s3):
    """A task that fills the local disk gets ENOSPC from write() (not EIO), what it wrote
    before is uploaded intact, and the mount keeps working once space is freed. Reads do
    not need the full cache disk: they are served without caching."""
    s3.put_object(Bucket=bucket, Key="full/input.bin", Body=payload(6 * MiB, "full-in"))
    m = mount(bucket, "full", cache_dir=tiny_cache_dir)
    kept = payload(2 * MiB, "full-kept")
    with open(m / "kept.bin", "wb") as f:
        f.write(kept)
        f.flush()
        os.fsync(f.fileno())
    err = None
    with open(m / "huge.bin", "wb", buffering=0) as f:  # each write() reaches the mount
        try:
            for i in range(16):  # 64 MiB into 24
                f.write(payload(4 * MiB, f"huge-{i}"))
        except OSError as e:
            err = e
    assert err is not None, "64 MiB fit on a 24 MiB disk"
    assert err.errno == errno.ENOSPC, f"expected ENOSPC, got {err!r}"
    # the disk is still full: reads work regardless, without the cache
    assert sha256((m / "input.bin").read_bytes()) == sha256(payload(6 * MiB, "full-in"))
    os.unlink(m / "huge.bin")
    # its space comes back once the upload of what was written stops using the staged file
    deadline = time.monotonic() + 60
    while os.statvfs(tiny_cache_dir).f_bavail * os.statvfs(tiny_cache_dir).f_frsize < 4 * MiB:
        assert time.monotonic() < deadline, "the unlinked file's space never came back"
        time.sleep(0.2)
    (m / "after.txt").write_bytes(b"written after the disk was freed\n")
    assert m.unmount().returncode == 0
    assert object_bytes(s3, bucket, "full/kept.bin") == kept
    assert object_bytes(s3, bucket, "full/after.txt") == b"written after the disk was freed\n"
    assert object_bytes(s3, bucket, "full/huge.bin") is None
