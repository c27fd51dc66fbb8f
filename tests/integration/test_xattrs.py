"""Extended attributes (issue 49, docs/SEMANTICS.md "Extended attributes"): `user.*` kept in
the object's metadata in s3fs-fuse's convention (`x-amz-meta-xattr`), so that they survive a
remount with an empty cache, a rename and `cp --preserve=xattr` within the mount, and s3fs
(`-o use_xattr`) and flowfs read each other's. Other namespaces are not kept; what does not fit
in S3's 2 KiB of metadata is E2BIG, and the file's bytes stay."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from helpers import MiB, payload
from test_attrs import S3FS, s3fs_mount
from write_helpers import list_keys, object_bytes

PT = ["off", "auto"]


def xattrs(path) -> dict[str, bytes]:
    return {n: os.getxattr(path, n) for n in sorted(os.listxattr(path))}


def stored(s3, bucket: str, key: str) -> str | None:
    return s3.head_object(Bucket=bucket, Key=key)["Metadata"].get("xattr")


@pytest.mark.parametrize("pt", PT)
def test_they_survive_a_remount_a_rename_and_a_copy(mount, bucket, s3, pt):
    m = mount(bucket, extra=["--passthrough", pt])
    data = payload(3 * MiB + 7, "xattr-src")
    (m / "d").mkdir()
    (m / "d/a.bam").write_bytes(data)
    os.setxattr(m / "d/a.bam", "user.sha256", b"abc123")
    os.setxattr(m / "d/a.bam", "user.bin", b"\x00\xff\n")
    os.setxattr(m / "d/a.bam", "user.gone", b"x")
    os.removexattr(m / "d/a.bam", "user.gone")
    want = {"user.bin": b"\x00\xff\n", "user.sha256": b"abc123"}
    assert xattrs(m / "d/a.bam") == want
    os.rename(m / "d/a.bam", m / "d/b.bam")
    r = subprocess.run(["cp", "--preserve=xattr", m / "d/b.bam", m / "d/c.bam"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert subprocess.run(["cp", m / "d/b.bam", m / "d/plain.bam"]).returncode == 0
    assert m.unmount().returncode == 0

    assert stored(s3, bucket, "d/b.bam").startswith("%7B%22user.bin%22%3A")
    again = mount(bucket)  # another cache directory: nothing but the bucket
    assert xattrs(again / "d/b.bam") == want
    assert xattrs(again / "d/c.bam") == want, "cp --preserve=xattr"
    assert xattrs(again / "d/plain.bam") == {}, "cp without --preserve keeps none, as on a disk"
    assert (again / "d/c.bam").read_bytes() == data
    assert list_keys(s3, bucket) == {"d/": 0, "d/b.bam": len(data), "d/c.bam": len(data),
                                     "d/plain.bam": len(data)}


def test_on_an_object_in_the_bucket_they_keep_its_bytes(mount, bucket, s3):
    data = payload(2 * MiB, "xattr-obj")
    s3.put_object(Bucket=bucket, Key="obj", Body=data, Metadata={"other": "kept"})
    m = mount(bucket)
    os.setxattr(m / "obj", "user.state", b"published")
    assert m.unmount().returncode == 0
    head = s3.head_object(Bucket=bucket, Key="obj")["Metadata"]
    assert head["other"] == "kept" and "xattr" in head, head
    assert object_bytes(s3, bucket, "obj") == data
    assert os.getxattr(mount(bucket) / "obj", "user.state") == b"published"


def test_errnos_of_names_flags_and_size(mount, bucket, s3):
    m = mount(bucket)
    f = m / "f"
    f.write_bytes(b"written before")

    def err(call, *args) -> str:
        try:
            call(*args)
        except OSError as e:
            return errno.errorcode[e.errno]
        return "OK"

    assert err(os.getxattr, f, "user.none") == "ENODATA"
    assert err(os.getxattr, f, "security.capability") == "ENODATA"
    assert err(os.setxattr, f, "trusted.x", b"1") == errno.errorcode[errno.EOPNOTSUPP]
    assert err(os.setxattr, f, "user.flowfs.crc64nvme", b"1") == "EPERM", "flowfs's own"
    assert err(os.setxattr, f, "user.a", b"1", os.XATTR_REPLACE) == "ENODATA"
    assert err(os.setxattr, f, "user.a", b"1", os.XATTR_CREATE) == "OK"
    assert err(os.setxattr, f, "user.a", b"2", os.XATTR_CREATE) == "EEXIST"
    assert err(os.removexattr, f, "user.none") == "ENODATA"
    assert err(os.setxattr, f, "user.big", b"v" * 1500) == "E2BIG", "S3 keeps 2 KiB of metadata"
    assert os.listxattr(f) == ["user.a"]
    assert m.unmount().returncode == 0
    assert object_bytes(s3, bucket, "f") == b"written before"


@pytest.mark.skipif(S3FS is None, reason="s3fs-fuse is not installed (apt install s3fs)")
def test_s3fs_and_flowfs_read_each_others(mount, bucket, s3, seaweed, work_dir):
    m = mount(bucket)
    (m / "by-flowfs").write_bytes(b"f")
    os.setxattr(m / "by-flowfs", "user.from", b"flowfs \x01")
    assert m.unmount().returncode == 0
    s3.put_object(Bucket=bucket, Key="by-s3fs", Body=b"s")
    with s3fs_mount(seaweed, bucket, work_dir, ["use_xattr"]) as mp:
        assert os.getxattr(mp / "by-flowfs", "user.from") == b"flowfs \x01", "s3fs reads flowfs's"
        os.setxattr(mp / "by-s3fs", "user.from", b"s3fs")
    print(f"s3fs wrote {s3.head_object(Bucket=bucket, Key='by-s3fs')['Metadata']}")
    assert os.getxattr(mount(bucket) / "by-s3fs", "user.from") == b"s3fs", "flowfs reads s3fs's"
