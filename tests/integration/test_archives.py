"""Archives read in place (issue 29): a tar or tar.gz object made by GNU tar, mounted with
`flowfs mount s3://B/KEY.tar DIR`, compared member by member (bytes, type, mode, owner,
mtime, link target) with GNU tar's own extraction of the same archive; what a member's read
costs, counted by a proxy; the index kept in the cache and rebuilt for a changed archive."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

import s3proxy as P
from flowfs_mount import MountError
from helpers import payload, sha256, upload_large

MiB = 1 << 20


def _tree(root: Path) -> None:
    """Directories (one empty, one 0700), files of many sizes and modes, an empty file,
    symlinks, a hard link, a long name, a non-ASCII name and set mtimes."""
    (root / "refs/chr").mkdir(parents=True)
    (root / "empty_dir").mkdir()
    (root / "private").mkdir(mode=0o700)
    for i in range(40):
        (root / "refs/chr" / f"part{i:02}.fa").write_bytes(payload(1000 + i * 3001, f"tar{i}"))
    (root / "refs/big.bin").write_bytes(payload(9 * MiB + 7, "big"))
    (root / "refs/empty.txt").write_bytes(b"")
    run = root / "run.sh"
    run.write_bytes(b"#!/bin/sh\necho hi\n")
    run.chmod(0o755)
    (root / "private/secret").write_bytes(b"s" * 10)
    long_dir = root / ("d" * 120) / ("e" * 120)
    long_dir.mkdir(parents=True)
    (long_dir / ("f" * 100 + ".txt")).write_bytes(b"long name\n")
    (root / "données.tsv").write_bytes("é\tü\n".encode())
    os.symlink("chr/part01.fa", root / "refs/link.fa")
    os.symlink("/nonexistent/abs", root / "dangling")
    os.link(root / "refs/chr/part02.fa", root / "refs/hard.fa")
    for i, p in enumerate(sorted(root.rglob("*"))):
        if not p.is_symlink():
            os.utime(p, (1_600_000_000 + i, 1_600_000_000 + i * 7))


def _describe(root: Path) -> dict[str, tuple]:
    """Every path below root: type, permission bits, owner, mtime, size and content hash
    or link target."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime),
                            st.st_size, sha256(p.read_bytes()))
    return out


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """The tree, its GNU-format tar, a PAX-format tar.gz of it, and GNU tar's extraction."""
    base = tmp_path_factory.mktemp("archives")
    src = base / "src"
    src.mkdir()
    _tree(src)
    tar, tgz = base / "refs.tar", base / "refs.tgz"
    # Owners set in the archive, as a packager's would be.
    owner = ["--owner=1234", "--group=5678", "--numeric-owner"]
    subprocess.run(["tar", "-C", str(src), "--format=gnu", *owner, "-cf", str(tar), "."], check=True)
    subprocess.run(["tar", "-C", str(src), "--format=pax", *owner, "-czf", str(tgz), "."], check=True)
    # Members in name order, as `cp -r` of the mount reads them (GNU tar's default is the
    # source directory's order; Python's tarfile sorts).
    sorted_tar = base / "sorted.tar"
    subprocess.run(["tar", "-C", str(src), "--sort=name", *owner, "-cf", str(sorted_tar), "."], check=True)
    want = base / "want"
    want.mkdir()
    subprocess.run(["tar", "-C", str(want), "--same-owner", "--numeric-owner", "-xpf", str(tar)], check=True)
    return {"tar": tar.read_bytes(), "tgz": tgz.read_bytes(), "sorted": sorted_tar.read_bytes(),
            "want": _describe(want)}


def _upload(s3, bucket, key, data):
    if len(data) > 8 * MiB:
        upload_large(s3, bucket, key, data, part_size=5 * MiB)
    else:
        s3.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.mark.parametrize("kind", ["tar", "tgz"])
def test_an_archive_mounts_as_the_tree_gnu_tar_extracts(mount, s3, bucket, archives, kind):
    key = {"tar": "refs/GRCh38.tar", "tgz": "refs/GRCh38.tar.gz"}[kind]
    _upload(s3, bucket, key, archives[kind])
    m = mount(bucket, key)
    got = _describe(m.path)
    assert got == archives["want"]
    # The hard link is a file with its target's bytes; the tree is read-only.
    assert (m / "refs/hard.fa").read_bytes() == (m / "refs/chr/part02.fa").read_bytes()
    with pytest.raises(OSError) as e:
        (m / "new.txt").write_bytes(b"x")
    assert e.value.errno == 30  # EROFS
    # Nothing was written next to the archive.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == [key]


def test_a_member_read_costs_its_own_bytes(mount, s3, bucket, archives, proxy):
    _upload(s3, bucket, "a.tar", archives["tar"])
    m = mount(bucket, "a.tar", proxy=proxy)
    proxy.reset()
    want = payload(1000 + 17 * 3001, "tar17")
    assert (m / "refs/chr/part17.fa").read_bytes() == want
    assert proxy.count(P.GET, P.GET_RANGE) == 1, proxy.stats.summary()
    assert proxy.stats.get_bytes == len(want)
    # Listing the whole tree asks the store nothing: the index answers.
    proxy.reset()
    subprocess.run(["find", str(m.path), "-ls"], check=True, capture_output=True, timeout=60)
    assert proxy.count(P.LIST, P.HEAD, P.GET, P.GET_RANGE) == 0, proxy.stats.summary()


