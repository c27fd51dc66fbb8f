"""The checks every store's tests share for copies within a mount and what they keep (issue
49): `cp` of an object onto a new file of the same mount moves no byte of it through the
node; extended attributes survive a rename (a copy on the server) and a remount."""

from __future__ import annotations

import os
import subprocess
import time

import s3proxy as P
from helpers import MiB, payload
from write_helpers import object_bytes


def cp(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["cp", *map(str, args)], capture_output=True, text=True, timeout=600,
                          check=False)


def check_cp_copies_on_the_server(mount, bucket, s3, proxy: P.CountingProxy, size: int) -> None:
    """`cp in/src.bam out/dst.bam` of an object of `size` bytes through a mount behind `proxy`
    (passthrough off: a passthrough writer is copied by the kernel): at most 1 MiB of GET and
    upload bodies through the node, no upload of the copy (but an empty file's), at least one
    copy request (when there are bytes); the bucket holds the bytes, and a remount with an
    empty cache reads them, with the copy's own time (not the source's)."""
    data = payload(size, f"cp-{size}")
    s3.put_object(Bucket=bucket, Key="in/src.bam", Body=data)
    m = mount(bucket, proxy=proxy, extra=["--passthrough", "off"])
    os.mkdir(m / "out")
    assert os.stat(m / "in/src.bam").st_size == size
    time.sleep(1.1)  # the copy's mtime must differ from the source's by a whole second
    proxy.reset()
    started = time.time()
    r = cp(m / "in/src.bam", m / "out/dst.bam")
    assert r.returncode == 0, r.stderr
    u = m.unmount()
    assert u.returncode == 0, u.stderr
    s = proxy.stats.snapshot()
    assert s["get_bytes"] + s["put_bytes"] <= MiB, proxy.stats.summary()
    assert proxy.count(P.PUT, P.UPLOAD_PART) == (1 if size == 0 else 0), proxy.stats.summary()
    assert proxy.count(P.COPY) >= (0 if size == 0 else 1), proxy.stats.summary()
    assert object_bytes(s3, bucket, "out/dst.bam") == data
    m2 = mount(bucket)
    st = os.stat(m2 / "out/dst.bam")
    assert st.st_size == size and st.st_mtime >= int(started) - 1, (st, started)
    assert st.st_mtime > os.stat(m2 / "in/src.bam").st_mtime
    assert (m2 / "out/dst.bam").read_bytes() == data


def check_xattrs_survive_a_rename_and_a_remount(mount, bucket) -> None:
    """`user.*` attributes set through one mount, the file renamed, read by a remount with an
    empty cache: kept in the object's metadata on the store behind `mount`."""
    m = mount(bucket)
    (m / "a").write_bytes(b"x" * 1000)
    os.setxattr(m / "a", "user.sha", b"\x00abc\xff")
    os.rename(m / "a", m / "b")
    assert m.unmount().returncode == 0
    again = mount(bucket)
    assert os.listxattr(again / "b") == ["user.sha"]
    assert os.getxattr(again / "b", "user.sha") == b"\x00abc\xff"
