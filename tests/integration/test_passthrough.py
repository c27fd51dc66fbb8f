"""FUSE passthrough (issue 16, item 2) on a real mount: a file being written is read and
written by the kernel straight from its staged copy, and flowfs sees none of those reads
and writes. What must still hold: stat shows the size and mtime the writes made while the
writer is open, the object in the bucket is exactly what was written (plain writes,
O_APPEND, mmap), a kill -9 of the mount loses nothing the writer wrote, and
`--passthrough off` serves the same operations through flowfs. fsx runs on passthrough
files in test_fsx.py (every run there opens its file with passthrough on, the default)."""

from __future__ import annotations

import errno
import mmap
import os
import signal
import subprocess
import time

import pytest

from flowfs_mount import wait_killed
from helpers import MiB, payload, sha256, sha256_file
from write_helpers import object_bytes

IN_USE = "FUSE passthrough in use"
# Tests of the passthrough of cached files keep every byte read (the default, `reuse`,
# keeps a file from its second open: test_a_file_admitted_at_its_second_open_is_passed_through).
ALWAYS = ["--cache-admit", "always"]


def _until_passed_through(m, path, timeout: float = 20.0) -> None:
    """Opens `path` until an open is served by passthrough. A read hands its bytes to the
    reader before they are written to the cache file, so the file is complete in the cache
    a moment after the read that fetched it; no event tells when."""
    deadline = time.monotonic() + timeout
    while IN_USE not in m.log_text():
        assert time.monotonic() < deadline, f"{path} was never passed through in {timeout} s"
        with open(path, "rb") as f:
            f.read(1)


def _write_checking_size(path, data: bytes, step: int) -> None:
    """Writes `data` in `step`-sized pieces; after each one, stat by path (another
    process's view, no open handle) must show the size written so far."""
    with open(path, "wb", buffering=0) as f:
        for off in range(0, len(data), step):
            f.write(data[off:off + step])
            got = os.stat(path).st_size
            assert got == off + len(data[off:off + step]), f"stat shows {got} after {off + step} bytes"


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_written_file_lands_whole_and_stat_follows_the_writer(mount, bucket, s3, mode):
    m = mount(bucket, f"pt-{mode}", extra=["--passthrough", mode], log_level="info")
    data = payload(24 * MiB + 12345, f"pt-{mode}")
    _write_checking_size(m / "out.bin", data, 4 * MiB)
    # read back through the mount at once (staged copy, or uploaded and cached)
    assert sha256_file(m / "out.bin") == sha256(data)
    log = m.log_text()
    assert (IN_USE in log) == (mode == "auto"), f"passthrough {mode}: log says {log[-2000:]!r}"
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    got = object_bytes(s3, bucket, f"pt-{mode}/out.bin")
    assert got is not None and sha256(got) == sha256(data)


def test_mtime_follows_passthrough_writes_and_utime(mount, bucket):
    m = mount(bucket, "pt-times", log_level="info")
    p = m / "t.txt"
    with open(p, "wb", buffering=0) as f:
        f.write(b"one\n")
        os.utime(p, (1_000_000_000, 1_000_000_000))
        assert os.stat(p).st_mtime == 1_000_000_000, "utime of an open passthrough file"
        f.write(b"two\n")
        st = os.stat(p)
        assert st.st_size == 8
        assert st.st_mtime > 1_000_000_000, "a write after utime shows its own time"
    assert IN_USE in m.log_text()
    assert p.read_bytes() == b"one\ntwo\n"


def test_append_and_mmap_writes_through_passthrough(mount, bucket, s3):
    """Appends of a task's log (each open after the first finds the file staged, or stages
    it at its first write) and writes through a shared mapping of an `O_RDWR` file, which
    passthrough never serves (SEMANTICS, *FUSE passthrough*): both land whole."""
    m = mount(bucket, "pt-mm", log_level="info")
    log = m / "log.txt"
    lines = [f"line {i}\n".encode() for i in range(1000)]
    for ln in lines:  # the way a task appends to its log: open, append, close
        with open(log, "ab", buffering=0) as f:
            f.write(ln)
    want = b"".join(lines)
    assert log.read_bytes() == want

    size = 3 * MiB
    mm_data = payload(size, "pt-mmap")
    with open(m / "mm.bin", "w+b") as f:
        f.truncate(size)
        with mmap.mmap(f.fileno(), size) as mm:
            for off in range(0, size, MiB):
                mm[off:off + MiB] = mm_data[off:off + MiB]
            mm.flush()
    assert IN_USE in m.log_text()
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert object_bytes(s3, bucket, "pt-mm/log.txt") == want
    got = object_bytes(s3, bucket, "pt-mm/mm.bin")
    assert got is not None and sha256(got) == sha256(mm_data), "mmap writes of an O_RDWR file"


def test_kill_9_while_a_passthrough_writer_is_open_loses_nothing(mount, bucket, s3):
    """flowfs never sees a passthrough writer's writes: the file was journaled at its open,
    so the next mount uploads what the staged copy holds."""
    m = mount(bucket, "pt-crash", log_level="info")
    data = payload(6 * MiB, "pt-crash")
    f = open(m / "partial.bin", "wb", buffering=0)
    try:
        f.write(data)
        assert IN_USE in m.log_text()
        pid = m.daemon_pid()
        assert pid is not None, "no pid file"
        os.kill(pid, signal.SIGKILL)
        wait_killed(m, pid, "kill -9 with a passthrough writer open")
    finally:
        try:
            f.close()
        except OSError:
            pass  # the connection is gone: ENOTCONN at close is expected
    m2 = mount(bucket, "pt-crash", cache_dir=m.cache_dir)  # recovery runs before it serves
    got = object_bytes(s3, bucket, "pt-crash/partial.bin")
    assert got is not None and sha256(got) == sha256(data), f"recovered {None if got is None else len(got)} bytes"
    assert (m2 / "partial.bin").read_bytes() == data