def test_a_gzipped_member_costs_at_most_a_restart_span(mount, s3, bucket, archives, proxy):
    _upload(s3, bucket, "a.tgz", archives["tgz"])
    m = mount(bucket, "a.tgz", proxy=proxy)
    proxy.reset()
    big = payload(9 * MiB + 7, "big")
    got = (m / "refs/big.bin").open("rb")
    got.seek(len(big) - 4096)
    assert got.read() == big[-4096:]
    got.close()
    # About one 4 MiB span of output, compressed (payload is random: about 1:1), not the
    # whole archive.
    assert proxy.stats.get_bytes < len(archives["tgz"]) * 0.7, proxy.stats.summary()


def test_the_index_is_kept_in_the_cache_and_rebuilt_for_a_new_version(mount, s3, bucket, archives, proxy,
                                                                       work_dir):
    _upload(s3, bucket, "a.tar", archives["tar"])
    cache = work_dir / "shared-cache"
    m = mount(bucket, "a.tar", proxy=proxy, cache_dir=cache)
    assert proxy.stats.get_bytes >= len(archives["tar"])  # the index build read it once
    m.unmount()
    proxy.reset()
    m2 = mount(bucket, "a.tar", proxy=proxy, cache_dir=cache)
    assert sorted(os.listdir(m2.path)) == sorted(k for k in archives["want"] if "/" not in k)
    assert proxy.stats.get_bytes == 0, proxy.stats.summary()
    m2.unmount()
    # A new version of the archive: a new index, never the old one's members.
    s3.put_object(Bucket=bucket, Key="a.tar", Body=_one_file_tar(work_dir))
    m3 = mount(bucket, "a.tar", proxy=proxy, cache_dir=cache)
    assert os.listdir(m3.path) == ["only.txt"]
    assert (m3 / "only.txt").read_bytes() == b"only\n"


def _one_file_tar(work_dir: Path) -> bytes:
    d = work_dir / "one"
    d.mkdir()
    (d / "only.txt").write_bytes(b"only\n")
    out = work_dir / "one.tar"
    subprocess.run(["tar", "-C", str(d), "-cf", str(out), "only.txt"], check=True)
    return out.read_bytes()


