"""Errors a person understands (issue 14): `flowfs mount` without credentials, with a
malformed endpoint URL or with an endpoint that is not S3; `flowfs unmount` of another
user's mount; and every file flowfs creates readable by its owner only."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from flowfs_mount import flowfs_bin, is_mounted, mount_args
from seaweed import clean_env
from test_lifecycle import _assert_clean_failure, _fail_mount


@pytest.fixture
def mp(work_dir):
    d = work_dir / "mnt"
    d.mkdir()
    return d


def _one_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def test_no_credentials_at_all_is_said_so_fast(flowfs_binary, seaweed, bucket, work_dir, mp):
    """No AWS_* credentials, no profile (an empty HOME): the error says what to set."""
    home = work_dir / "home"
    home.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           # no metadata service off EC2, and none is ever asked from a test
           "AWS_EC2_METADATA_DISABLED": "true"}
    args = mount_args(f"s3://{bucket}", mp, cache_dir=work_dir / "cache", log_file=work_dir / "m.log",
                      pid_file=None, endpoint=seaweed.endpoint)
    t0 = time.monotonic()
    r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                       env=env, check=False)
    took = time.monotonic() - t0
    assert r.returncode != 0
    line = _one_line(r)
    assert line.startswith("flowfs: no AWS credentials found:"), line
    assert "AWS_ACCESS_KEY_ID" in line and "AWS_PROFILE" in line, line
    assert "transient" not in line, line
    assert took < 15, f"took {took:.1f} s"
    assert not is_mounted(mp)


def test_a_malformed_endpoint_url_names_the_flag(flowfs_binary, seaweed, bucket, work_dir, mp):
    t0 = time.monotonic()
    res, log = _fail_mount(f"s3://{bucket}", mp, seaweed.env(), work_dir, "not a url")
    assert time.monotonic() - t0 < 10
    _assert_clean_failure(res, mp, seaweed.creds, log)
    line = _one_line(res)
    assert "--endpoint-url" in line and "malformed endpoint URL" in line, line
    assert not (work_dir / "cache").exists(), "nothing is created before the options are checked"


def test_a_malformed_aws_endpoint_url_is_named_too(flowfs_binary, seaweed, bucket, work_dir, mp):
    res, log = _fail_mount(f"s3://{bucket}", mp, seaweed.env("localhost:8333"), work_dir, None)
    _assert_clean_failure(res, mp, seaweed.creds, log)
    line = _one_line(res)
    assert "AWS_ENDPOINT_URL" in line and "malformed endpoint URL" in line, line


class _WebSite(BaseHTTPRequestHandler):
    """A plain web server: HTML for every request, with the status the server was given."""

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature; keep quiet
        pass

    def _page(self, body: bool) -> None:
        page = b"<!DOCTYPE html><html><body><h1>Welcome</h1></body></html>"
        self.send_response(self.server.status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        if body:
            self.wfile.write(page)

    def do_GET(self):  # noqa: N802
        self._page(True)

    def do_HEAD(self):  # noqa: N802
        self._page(False)


@pytest.fixture(params=[404, 200], ids=["html-404", "html-200"])
def website(request):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _WebSite)
    srv.daemon_threads = True
    srv.status = request.param
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    t.join(timeout=10)


def test_an_endpoint_that_is_not_s3_is_said_so(flowfs_binary, seaweed, bucket, work_dir, mp, website):
    res, log = _fail_mount(f"s3://{bucket}", mp, seaweed.env(website), work_dir, website)
    _assert_clean_failure(res, mp, seaweed.creds, log)
    line = _one_line(res)
    assert "does not look like an S3 server" in line, line
    assert "does not exist" not in line, line


def _as_nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def test_unmount_of_another_users_mount_says_whose_it_is(mount, s3, bucket, work_dir):
    """The mount is root's (the tests run as root); `flowfs unmount` runs as nobody, whose
    control socket directory has no socket for it. Before, that read as a dead mount and
    was lazily unmounted; now it is named as another user's mount and left alone."""
    if os.getuid() != 0:
        pytest.skip("needs root to run a command as another user")
    s3.put_object(Bucket=bucket, Key="k.txt", Body=b"kept")
    m = mount(bucket)
    r = subprocess.run([flowfs_bin(), "unmount", str(m.path)], capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL, preexec_fn=_as_nobody,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": "/tmp"})
    assert r.returncode != 0
    line = _one_line(r)
    assert "mount of root (uid 0)" in line and "not of this user" in line, line
    assert "gone" not in line, line
    assert is_mounted(m.path), "another user's unmount must leave the mount alone"
    assert (m / "k.txt").read_bytes() == b"kept", "the mount must keep serving"


def test_every_file_flowfs_creates_is_its_owners_only(mount, s3, bucket, seaweed):
    """Log, journal records, staged data, cache files and the pid file: 0600 (dirs 0700),
    whatever the caller's umask; and the log never holds the credentials."""
    old = os.umask(0o022)
    try:
        s3.put_object(Bucket=bucket, Key="in.txt", Body=b"cached" * 1000)
        m = mount(bucket, extra=["--unmount-timeout", "60"])
    finally:
        os.umask(old)
    assert (m / "in.txt").read_bytes() == b"cached" * 1000
    f = open(m / "out.txt", "wb")
    f.write(b"staged")
    f.flush()
    files = [m.log_file, m.pid_file]
    for root, dirs, names in os.walk(m.cache_dir):
        for d in dirs:
            mode = stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode)
            assert mode & 0o077 == 0, f"{os.path.join(root, d)} is {oct(mode)}"
        files += [os.path.join(root, n) for n in names]
    modes = {}
    for p in files:  # while the file is still open: its staged files are there
        try:
            modes[p] = stat.S_IMODE(os.stat(p).st_mode)
        except FileNotFoundError:  # a cache entry's temporary name, gone once linked
            assert str(p).endswith(".tmp"), f"{p} vanished"
    f.close()
    assert any(str(p).endswith(".rec") for p in modes), files
    assert any(str(p).endswith(".data") for p in modes), files
    for p, mode in modes.items():
        assert mode & 0o077 == 0, f"{p} is {oct(mode)}"
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    log = m.log_file.read_text(errors="replace")
    assert seaweed.creds.secret_key not in log and seaweed.creds.access_key not in log


def test_flowfs_run_keeps_the_callers_umask_for_its_command(flowfs_binary, seaweed, bucket, work_dir):
    """The mount process's umask of 077 is its own: the task command keeps the caller's."""
    mnt = work_dir / "run-mnt"
    args = [flowfs_bin(), "run", "--mount", f"s3://{bucket}={mnt}", "--cache-dir", str(work_dir / "rc"),
            "--endpoint-url", seaweed.endpoint, "--", "sh", "-c", "umask"]
    old = os.umask(0o022)
    try:
        r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                           env=clean_env(seaweed.env()), check=False)
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0022", r.stdout
    assert not is_mounted(mnt)
