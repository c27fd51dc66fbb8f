"""The write path through a real FUSE mount on the real server (issue 3): errno values,
durability (fsync, unmount), no partial objects, read-your-writes and mmap, and renames.
Objects are always checked with boto3 straight to the server."""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

import s3proxy as P
from flowfs_mount import errno_of, flowfs_bin
from helpers import MiB, payload, put_many, sha256
from write_helpers import delaying_proxy, list_keys, object_bytes, snapshot, wait_object


def _write(path, data: bytes, chunk: int = MiB) -> None:
    with open(path, "wb") as f:
        for i in range(0, len(data), chunk):
            f.write(data[i:i + chunk])


def _fsync_write(path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(0, len(data), MiB):
            os.write(fd, data[i:i + MiB])
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ errno values


def test_errno_values(mount, bucket, s3):
    # some objects flowfs has never seen, put straight into the bucket
    put_many(s3, bucket, {"remote/full/child.txt": b"child\n", "remote/file.txt": b"file\n"})
    m = mount(bucket)
    os.makedirs(m / "d/sub")
    (m / "d/staged.txt").write_bytes(b"staged\n")
    os.mkdir(m / "only_subdir")
    os.mkdir(m / "only_subdir/inner")
    os.mkdir(m / "empty")
    (m / "file.txt").write_bytes(b"hello\n")
    _fsync_write(m / "durable.txt", b"durable\n")

    # rmdir of a non-empty directory: ENOTEMPTY, whatever makes it non-empty
    assert errno_of(os.rmdir, m / "d") == errno.ENOTEMPTY, "dir with a staged file"
    assert errno_of(os.rmdir, m / "only_subdir") == errno.ENOTEMPTY, "dir with an empty subdir"
    assert errno_of(os.rmdir, m / "remote/full") == errno.ENOTEMPTY, "dir whose child only the bucket has"
    assert errno_of(os.rmdir, m / "file.txt") == errno.ENOTDIR
    assert errno_of(os.rmdir, m / "nope") == errno.ENOENT

    # link: of a directory EPERM (link(2)); onto an existing name EEXIST; of a missing one ENOENT
    for src in ("d", "empty", "remote/full"):
        e = errno_of(os.link, m / src, m / "dir.hardlink")
        assert e == errno.EPERM, f"link of {src}: errno {errno.errorcode.get(e, e)}"
        assert not os.path.exists(m / "dir.hardlink")
    for src, dst in (("file.txt", "durable.txt"), ("durable.txt", "remote/file.txt"), ("file.txt", "d")):
        e = errno_of(os.link, m / src, m / dst)
        assert e == errno.EEXIST, f"link {src} -> {dst}: errno {errno.errorcode.get(e, e)}"
    assert errno_of(os.link, m / "missing.txt", m / "x.hardlink") == errno.ENOENT

    # O_CREAT|O_EXCL on an existing name: EEXIST (staged, durable, bucket-only, a directory)
    for name in ("file.txt", "durable.txt", "remote/file.txt", "empty", "d"):
        e = errno_of(os.open, m / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        assert e == errno.EEXIST, f"O_EXCL on existing {name}: errno {e}"
    assert (m / "file.txt").read_bytes() == b"hello\n", "O_EXCL must not truncate"

    # unlink of a missing name: ENOENT; of a directory: EISDIR
    assert errno_of(os.unlink, m / "missing.txt") == errno.ENOENT
    assert errno_of(os.unlink, m / "no-dir/missing.txt") == errno.ENOENT
    assert errno_of(os.unlink, m / "empty") == errno.EISDIR

    # rename of a directory into its own subdirectory: EINVAL
    assert errno_of(os.rename, m / "d", m / "d/sub/d2") == errno.EINVAL
    assert errno_of(os.rename, m / "d", m / "d/d2") == errno.EINVAL
    # rename of a file over a directory: EISDIR (non-empty or empty)
    assert errno_of(os.rename, m / "file.txt", m / "d") == errno.EISDIR
    assert errno_of(os.rename, m / "file.txt", m / "empty") == errno.EISDIR
    assert errno_of(os.rename, m / "durable.txt", m / "remote/full") == errno.EISDIR
    # a directory over a non-empty directory: ENOTEMPTY; over a file: ENOTDIR
    assert errno_of(os.rename, m / "empty", m / "d") == errno.ENOTEMPTY
    assert errno_of(os.rename, m / "empty", m / "file.txt") == errno.ENOTDIR
    assert errno_of(os.rename, m / "missing", m / "x") == errno.ENOENT

    # nothing moved
    assert sorted(os.listdir(m / "d")) == ["staged.txt", "sub"]
    assert (m / "file.txt").read_bytes() == b"hello\n"
    assert os.path.isdir(m / "empty")
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    # the failed calls changed nothing in the bucket
    assert set(list_keys(s3, bucket)) == {"d/", "d/sub/", "d/staged.txt", "only_subdir/", "only_subdir/inner/",
                                          "empty/", "file.txt", "durable.txt", "remote/full/child.txt",
                                          "remote/file.txt"}
    assert object_bytes(s3, bucket, "file.txt") == b"hello\n"
    assert object_bytes(s3, bucket, "remote/full/child.txt") == b"child\n"


# ------------------------------------------------------------------ durability


def test_mailbox_locking_works(mount, bucket, s3):
    """Python's mailbox dot-locking makes a hard link (and fell back to rename only on
    EPERM: with ENOTSUP every lock killed its process, issue 47): a lock, a message added,
    an unlock, and the mailbox in the bucket with that message and no lock file left."""
    m = mount(bucket)
    r = subprocess.run(
        [sys.executable, "-c",
         "import mailbox, sys; b = mailbox.mbox(sys.argv[1]); b.lock(); "
         "b.add('From: a@b\\nSubject: s\\n\\nhello\\n'); b.flush(); b.unlock(); "
         "print(len(mailbox.mbox(sys.argv[1])))", str(m / "box")],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr
    assert not [p.name for p in m.path.iterdir() if p.name.startswith("box.")], list(m.path.iterdir())
    u = m.unmount(timeout=60)
    assert u.returncode == 0, u.stderr
    assert b"hello" in object_bytes(s3, bucket, "box")
    assert sorted(list_keys(s3, bucket)) == ["box"]


def test_fsync_is_durable_before_unmount(mount, bucket, s3):
    m = mount(bucket, "p")
    os.mkdir(m / "out")
    small = payload(3 * MiB + 5, "fsync-small")
    large = payload(20 * MiB + 7, "fsync-large")  # multipart (parts of 8 MiB)
    _fsync_write(m / "out/small.bin", small)
    assert object_bytes(s3, bucket, "p/out/small.bin") == small, "not in the bucket right after fsync"
    _fsync_write(m / "out/large.bin", large)
    got = object_bytes(s3, bucket, "p/out/large.bin")
    assert got is not None and sha256(got) == sha256(large), "large file not durable right after fsync"

    # fdatasync after overwriting in place a file that is already in the bucket
    remote = payload(2 * MiB, "fsync-remote")
    s3.put_object(Bucket=bucket, Key="p/in/remote.bin", Body=remote)  # not in a dir this mount made
    fd = os.open(m / "in/remote.bin", os.O_RDWR)
    try:
        os.pwrite(fd, b"PATCHED", 1 * MiB)
        os.fdatasync(fd)
        want = remote[:MiB] + b"PATCHED" + remote[MiB + 7:]
        assert object_bytes(s3, bucket, "p/in/remote.bin") == want, "fdatasync did not make the patch durable"
        # fsync of an append, fd still open
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, b"tail")
        os.fsync(fd)
        assert object_bytes(s3, bucket, "p/in/remote.bin") == want + b"tail"
        # a second fsync with nothing new returns at once and changes nothing
        os.fsync(fd)
    finally:
        os.close(fd)

    # an empty file, fsync'ed
    _fsync_write(m / "out/empty", b"")
    assert object_bytes(s3, bucket, "p/out/empty") == b""
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert object_bytes(s3, bucket, "p/out/small.bin") == small
    assert object_bytes(s3, bucket, "p/in/remote.bin") == want + b"tail"


def test_symlink_is_written_back_and_fsyncdir_makes_it_durable(mount, bucket, s3):
    """A symlink costs no request in the call (it is staged like a file); fsync of its
    directory returns once it is in the bucket, with the symlink metadata."""
    m = mount(bucket, "p")
    os.mkdir(m / "task")
    os.symlink("/data/in.bam", m / "task/in.bam")
    assert os.readlink(m / "task/in.bam") == "/data/in.bam"
    assert os.lstat(m / "task/in.bam").st_size == len("/data/in.bam")
    fd = os.open(m / "task", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    head = s3.head_object(Bucket=bucket, Key="p/task/in.bam")
    assert head["Metadata"].get("flowfs-symlink") == "/data/in.bam", head["Metadata"]
    # `task` has a marker (mkdir): a listing there reads every object's metadata, so the
    # symlink is one PUT; outside such a directory it is a one-part multipart upload, whose
    # `-1` ETag tells a listing to look (SEMANTICS.md, *Symbolic links*)
    assert not head["ETag"].strip('"').endswith("-1"), head["ETag"]
    assert object_bytes(s3, bucket, "p/task/in.bam") == b"/data/in.bam"
    os.symlink("/data/top.bam", m / "top.bam")  # the prefix's root: no marker
    fd = os.open(m, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    assert s3.head_object(Bucket=bucket, Key="p/top.bam")["ETag"].strip('"').endswith("-1")
    # a second mount sees both symlinks
    m2 = mount(bucket, "p")
    assert os.readlink(m2 / "task/in.bam") == "/data/in.bam"
    assert stat.S_ISLNK(os.lstat(m2 / "task/in.bam").st_mode)
    assert sorted(os.listdir(m2 / "task")) == ["in.bam"]
    assert {e.name: e.is_symlink() for e in os.scandir(m2)} == {"task": False, "top.bam": True}


@pytest.mark.parametrize("how", ["append", "patch"])
def test_fsync_close_then_reopen_keeps_content(mount, bucket, s3, how):
    """A file fsync'ed then closed, reopened for writing at once (a logger that fsyncs):
    the reopen starts from the fsync'ed content (it once started from an empty file)."""
    m = mount(bucket)
    with open(m / "log.txt", "wb") as f:
        f.write(b"line 1\n")
        f.flush()
        os.fsync(f.fileno())
    assert object_bytes(s3, bucket, "log.txt") == b"line 1\n"
    size = os.stat(m / "log.txt").st_size
    if how == "append":
        with open(m / "log.txt", "ab") as f:
            f.write(b"line 2\n")
        want = b"line 1\nline 2\n"
    else:
        with open(m / "log.txt", "r+b") as f:
            f.seek(5)
            f.write(b"X")
        want = b"line X\n"
    got_mounted = (m / "log.txt").read_bytes()
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    got = object_bytes(s3, bucket, "log.txt")
    assert (size, got_mounted, got) == (7, want, want), \
        f"stat size after fsync+close {size}; read back {got_mounted!r}; object {got!r}; want {want!r}"


def test_unmount_makes_everything_durable(mount, bucket, s3):
    m = mount(bucket, "run")
    files = {f"many/f{i:03d}.txt": payload(400, f"many-{i}") for i in range(100)}
    files["big/64m.bin"] = payload(64 * MiB, "write-back-64")
    files["big/9m.bin"] = payload(9 * MiB, "nine")
    os.makedirs(m / "many")
    os.makedirs(m / "big")
    os.makedirs(m / "keep/empty")
    os.symlink("../big/64m.bin", m / "many/link")
    t0 = time.monotonic()
    for rel in sorted(files):
        _write(m / rel, files[rel])
    t_write = time.monotonic() - t0
    # write-back: close() does not wait for the network; the 64 MiB file must not be
    # uploaded yet in full (not asserted: timing), but after unmount everything is there
    t0 = time.monotonic()
    with open(m / "big/64m-second.bin", "wb") as f:
        f.write(files["big/64m.bin"])
        t_before_close = time.monotonic()
    files["big/64m-second.bin"] = files["big/64m.bin"]
    print(f"wrote {len(files)} files in {t_write:.1f}s; close() of 64 MiB took {time.monotonic() - t_before_close:.3f}s")

    r = m.unmount(timeout=300)
    assert r.returncode == 0, f"unmount exit {r.returncode}: {r.stderr}"
    keys = list_keys(s3, bucket, "run/")
    missing = [rel for rel in files if f"run/{rel}" not in keys]
    assert not missing, f"not in the bucket after unmount: {missing[:10]}"
    wrong = [rel for rel, data in files.items() if keys[f"run/{rel}"] != len(data)
             or sha256(object_bytes(s3, bucket, f"run/{rel}")) != sha256(data)]
    assert not wrong, f"wrong content after unmount: {wrong}"
    assert "run/keep/empty/" in keys, f"empty directory marker missing: {sorted(k for k in keys if 'keep' in k)}"
    link = s3.get_object(Bucket=bucket, Key="run/many/link")
    assert link["Body"].read() == b"../big/64m.bin"
    assert link["Metadata"].get("flowfs-symlink") == "../big/64m.bin", link["Metadata"]


# ------------------------------------------------------------------ no partial objects


def test_no_partial_object_visible_during_upload(mount, bucket, s3, seaweed):
    size = 200 * MiB
    data = payload(size, "no-partial-200")
    digest = sha256(data)
    key = "big/200m.bin"
    poller = seaweed.client()  # its own connections
    seen: list[tuple[float, str, int]] = []
    bad: list[str] = []
    complete = threading.Event()
    stop = threading.Event()

    def poll():
        checked = False
        while not stop.is_set():
            t = time.monotonic()
            try:
                h = poller.head_object(Bucket=bucket, Key=key)
                seen.append((t, "head", h["ContentLength"]))
                if h["ContentLength"] != size:
                    bad.append(f"HEAD saw {h['ContentLength']} bytes")
                elif not checked:
                    body = poller.get_object(Bucket=bucket, Key=key)["Body"].read()
                    if len(body) != size or sha256(body) != digest:
                        bad.append(f"GET of the first visible version: {len(body)} bytes, sha256 differs")
                    checked = True
                    complete.set()
            except poller.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                    bad.append(f"HEAD error {e}")
            for o in poller.list_objects_v2(Bucket=bucket, Prefix="big/").get("Contents", []):
                if o["Key"] == key and o["Size"] != size:
                    bad.append(f"LIST saw {o['Size']} bytes")
            time.sleep(0.02)

    m = mount(bucket)
    os.mkdir(m / "big")
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        with open(m / key, "wb") as f:
            for i in range(0, size, 4 * MiB):
                f.write(data[i:i + 4 * MiB])
        t_closed = time.monotonic()
        assert complete.wait(240), "the object never became visible"
        r = m.unmount(timeout=300)
        assert r.returncode == 0, r.stderr
    finally:
        stop.set()
        th.join(30)
    polls = len(seen)
    print(f"{polls} HEADs that found the key; first at {seen[0][0] - t_closed:+.2f}s after close" if seen else "")
    assert not bad, f"a partial or wrong object was visible: {bad[:10]}"
    h = s3.head_object(Bucket=bucket, Key=key)
    assert h["ContentLength"] == size


# ------------------------------------------------------------------ read-your-writes and mmap


def test_read_your_writes_and_mmap(mount, bucket, s3, work_dir):
    m = mount(bucket)
    p = m / "ryw.bin"
    data = bytearray(payload(3 * MiB + 123, "ryw"))
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for i in range(0, len(data), 256 * 1024):
            os.write(fd, data[i:i + 256 * 1024])
        # same fd, before close
        assert os.pread(fd, len(data), 0) == data
        assert os.fstat(fd).st_size == len(data)
        # another fd, before close
        with open(p, "rb") as g:
            assert g.read() == data
            assert os.stat(p).st_size == len(data)
            # a patch through the writer is seen by the open reader
            os.pwrite(fd, b"\xAB" * 5000, MiB - 10)
            data[MiB - 10:MiB - 10 + 5000] = b"\xAB" * 5000
            g.seek(MiB - 100)
            assert g.read(6000) == bytes(data[MiB - 100:MiB + 5900])
        # reads past EOF and of a hole after extending
        assert os.pread(fd, 10, len(data) + 10) == b""
        os.ftruncate(fd, len(data) + 4096)
        assert os.pread(fd, 4096, len(data)) == b"\0" * 4096
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    # mmap right after close (the upload is in flight)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        assert len(mm) == len(data)
        assert mm[:] == data
        assert mm[MiB - 10:MiB + 4990] == b"\xAB" * 5000

    # append, then read back (reopening each time, and through another fd before close)
    with open(p, "ab") as f:
        f.write(b"appended-1\n")
        f.flush()
        with open(p, "rb") as g:
            g.seek(len(data))
            assert g.read() == b"appended-1\n"
    data += b"appended-1\n"
    with open(p, "ab") as f:
        f.write(b"appended-2\n")
    data += b"appended-2\n"
    assert os.stat(p).st_size == len(data)
    assert p.read_bytes() == data

    # once durable, mmap still reads the same (now from the bucket's object)
    assert wait_object(s3, bucket, "ryw.bin", 60) is not None
    with open(p, "r+b") as f:
        os.fsync(f.fileno())
    assert object_bytes(s3, bucket, "ryw.bin") == data
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        assert hashlib.sha256(mm).hexdigest() == sha256(bytes(data))

    # and on a new mount with an empty cache
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    c = work_dir / "fresh"
    c.mkdir()
    m2 = mount(bucket, cache_dir=c)
    with open(m2 / "ryw.bin", "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        assert mm[:] == data


# ------------------------------------------------------------------ renames


def test_rename_directory_with_contents_implicit_dirs(mount, bucket, s3):
    """A directory the bucket shows only through its keys (no marker objects), with a
    symlink and files staged by this mount inside, moves whole."""
    put_many(s3, bucket, {f"src/a/f{i}.txt": f"file {i}\n".encode() for i in range(5)}
             | {"src/a/deep/er/g.bin": payload(100_000, "g"), "src/other.txt": b"other\n"})
    m = mount(bucket)
    os.symlink("deep/er/g.bin", m / "src/a/link")
    (m / "src/a/deep/staged.txt").write_bytes(b"staged, maybe not uploaded yet\n")
    want = snapshot(m / "src/a")
    os.rename(m / "src/a", m / "dst")
    assert not os.path.exists(m / "src/a")
    assert snapshot(m / "dst") == want
    assert os.readlink(m / "dst/link") == "deep/er/g.bin"
    assert (m / "dst/link").read_bytes() == payload(100_000, "g")
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    keys = list_keys(s3, bucket)
    assert not [k for k in keys if k.startswith("src/a/")], f"left behind: {sorted(keys)}"
    m2 = mount(bucket)
    assert snapshot(m2 / "dst") == want
    assert (m2 / "src/other.txt").read_bytes() == b"other\n"


def test_renamed_directory_does_not_come_back(mount, bucket, s3):
    """After `mv src/a dst`, src/a is gone: from the mount's listing at once and after a
    remount, and no object or folder is left under src/a/."""
    put_many(s3, bucket, {"src/other.txt": b"other\n", "src/a/f.txt": b"f\n", "src/a/sub/deep/g.txt": b"g\n"})
    m = mount(bucket)
    os.rename(m / "src/a", m / "dst")
    assert sorted(os.listdir(m / "src")) == ["other.txt"], "the renamed directory is still listed"
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="src/", Delimiter="/")
    prefixes = [p["Prefix"] for p in listing.get("CommonPrefixes", [])]
    assert prefixes == [], f"the bucket still lists {prefixes} under src/ (keys: {sorted(list_keys(s3, bucket))})"
    m2 = mount(bucket)
    assert sorted(os.listdir(m2 / "src")) == ["other.txt"]
    assert (m2 / "dst/sub/deep/g.txt").read_bytes() == b"g\n"


def test_rename_directory_made_by_mkdir(mount, bucket, s3):
    """Directories made through the mount have `dir/` marker objects; a rename moves them
    too (SeaweedFS cannot CopyObject a marker key: it once failed with ENOENT half done)."""
    m = mount(bucket)
    os.makedirs(m / "a/sub")
    _fsync_write(m / "a/f.txt", b"f\n")
    os.rename(m / "a", m / "b")
    assert sorted(os.listdir(m / "b")) == ["f.txt", "sub"]
    assert not os.path.exists(m / "a")
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert sorted(list_keys(s3, bucket)) in (["b/", "b/f.txt", "b/sub/"], ["b/f.txt", "b/sub/"])


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_renamed_entry_is_found_right_after_the_rename(mount, bucket, s3, kind):
    s3.put_object(Bucket=bucket, Key="d/x", Body=b"x\n")
    m = mount(bucket)
    src = m / ("d" if kind == "dir" else "d/x")
    dst = m / ("e" if kind == "dir" else "y")
    probe = dst / "x" if kind == "dir" else dst
    time.sleep(1.1)  # the next access looks the source up again: its dentry is valid 1 s from now
    os.stat(m / "d/x")
    time.sleep(0.6)
    os.rename(src, dst)
    time.sleep(0.7)  # the moved dentry has expired; the rename was 0.7 s ago
    assert errno_of(os.stat, probe) is None, f"{probe.relative_to(m.path)} is ENOENT 0.7 s after the rename"
    assert probe.read_bytes() == b"x\n"


def _wait_no_multipart(s3, bucket, timeout=120):
    time.sleep(0.3)
    deadline = time.monotonic() + timeout
    while s3.list_multipart_uploads(Bucket=bucket).get("Uploads") and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)  # let any request flowfs sends after an upload land


def _name_reused(mount, bucket, s3, seaweed, how):
    # a proxy holds the CompleteMultipartUpload of the first out.bin for 3 s: its upload is
    # certainly still running during the calls below, however fast the machine
    proxy = delaying_proxy(seaweed.endpoint).start()
    proxy.delay(P.COMPLETE_MULTIPART, "out.bin", 3.0)
    m = mount(bucket, proxy=proxy)
    try:
        big = payload(24 * MiB, "reuse-big")
        _write(m / "out.bin", big)  # close: the multipart upload starts
        if how == "rename":
            os.rename(m / "out.bin", m / "moved.bin")
        elif how == "unlink":
            os.unlink(m / "out.bin")
        if how == "replace":  # write-then-rename over the file that is uploading
            _write(m / "out.bin.tmp", b"the new file\n")
            os.rename(m / "out.bin.tmp", m / "out.bin")
            with open(m / "out.bin", "rb") as f:
                os.fsync(f.fileno())
        else:
            _fsync_write(m / "out.bin", b"the new file\n")
        assert object_bytes(s3, bucket, "out.bin") == b"the new file\n", "not durable right after fsync"
        if how == "rename":  # wait until the big file is durable at its new name
            with open(m / "moved.bin", "rb") as f:
                os.fsync(f.fileno())
            assert sha256(object_bytes(s3, bucket, "moved.bin")) == sha256(big)
        _wait_no_multipart(s3, bucket)
        assert object_bytes(s3, bucket, "out.bin") == b"the new file\n", \
            f"the fsync'ed new out.bin was deleted; objects: {list_keys(s3, bucket)}"
        r = m.unmount(timeout=300)
        assert r.returncode == 0, r.stderr
        assert object_bytes(s3, bucket, "out.bin") == b"the new file\n"
    finally:
        m.close()
        proxy.stop()


@pytest.mark.parametrize("how", ["rename", "unlink"])
def test_name_reused_while_old_upload_runs(mount, bucket, s3, seaweed, how):
    """A large file is closed (its upload starts), then renamed away or unlinked, and a new
    file is written and fsync'ed under the same name. Once every upload is over, the new
    file must still be there: nothing flowfs does for the old upload may overwrite or delete
    it (it once completed the old upload to the old key, then deleted that key)."""
    _name_reused(mount, bucket, s3, seaweed, how)


def test_rename_over_a_file_whose_upload_runs(mount, bucket, s3, seaweed):
    """Like test_name_reused_while_old_upload_runs, with the new content renamed over the
    old file (the write-then-rename idiom) while the old file's upload runs."""
    _name_reused(mount, bucket, s3, seaweed, "replace")


def test_temp_name_reused_while_old_upload_runs(mount, bucket, s3, seaweed):
    """The write-temp-then-rename idiom with one temp name for successive outputs, the first
    one large (its upload still runs at the rename, held 3 s by a proxy): the second rename
    works and both outputs land (it once failed with ENOENT, the second file's object
    deleted)."""
    proxy = delaying_proxy(seaweed.endpoint).start()
    proxy.delay(P.COMPLETE_MULTIPART, "part.tmp", 3.0)
    m = mount(bucket, proxy=proxy)
    try:
        big = payload(24 * MiB, "tmp-reuse-big")
        _write(m / "part.tmp", big)
        os.rename(m / "part.tmp", m / "first.bin")  # its upload (to part.tmp) is still running
        _write(m / "part.tmp", b"second output\n")
        _wait_no_multipart(s3, bucket)
        err = errno_of(os.rename, m / "part.tmp", m / "second.bin")
        r = m.unmount(timeout=300)
        keys = sorted(list_keys(s3, bucket))
        assert err is None, f"second rename: errno {err}; unmount exit {r.returncode}; objects {keys}"
        assert object_bytes(s3, bucket, "second.bin") == b"second output\n"
        assert sha256(object_bytes(s3, bucket, "first.bin")) == sha256(big)
    finally:
        m.close()
        proxy.stop()


def test_rmdir_right_after_unlinking_a_just_written_file(mount, bucket, seaweed):
    """`rm d/f; rmdir d` with f's upload in flight at the unlink (a proxy holds that PUT and
    the DELETE after it): rmdir succeeds (it once failed with ENOTEMPTY)."""
    proxy = delaying_proxy(seaweed.endpoint).start()
    proxy.delay(P.PUT, "d/f.txt", 0.5)
    proxy.delay(P.DELETE, "d/f.txt", 2.0)
    m = mount(bucket, proxy=proxy)
    try:
        os.mkdir(m / "d")
        (m / "d/f.txt").write_bytes(b"short-lived\n")  # close: the upload starts
        os.unlink(m / "d/f.txt")
        time.sleep(1.0)  # the PUT that was in flight at the unlink has landed
        assert errno_of(os.rmdir, m / "d") is None, f"rmdir failed; requests: {proxy.stats.summary()}"
    finally:
        m.close()
        proxy.stop()


@pytest.mark.parametrize("depth", [1, 2])
def test_a_directory_removed_while_a_removed_files_upload_runs_does_not_come_back(
        mount, bucket, s3, seaweed, depth):
    """`rm d/f; rmdir d` (and `rmdir` of its parent too) while f's PUT is held 2 s by a proxy:
    rmdir does not wait for it and deletes the marker; the PUT then lands and makes SeaweedFS
    a folder d/ again, which stayed listed (as an empty directory after a remount) once the
    object was deleted. stress-ng's filename stressor met it 3 times in 20 runs."""
    top = "a/d" if depth == 2 else "d"
    key = f"{top}/f.txt"
    proxy = delaying_proxy(seaweed.endpoint).start()
    proxy.delay(P.PUT, key, 2.0)
    m = mount(bucket, proxy=proxy)
    os.makedirs(m / top)
    (m / key).write_bytes(b"short-lived\n")  # close: the upload starts
    assert proxy.wait_held(P.PUT, key, timeout=30), "the upload never reached the proxy"
    t0 = time.monotonic()
    os.unlink(m / key)
    for d in ["a/d", "a"] if depth == 2 else ["d"]:
        os.rmdir(m / d)
    took = time.monotonic() - t0
    assert took < 1.5, f"unlink and rmdir took {took:.2f} s: they waited for the upload"
    assert os.listdir(m.path) == []
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    keys = list_keys(s3, bucket)
    assert not keys, keys
    listing = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    prefixes = [p["Prefix"] for p in listing.get("CommonPrefixes", [])]
    ops = [(r.op, r.key) for r in proxy.stats.records]
    assert prefixes == [], f"the bucket lists {prefixes}; requests {ops}"
    m2 = mount(bucket)
    assert os.listdir(m2.path) == []
    proxy.stop()


@pytest.mark.parametrize("how", ["unlink", "renamed-over"])
def test_removing_a_file_whose_upload_runs_does_not_wait_for_it(mount, bucket, s3, seaweed, how):
    """A 128 MiB file is closed with its parts held 0.5 s each by a proxy (16 parts, 2 in
    flight: about 4 s of upload), then unlinked or renamed over: the call returns at once
    (it waited for the whole upload, issue 47: 59.6 s for 5 GiB), at most the parts in
    flight at that moment are sent after it, the upload is aborted, never completed, and
    nothing of it is left in the bucket; the file that replaced it is durable."""
    proxy = delaying_proxy(seaweed.endpoint).start()
    proxy.delay(P.UPLOAD_PART, "big.bin", 0.5)
    m = mount(bucket, proxy=proxy, extra=["--part-size", "8M", "--max-upload-concurrency", "2"])
    try:
        _write(m / "big.bin", payload(128 * MiB, "removed-while-uploading"))
        proxy.wait_held(P.UPLOAD_PART, "big.bin", timeout=30)
        parts = lambda: sum(1 for r in proxy.stats.records if r.op == P.UPLOAD_PART and r.key == "big.bin")  # noqa: E731
        if how == "renamed-over":  # held open: its own upload does not start before the rename
            new = open(m / "new.tmp", "wb")
            new.write(b"the new content\n")
            new.flush()
        before = parts()
        t0 = time.monotonic()
        if how == "unlink":
            os.unlink(m / "big.bin")
        else:
            os.rename(m / "new.tmp", m / "big.bin")
        took = time.monotonic() - t0
        assert took < 0.4, f"{how} took {took:.2f} s: it waited for the upload (a part takes 0.5 s)"
        if how == "renamed-over":
            os.fsync(new.fileno())
            new.close()
        _wait_no_multipart(s3, bucket)
        sent_after = parts() - before
        assert sent_after <= 2, f"{sent_after} parts sent after the {how} (2 were in flight at most)"
        ops = [(r.op, r.key) for r in proxy.stats.records]
        assert (P.COMPLETE_MULTIPART, "big.bin") not in ops or how == "renamed-over", ops
        assert (P.ABORT_MULTIPART, "big.bin") in ops, proxy.stats.summary()
        want = [] if how == "unlink" else ["big.bin"]
        assert sorted(list_keys(s3, bucket)) == want
        if how == "renamed-over":
            assert object_bytes(s3, bucket, "big.bin") == b"the new content\n"
        r = m.unmount(timeout=120)
        assert r.returncode == 0, r.stderr
        assert sorted(list_keys(s3, bucket)) == want
        print(f"\n{how} of a file being uploaded: {took * 1000:.1f} ms; {sent_after} parts sent after it")
    finally:
        m.close()
        proxy.stop()


def test_a_file_the_store_refuses_stays_usable(mount, bucket, s3, seaweed):
    """The store refuses the upload of `bad.txt` for good (400 from a proxy, as SeaweedFS
    answered a `..\\` segment): the file stays readable, a rewrite's close succeeds (it was
    EIO, issue 47) and its fsync tries the new content (EIO again: still refused), `flowfs
    status` and the unmount name it while it is not uploaded; renamed to a name the store
    takes it is uploaded there with its last content; a refused file removed is named by
    nothing any more."""
    proxy = delaying_proxy(seaweed.endpoint).start()
    for key in ("bad.txt", "gone.txt"):
        proxy.refuse(P.PUT, key)
    m = mount(bucket, proxy=proxy)
    try:
        (m / "bad.txt").write_bytes(b"one\n")
        (m / "gone.txt").write_bytes(b"never\n")
        assert _fsync_errno(m / "bad.txt") == errno.EIO
        assert (m / "bad.txt").read_bytes() == b"one\n"
        with open(m / "bad.txt", "wb") as f:  # O_TRUNC and a close that must not fail
            f.write(b"three\n")
        assert (m / "bad.txt").read_bytes() == b"three\n"
        assert _fsync_errno(m / "bad.txt") == errno.EIO, "the new content was tried and refused"
        puts = proxy.refused(P.PUT, "bad.txt")
        assert puts >= 2, f"the rewrite was not tried: {puts} PUTs of bad.txt"
        st = subprocess.run([flowfs_bin(), "status", str(m.path)],
                            capture_output=True, text=True, timeout=30, env=m.env)
        assert "bad.txt" in st.stdout + st.stderr, st.stdout
        os.unlink(m / "gone.txt")
        os.truncate(m / "bad.txt", 4)
        os.rename(m / "bad.txt", m / "good.txt")
        with open(m / "good.txt", "rb") as f:
            os.fsync(f.fileno())
        assert object_bytes(s3, bucket, "good.txt") == b"thre"
        r = m.unmount(timeout=120)
        assert r.returncode == 0, r.stderr
        assert sorted(list_keys(s3, bucket)) == ["good.txt"]
    finally:
        m.close()
        proxy.stop()


def _fsync_errno(path) -> int | None:
    with open(path, "rb") as f:
        return errno_of(os.fsync, f.fileno())


def test_write_then_rename_replaces_durable_target(mount, bucket, s3):
    s3.put_object(Bucket=bucket, Key="res/final.txt", Body=b"old result\n")
    m = mount(bucket)
    assert (m / "res/final.txt").read_bytes() == b"old result\n"
    for i in range(5):
        new = f"result {i}\n".encode() * (i + 1)
        _write(m / "res/final.txt.tmp", new)
        os.rename(m / "res/final.txt.tmp", m / "res/final.txt")
        assert (m / "res/final.txt").read_bytes() == new
        assert sorted(os.listdir(m / "res")) == ["final.txt"]
        # let the temp name's upload and removal finish before the name is used again
        # (test_name_reused_while_old_upload_runs covers what happens when it is not)
        with open(m / "res/final.txt", "rb") as f:
            os.fsync(f.fileno())
        assert object_bytes(s3, bucket, "res/final.txt") == new
        deadline = time.monotonic() + 30
        while "res/final.txt.tmp" in list_keys(s3, bucket) and time.monotonic() < deadline:
            time.sleep(0.05)
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert object_bytes(s3, bucket, "res/final.txt") == new
    assert sorted(list_keys(s3, bucket)) == ["res/final.txt"]


def test_chmod_utime_accepted_and_mode_kept_while_mounted(mount, bucket):
    m = mount(bucket)
    (m / "x.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    os.chmod(m / "x.sh", 0o755)
    assert stat.S_IMODE(os.stat(m / "x.sh").st_mode) == 0o755
    os.utime(m / "x.sh", (1_600_000_000, 1_600_000_000))
    os.chmod(m / "x.sh", 0o700)
    assert stat.S_IMODE(os.stat(m / "x.sh").st_mode) == 0o700
    assert (m / "x.sh").read_bytes() == b"#!/bin/sh\necho hi\n"


def test_renamed_file_does_not_reappear_in_listing(mount, bucket, s3, seaweed):
    """`mv out.txt.tmp out.txt` while the temp file's upload runs: a later listing never
    shows out.txt.tmp again (it once did, between the upload landing at the old key and its
    removal)."""
    s3.put_object(Bucket=bucket, Key="res/keep.txt", Body=b"keep\n")
    proxy = delaying_proxy(seaweed.endpoint).start()
    # what a slow network does: the upload of the temp file is still running at the rename,
    # and the cleanup request after it takes a while
    proxy.delay(P.PUT, "res/out.txt.tmp", 0.5)
    proxy.delay(P.DELETE, "res/out.txt.tmp", 2.5)
    m = mount(bucket, proxy=proxy)
    try:
        assert sorted(os.listdir(m / "res")) == ["keep.txt"]
        (m / "res/out.txt.tmp").write_bytes(b"result\n")
        os.rename(m / "res/out.txt.tmp", m / "res/out.txt")
        assert sorted(os.listdir(m / "res")) == ["keep.txt", "out.txt"]
        time.sleep(1.5)  # past the 1 s metadata TTL; the PUT to the old name has completed
        names = sorted(os.listdir(m / "res"))
        print("bucket:", sorted(list_keys(s3, bucket)), "requests:", proxy.stats.summary())
        assert names == ["keep.txt", "out.txt"], f"after the rename the mount lists {names}"
        assert (m / "res/out.txt").read_bytes() == b"result\n"
    finally:
        m.close()
        proxy.stop()


# ------------------------------------------------------------------ listings while uploads land


def test_listing_during_upload_shows_the_new_file(mount, bucket, seaweed):
    proxy = delaying_proxy(seaweed.endpoint).start()
    m = mount(bucket, proxy=proxy)
    try:
        os.mkdir(m / "d")
        proxy.delay(P.PUT, "d/f", 2.7)
        (m / "d/f").write_bytes(b"x" * 1000)  # close: the upload starts, lands in 2.7 s
        time.sleep(1.4)  # past the metadata TTL: the next listdir of d asks the server
        os.stat(m / "d")  # (the kernel's lookup of d first, undelayed)
        proxy.delay_answer(P.LIST, "", 1.6)
        names = os.listdir(m / "d")  # LIST sent before the PUT lands, answered after
        proxy.delay_answer(P.LIST, "", 0)
        assert os.stat(m / "d/f").st_size == 1000
        assert names == ["f"], f"listdir right after writing d/f gives {names}"
    finally:
        m.close()
        proxy.stop()


def test_listing_during_upload_keeps_the_new_size(mount, bucket, s3, seaweed):
    s3.put_object(Bucket=bucket, Key="e/g", Body=b"A" * 1000)
    proxy = delaying_proxy(seaweed.endpoint).start()
    m = mount(bucket, proxy=proxy)
    try:
        assert os.stat(m / "e/g").st_size == 1000
        time.sleep(1.2)  # past the metadata TTL: the next listdir asks the server
        proxy.delay(P.PUT, "e/g", 2.7)
        with open(m / "e/g", "ab") as f:  # close: the upload of 1500 bytes starts, lands in 2.7 s
            f.write(b"B" * 500)
        time.sleep(1.4)  # past the metadata TTL: the next listdir of e asks the server
        os.stat(m / "e")  # (the kernel's lookup of e first, undelayed)
        proxy.delay_answer(P.LIST, "", 1.6)
        assert os.listdir(m / "e") == ["g"]  # LIST sent before the PUT lands, answered after
        proxy.delay_answer(P.LIST, "", 0)
        size = os.stat(m / "e/g").st_size
        err = errno_of(lambda: open(m / "e/g", "ab").close())
        assert (size, err) == (1500, None), f"after the listing: size {size}, reopen for append errno {err}"
        with open(m / "e/g", "ab") as f:
            f.write(b"C" * 100)
        assert (m / "e/g").read_bytes() == b"A" * 1000 + b"B" * 500 + b"C" * 100
    finally:
        m.close()
        proxy.stop()


# ------------------------------------------------------------------ issue 26: what a change fetches, odd names


@pytest.mark.parametrize("pt", ["auto", "off"])
def test_overwrite_and_truncate_fetch_only_what_they_keep(mount, bucket, s3, proxy, pt):
    """`echo x > f` of a 64 MiB object fetched it whole (the kernel opened without O_TRUNC
    and truncated after), and so did `truncate -s 4096`. Now the overwrite fetches nothing
    and the truncation the 4 KiB it keeps (at most one part); the bucket holds the result."""
    big = payload(64 * MiB, "o-trunc")
    for key in ("a.bin", "b.bin", "c.bin"):
        s3.put_object(Bucket=bucket, Key=key, Body=big)
    m = mount(bucket, proxy=proxy, extra=["--passthrough", pt])
    with open(m / "a.bin", "w") as f:  # the shell's `>`: O_WRONLY|O_CREAT|O_TRUNC
        f.write("hello\n")
    assert proxy.get_bytes == 0, proxy.stats.summary()
    os.truncate(m / "b.bin", 4096)  # truncate(2) of a path
    assert proxy.get_bytes <= 4096 + 8 * MiB, proxy.stats.summary()
    assert os.stat(m / "b.bin").st_size == 4096
    # coreutils: open(O_WRONLY), then ftruncate: fetched whole at the open before.
    subprocess.run(["truncate", "-s", "5000", m / "c.bin"], check=True, timeout=60)
    assert proxy.get_bytes <= 2 * (5000 + 8 * MiB), proxy.stats.summary()
    assert os.stat(m / "c.bin").st_size == 5000
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    assert object_bytes(s3, bucket, "a.bin") == b"hello\n"
    assert object_bytes(s3, bucket, "b.bin") == big[:4096]
    assert object_bytes(s3, bucket, "c.bin") == big[:5000]


@pytest.mark.parametrize("pt", ["auto", "off"])
def test_names_with_control_bytes_survive_upload_and_remount(mount, bucket, s3, work_dir, pt):
    """A name with a byte XML cannot carry (0x01-0x1F but tab, newline, CR) vanished once
    uploaded: listings came back with U+FFFD, so `ls` did not show it, `rm` said ENOENT and
    `rmdir` of its directory ENOTEMPTY (stress-ng's filename stressor). Listed, read,
    removed, mounted and after a remount with an empty cache."""
    names = ["a\x01b", "c\x1fd e+f%41", "tab\there"]
    m = mount(bucket, cache_dir=work_dir / "c0", extra=["--passthrough", pt])
    d = m / "d\x02ir"
    d.mkdir()
    for i, n in enumerate(names):
        (d / n).write_bytes(f"content {i}\n".encode())
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    keys = sorted(list_keys(s3, bucket))
    assert keys == sorted(["d\x02ir/"] + [f"d\x02ir/{n}" for n in names]), keys
    m2 = mount(bucket, cache_dir=work_dir / "c1", extra=["--passthrough", pt])
    d2 = m2 / "d\x02ir"
    assert sorted(os.listdir(d2)) == sorted(names)
    for i, n in enumerate(names):
        assert (d2 / n).read_bytes() == f"content {i}\n".encode()
        os.unlink(d2 / n)
    os.rmdir(d2)
    assert os.listdir(m2.path) == []
    r = m2.unmount()
    assert r.returncode == 0, r.stderr
    assert not list_keys(s3, bucket), list_keys(s3, bucket)


def _page_cache_state(path) -> tuple[int, int]:
    """(dirty, under writeback) pages of a file, by cachestat(2) (Linux >= 6.5)."""
    import ctypes

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class Stat(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in
                    ("cache", "dirty", "writeback", "evicted", "recently_evicted")]

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        rng, st = Range(0, 0), Stat()
        if libc.syscall(451, fd, ctypes.byref(rng), ctypes.byref(st), 0) != 0:
            pytest.skip(f"cachestat: {os.strerror(ctypes.get_errno())}")
        return st.dirty, st.writeback
    finally:
        os.close(fd)


@pytest.mark.parametrize("durability", ["bucket", "local"])
def test_durability_local_fsyncs_the_staged_file_and_record_at_close(mount, bucket, s3, seaweed,
                                                                     work_dir, durability):
    """`--durability local`: when close() returns, the staged bytes and the journal record of
    a written file are on the disk (no dirty page left: a power loss before the upload loses
    nothing the next mount cannot upload). By default they are not (the page cache holds
    them). The upload is held back by the proxy so that the staged files are still there."""
    p = delaying_proxy(seaweed.endpoint).start()
    try:
        p.delay(P.PUT, "f.bin", 5)
        cache = work_dir / "cache"
        m = mount(bucket, proxy=p, cache_dir=cache, extra=["--durability", durability])
        data = payload(6 * MiB, "durable")
        with open(m / "f.bin", "wb") as f:
            f.write(data)
        staged = sorted(cache.glob("staging/*/*.data")) + sorted(cache.glob("staging/*/*.rec"))
        assert len(staged) == 2, staged
        states = {s.suffix: _page_cache_state(s) for s in staged}
        if durability == "local":
            assert all(d == 0 for d, _ in states.values()), states
        else:
            assert states[".data"][0] > 0, f"written pages should still be dirty: {states}"
        r = m.unmount()
        assert r.returncode == 0, r.stderr
        assert object_bytes(s3, bucket, "f.bin") == data
    finally:
        p.stop()


def test_statfs_and_seek_hole_are_as_semantics_says(mount, bucket):
    """SEMANTICS: statfs's fixed values; SEEK_HOLE finds no hole before the end, SEEK_DATA
    finds data at 0 (extended attributes: test_xattrs.py)."""
    m = mount(bucket, "p")
    st = os.statvfs(m)
    assert (st.f_bsize, st.f_frsize) == (4096, 4096)
    assert st.f_blocks == st.f_bfree == st.f_bavail == 1 << 40
    assert st.f_files == st.f_ffree == 1 << 30
    assert st.f_namemax == 255
    f = m / "x.bin"
    f.write_bytes(b"x" * 10_000)
    fd = os.open(f, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_DATA) == 0
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 10_000
    finally:
        os.close(fd)
