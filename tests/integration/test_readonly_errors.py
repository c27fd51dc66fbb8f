"""A --read-only mount refuses every change with EROFS and leaves the bucket untouched.
(These stay valid after the write path lands: they use --read-only.)"""

from __future__ import annotations

import errno
import os

import pytest

from flowfs_mount import errno_of
from helpers import put_many

ORIGINAL = {
    "existing.txt": b"original content\n",
    "dir/inner.txt": b"inner\n",
    "emptydir/": b"",
}


@pytest.fixture
def ro_mount(mount, s3, bucket):
    put_many(s3, bucket, ORIGINAL)
    before = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    m = mount(bucket, read_only=True)
    yield m
    after = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert after == before, "a read-only mount changed the bucket"


def _write_existing(p):
    with open(p, "r+b") as f:
        f.write(b"x")


def _append(p):
    with open(p, "ab") as f:
        f.write(b"x")


def _create(p):
    with open(p, "wb") as f:
        f.write(b"new")


def _create_excl(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


def _open_trunc(p):
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))


CASES = {
    "create": lambda m: _create(m / "new.txt"),
    "create_excl": lambda m: _create_excl(m / "new2.txt"),
    "create_in_subdir": lambda m: _create(m / "dir" / "new.txt"),
    "open_rw_existing": lambda m: _write_existing(m / "existing.txt"),
    "append_existing": lambda m: _append(m / "existing.txt"),
    "open_trunc_existing": lambda m: _open_trunc(m / "existing.txt"),
    "truncate": lambda m: os.truncate(m / "existing.txt", 0),
    "mkdir": lambda m: os.mkdir(m / "newdir"),
    "rmdir": lambda m: os.rmdir(m / "emptydir"),
    "unlink": lambda m: os.unlink(m / "existing.txt"),
    "rename_file": lambda m: os.rename(m / "existing.txt", m / "renamed.txt"),
    "rename_dir": lambda m: os.rename(m / "dir", m / "dir2"),
    "symlink": lambda m: os.symlink("existing.txt", m / "link"),
    "hardlink": lambda m: os.link(m / "existing.txt", m / "hard"),
    "chmod": lambda m: os.chmod(m / "existing.txt", 0o600),
    "utime": lambda m: os.utime(m / "existing.txt", (1, 1)),
    "mknod_fifo": lambda m: os.mkfifo(m / "fifo"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_write_attempt_is_erofs(ro_mount, case):
    err = errno_of(CASES[case], ro_mount)
    assert err == errno.EROFS, f"{case}: expected EROFS, got {errno.errorcode.get(err, err)}"
    # the file system still serves the original data, and nothing new appeared
    assert (ro_mount / "existing.txt").read_bytes() == ORIGINAL["existing.txt"]
    assert sorted(os.listdir(ro_mount.path)) == ["dir", "emptydir", "existing.txt"]


def test_read_only_mount_still_reads(ro_mount):
    assert (ro_mount / "dir" / "inner.txt").read_bytes() == b"inner\n"
    assert os.listdir(ro_mount / "emptydir") == []
