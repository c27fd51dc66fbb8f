"""Hard links within a mount (issue 47, docs/SEMANTICS.md "Hard links"): `link` gives a file
one more name: one inode, `st_nlink` counting the names, a write through one name read
through the other, `unlink` of one leaving the others. In the bucket each name is an object
with the same bytes, made by a server-side copy (no second upload from the node), whose
metadata carries the link id (`flowfs-link`), so that a remount with an empty cache shows
the names as one file again while their ETags match, and as independent files once one of
them was changed by another client. Objects are checked with boto3 straight to the server,
requests counted by a proxy."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

import s3proxy as P
from flowfs_mount import errno_of
from helpers import MiB, payload
from write_helpers import list_keys, object_bytes

PT = ["auto", "off"]


def _link_id(s3, bucket: str, key: str) -> str | None:
    return s3.head_object(Bucket=bucket, Key=key)["Metadata"].get("flowfs-link")


def _ino_nlink(path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_ino, st.st_nlink


@pytest.mark.parametrize("pt", PT)
def test_a_hard_link_is_one_file_under_two_names(mount, bucket, s3, seaweed, pt):
    """One inode and link count 2; a write through either name is read through the other;
    the link is a server-side copy (no PUT, no part from the node); unlink of either name
    leaves the other with its bytes, in the mount and in the bucket."""
    proxy = P.CountingProxy(seaweed.endpoint).start()
    m = mount(bucket, proxy=proxy, extra=["--passthrough", pt])
    try:
        first = payload(3 * MiB + 11, "link-first")
        (m / "a").write_bytes(first)
        os.mkdir(m / "d")
        with open(m / "a", "rb") as f:
            os.fsync(f.fileno())
        proxy.reset()
        os.link(m / "a", m / "d/b")
        assert proxy.count(P.PUT, P.UPLOAD_PART) == 0, "the link sent the bytes again"
        assert proxy.count(P.COPY) >= 1
        assert _ino_nlink(m / "a") == (_ino_nlink(m / "d/b")[0], 2)
        assert (m / "d/b").read_bytes() == first
        with open(m / "d/b", "ab") as f:
            f.write(b"appended through b")
            f.flush()
            os.fsync(f.fileno())
        assert (m / "a").read_bytes() == first + b"appended through b"
        assert object_bytes(s3, bucket, "a") == first + b"appended through b"
        assert object_bytes(s3, bucket, "d/b") == first + b"appended through b", "fsync left a name behind"
        ids = {_link_id(s3, bucket, k) for k in ("a", "d/b")}
        assert len(ids) == 1 and None not in ids, ids
        os.unlink(m / "a")
        assert not os.path.exists(m / "a")
        assert _ino_nlink(m / "d/b")[1] == 1
        (m / "d/b").write_bytes(b"rewritten")
        r = m.unmount()
        assert r.returncode == 0, r.stderr
        assert set(list_keys(s3, bucket)) == {"d/", "d/b"}
        assert object_bytes(s3, bucket, "d/b") == b"rewritten"
    finally:
        proxy.stop()


def test_links_made_before_the_upload_and_renamed(mount, bucket, s3):
    """A link of a file just closed (its upload still to come), more names, a rename of a
    name that is not the first, a rename over a linked name, and an unlink of the first name:
    every name left holds the file's last bytes in the bucket after the unmount."""
    m = mount(bucket)
    (m / "f").write_bytes(b"one")
    os.link(m / "f", m / "g")
    os.link(m / "g", m / "h")
    assert _ino_nlink(m / "h")[1] == 3
    os.rename(m / "g", m / "g2")
    assert _ino_nlink(m / "g2") == _ino_nlink(m / "f")
    (m / "other").write_bytes(b"other")
    os.link(m / "other", m / "other2")
    os.rename(m / "f", m / "other2")  # over a name of another linked file
    assert (m / "other").read_bytes() == b"other" and _ino_nlink(m / "other")[1] == 1
    assert _ino_nlink(m / "other2")[1] == 3
    os.unlink(m / "other2")  # the first name of f's file now
    with open(m / "h", "wb") as f:
        f.write(b"two")
    assert (m / "g2").read_bytes() == b"two"
    assert sorted(os.listdir(m.path)) == ["g2", "h", "other"]
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert sorted(list_keys(s3, bucket)) == ["g2", "h", "other"]
    assert [object_bytes(s3, bucket, k) for k in ("g2", "h", "other")] == [b"two", b"two", b"other"]


def test_a_remount_joins_names_whose_etags_match(mount, bucket, s3):
    """After a remount with an empty cache, names with the same link id and ETag are one
    inode again (`tar` and `rsync -H` rely on it); a name another client overwrote is an
    independent file."""
    m = mount(bucket)
    os.mkdir(m / "x")
    for name in ("p", "q"):
        (m / name).write_bytes(payload(100_000, name))
        os.link(m / name, m / f"x/{name}-link")
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    s3.put_object(Bucket=bucket, Key="x/q-link", Body=b"changed elsewhere")
    m2 = mount(bucket)
    p, p_link = _ino_nlink(m2 / "p"), _ino_nlink(m2 / "x/p-link")
    assert p_link == (p[0], 2), (p, p_link)
    assert _ino_nlink(m2 / "p") == p_link
    assert _ino_nlink(m2 / "q")[0] != _ino_nlink(m2 / "x/q-link")[0]
    assert (m2 / "x/q-link").read_bytes() == b"changed elsewhere"
    assert (m2 / "q").read_bytes() == payload(100_000, "q")


def test_link_errnos(mount, bucket, seaweed):
    """A directory: EPERM; an existing name: EEXIST; across two mounts: EXDEV (the kernel's);
    nothing is made by a failed link."""
    m = mount(bucket, "one")
    other = mount(bucket, "two")
    (m / "f").write_bytes(b"f")
    os.mkdir(m / "d")
    assert errno_of(os.link, m / "d", m / "d2") == errno.EPERM
    assert errno_of(os.link, m / "f", m / "d") == errno.EEXIST
    assert errno_of(os.link, m / "f", other / "f") == errno.EXDEV
    assert sorted(os.listdir(m.path)) == ["d", "f"] and os.listdir(other.path) == []


def test_cp_al_makes_a_linked_tree(mount, bucket, s3):
    """`cp -al` (a tree of hard links, as backup tools and Nextflow's stageInMode 'link' make):
    every file of the copy is the same inode as its source, and the bucket holds both trees."""
    m = mount(bucket)
    for i in range(5):
        os.makedirs(m / f"src/s{i % 2}", exist_ok=True)
        (m / f"src/s{i % 2}/f{i}").write_bytes(payload(1000 + i, f"cp-al-{i}"))
    r = subprocess.run(["cp", "-al", str(m / "src"), str(m / "dst")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for i in range(5):
        rel = f"s{i % 2}/f{i}"
        assert _ino_nlink(m / "src" / rel) == (_ino_nlink(m / "dst" / rel)[0], 2)
    u = m.unmount()
    assert u.returncode == 0, u.stderr
    for i in range(5):
        rel = f"s{i % 2}/f{i}"
        assert object_bytes(s3, bucket, f"dst/{rel}") == object_bytes(s3, bucket, f"src/{rel}") == \
            payload(1000 + i, f"cp-al-{i}")