def test_fully_cached_file_is_read_by_the_kernel_from_the_cache(mount, bucket, s3):
    """The first read fills the cache (through flowfs); the next open of the file is
    served from the cache's data file by the kernel. A small cache then evicts while that
    reader is open: its bytes stay (the entry is pinned), and every byte read is right."""
    ref = payload(12 * MiB + 4321, "pt-ref")
    other = payload(40 * MiB, "pt-other")
    s3.put_object(Bucket=bucket, Key="pt-read/ref.fa", Body=ref)
    s3.put_object(Bucket=bucket, Key="pt-read/other.bin", Body=other)
    # The subject is the passthrough of a cached file, not admission: every byte read is kept.
    m = mount(bucket, "pt-read", extra=["--cache-size", "24M", *ALWAYS], log_level="info")
    assert sha256_file(m / "ref.fa") == sha256(ref)
    assert IN_USE not in m.log_text(), "a file not yet cached is read through flowfs"
    _until_passed_through(m, m / "ref.fa")
    with open(m / "ref.fa", "rb", buffering=0) as f:
        head = f.read(MiB)
        # 40 MiB through a 24 MiB cache: eviction runs while the reader is open
        assert sha256_file(m / "other.bin") == sha256(other)
        rest = f.read()
    assert head + rest == ref


def test_a_file_admitted_at_its_second_open_is_passed_through(mount, bucket, s3, work_dir):
    """Under the default admission (`reuse`) a file read once is not in the cache: its next
    open is served by flowfs. Its second read keeps it; an open after that is passed through
    to the cache's data file, and reads the same bytes."""
    data = payload(3 * MiB + 17, "pt-admit")
    s3.put_object(Bucket=bucket, Key="pt-admit/ref.fa", Body=data)
    cache = work_dir / "pt-admit-cache"
    m = mount(bucket, "pt-admit", cache_dir=cache, log_level="info")
    assert sha256_file(m / "ref.fa") == sha256(data)
    with open(m / "ref.fa", "rb") as f:
        # Its pages leave the page cache (else the kernel serves this read itself).
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert sha256(f.read()) == sha256(data)
    assert IN_USE not in m.log_text(), "opened once before: not yet in the cache"
    _until_passed_through(m, m / "ref.fa")
    assert sha256_file(m / "ref.fa") == sha256(data)


def _resident(path) -> int:
    """Bytes of `path` in the page cache (util-linux fincore)."""
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                       capture_output=True, text=True, timeout=30, check=True)
    return int(r.stdout.split()[0])


def test_a_file_read_cold_is_in_the_page_cache_for_the_kernel(mount, bucket, s3, work_dir):
    """A cold read writes the fetched bytes into the cache's data file through the page
    cache, so the next open, passed through to that file, is read from memory. Written
    with O_DIRECT they had to come back from the disk: B3's second read of a 2 GiB
    object took 4.1 s against 1.9 s."""
    data = payload(12 * MiB + 4321, "pt-warm")
    s3.put_object(Bucket=bucket, Key="pt-warm/ref.fa", Body=data)
    cache = work_dir / "pt-warm-cache"
    m = mount(bucket, "pt-warm", cache_dir=cache, extra=ALWAYS, log_level="info")
    assert sha256_file(m / "ref.fa") == sha256(data)
    _until_passed_through(m, m / "ref.fa")
    files = [p for p in (cache / "objects").iterdir() if p.suffix == ".bytes"]
    assert len(files) == 1, files
    whole = -(-len(data) // 4096) * 4096
    assert _resident(files[0]) == whole, f"{_resident(files[0])} of {whole} bytes in the page cache"
    with open(m / "ref.fa", "rb") as f:
        assert sha256(f.read()) == sha256(data)


def test_writer_is_refused_while_the_cache_file_is_passed_through(mount, bucket, s3):
    """While readers of a file read the cache's file, an open of it for writing gets EBUSY
    and changes nothing (an O_TRUNC truncates nothing); once they close, it succeeds. (A
    file over 1 MiB: smaller ones are kept packed in a segment, never passed through.)"""
    original = b"original\n" * 150_000
    s3.put_object(Bucket=bucket, Key="pt-busy/in.txt", Body=original)
    m = mount(bucket, "pt-busy", extra=ALWAYS, log_level="info")
    p = m / "in.txt"
    assert p.read_bytes() == original
    _until_passed_through(m, p)
    with open(p, "rb") as reader:
        with pytest.raises(OSError) as e:
            open(p, "wb")
        assert e.value.errno == errno.EBUSY
        assert reader.read() == original
        assert os.stat(p).st_size == len(original)
    with open(p, "wb") as w:
        w.write(b"new\n")
    assert p.read_bytes() == b"new\n"
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert object_bytes(s3, bucket, "pt-busy/in.txt") == b"new\n"