def test_damaged_archives_are_refused_with_why(mount, s3, bucket, archives):
    s3.put_object(Bucket=bucket, Key="notes.tar", Body=b"these are notes, not a tar\n" * 40)
    with pytest.raises(MountError) as e:
        mount(bucket, "notes.tar")
    assert "neither a tar nor gzip" in str(e.value)
    cut = archives["tgz"][: len(archives["tgz"]) // 2]
    s3.put_object(Bucket=bucket, Key="cut.tar.gz", Body=cut)
    with pytest.raises(MountError) as e:
        mount(bucket, "cut.tar.gz")
    assert "truncated" in str(e.value)


def test_archives_show_as_read_only_views_beside_them(mount, s3, bucket, archives, proxy):
    """--archives: each archive in a normal mount also shows as NAME.d/, the tree GNU tar
    extracts; the rest of the mount stays writable and nothing is written below a view."""
    _upload(s3, bucket, "refs/GRCh38.tar", archives["tar"])
    _upload(s3, bucket, "refs/GRCh38.tar.gz", archives["tgz"])
    # Sorts between the archive and its view: a listing shows each once, in order.
    s3.put_object(Bucket=bucket, Key="refs/GRCh38.tar.c", Body=b"c")
    s3.put_object(Bucket=bucket, Key="refs/notes.txt", Body=b"n")
    m = mount(bucket, extra=["--archives"], proxy=proxy)
    names = os.listdir(m / "refs")
    assert sorted(names) == ["GRCh38.tar", "GRCh38.tar.c", "GRCh38.tar.d", "GRCh38.tar.gz",
                             "GRCh38.tar.gz.d", "notes.txt"]
    # Listing the parent opened no archive: a view is indexed on first use.
    assert proxy.stats.get_bytes == 0, proxy.stats.summary()
    for view in ("GRCh38.tar.d", "GRCh38.tar.gz.d"):
        assert _describe(m / "refs" / view) == archives["want"]
        assert stat.S_IMODE((m / "refs" / view).stat().st_mode) == 0o555
        for write in (lambda v: (m / "refs" / v / "new.txt").write_bytes(b"x"),
                      lambda v: (m / "refs" / v / "run.sh").write_bytes(b"x"),
                      lambda v: os.chmod(m / "refs" / v / "run.sh", 0o600),
                      lambda v: os.unlink(m / "refs" / v / "run.sh"),
                      lambda v: os.mkdir(m / "refs" / v / "d"),
                      lambda v: os.rename(m / "refs" / v / "run.sh", m / "refs/run.sh"),
                      lambda v: os.rename(m / "refs/notes.txt", m / "refs" / v / "notes.txt")):
            with pytest.raises(OSError) as e:
                write(view)
            assert e.value.errno == 30, view  # EROFS
    # The archive itself is still a file, and the rest of the mount writable.
    assert (m / "refs/GRCh38.tar").read_bytes() == archives["tar"]
    (m / "refs/out.txt").write_bytes(b"written\n")
    with pytest.raises(OSError) as e:
        os.mkdir(m / "refs/other.tar.d")
    assert e.value.errno == 30
    m.unmount()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    assert keys == ["refs/GRCh38.tar", "refs/GRCh38.tar.c", "refs/GRCh38.tar.gz", "refs/notes.txt",
                    "refs/out.txt"]


def test_a_view_follows_its_archive_to_a_new_version(mount, s3, bucket, archives, work_dir):
    _upload(s3, bucket, "x.tar", archives["tar"])
    cache = work_dir / "views-cache"
    m = mount(bucket, extra=["--archives"], cache_dir=cache)
    assert (m / "x.tar.d/refs/chr/part03.fa").read_bytes() == payload(1000 + 3 * 3001, "tar3")
    m.unmount()
    s3.put_object(Bucket=bucket, Key="x.tar", Body=_one_file_tar(work_dir))
    m2 = mount(bucket, extra=["--archives"], cache_dir=cache)
    assert os.listdir(m2 / "x.tar.d") == ["only.txt"]
    assert (m2 / "x.tar.d/only.txt").read_bytes() == b"only\n"
    # A non-archive under an archive's name: its view is an error with why in the log,
    # the object itself still reads.
    s3.put_object(Bucket=bucket, Key="notes.tar", Body=b"not a tar\n" * 100)
    with pytest.raises(OSError) as e:
        os.listdir(m2 / "notes.tar.d")
    assert e.value.errno == 5  # EIO
    assert (m2 / "notes.tar").read_bytes() == b"not a tar\n" * 100


def test_prefetch_builds_the_index_and_two_mounts_share_it(mount, s3, bucket, archives, proxy, work_dir):
    """`flowfs cache prefetch --index-only` of an archive builds its index: a mount on that
    cache dir then reads no byte to list it. Two mounts started at once on another cache
    dir build one index between them (a lock), not one each."""
    from concurrent.futures import ThreadPoolExecutor

    from seaweed import clean_env
    from flowfs_mount import flowfs_bin

    _upload(s3, bucket, "refs.tgz", archives["tgz"])
    cache = work_dir / "prefetched"
    env = clean_env(mount.env(proxy.endpoint))
    r = subprocess.run([flowfs_bin(), "cache", "prefetch", "--index-only", f"s3://{bucket}/refs.tgz",
                        "--cache-dir", str(cache)], capture_output=True, text=True, timeout=120, env=env,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 0, r.stderr
    assert f"index of {len(archives['want'])} members" in r.stdout, r.stdout
    proxy.reset()
    m = mount(bucket, "refs.tgz", proxy=proxy, cache_dir=cache)
    listed = sorted(str(p.relative_to(m.path)) for p in m.path.rglob("*"))
    assert listed == sorted(archives["want"])
    assert proxy.stats.get_bytes == 0, proxy.stats.summary()
    assert _describe(m.path) == archives["want"]
    # Reading every member in turn inflates each restart span once, not once per member.
    assert proxy.stats.get_bytes <= 1.2 * len(archives["tgz"]), proxy.stats.summary()
    m.unmount()

    shared = work_dir / "shared"
    proxy.reset()
    with ThreadPoolExecutor(2) as pool:
        mounts = list(pool.map(lambda _: mount(bucket, "refs.tgz", proxy=proxy, cache_dir=shared), range(2)))
    for m in mounts:
        assert sorted(os.listdir(m.path)) == sorted(k for k in archives["want"] if "/" not in k)
    # One pass over the archive (plus each mount's 512-byte sniff), not two.
    assert proxy.stats.get_bytes <= len(archives["tgz"]) + 2 * 512, proxy.stats.summary()


def test_members_copied_in_archive_order_share_their_gets(mount, s3, bucket, archives, proxy, work_dir):
    """`cp -r` of a mount of a tar made in name order reads its members in archive order:
    one GET fetches the members that follow (was a GET per member), and what is copied is
    GNU tar's extraction."""
    _upload(s3, bucket, "a.tar", archives["sorted"])
    m = mount(bucket, "a.tar", proxy=proxy)
    proxy.reset()
    out = work_dir / "copied"
    subprocess.run(["cp", "-a", str(m.path), str(out)], check=True, timeout=120)
    files = sum(1 for v in archives["want"].values() if v[0] == "file")
    gets = proxy.count(P.GET, P.GET_RANGE)
    assert gets <= files // 3, (files, proxy.stats.summary(60))
    assert proxy.stats.get_bytes <= 1.3 * len(archives["sorted"]), proxy.stats.summary()
    got = _describe(out)
    assert {k: v[:1] + v[5:] for k, v in got.items() if v[0] == "file"} == \
        {k: v[:1] + v[5:] for k, v in archives["want"].items() if v[0] == "file"}
