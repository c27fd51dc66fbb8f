"""`flowfs status` and `flowfs unmount --force` (issue 14) against a server that does not
answer: a proxy in front of the session SeaweedFS holds the PUT of one key back.

- status names a pending file (exit 1) and, once it has landed, reports nothing (exit 0);
- `unmount --force` returns at once, unmounts, names the file and keeps it in the journal;
  the next mount with the same cache dir uploads it byte-exact;
- a second SIGTERM during an unmount that waits for uploads does the same."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

import s3proxy
from flowfs_mount import flowfs_bin, is_mounted, start_mount
from helpers import payload, sha256
from write_helpers import delaying_proxy

HOLD = 25  # seconds a held PUT waits in the proxy: under the client's 60 s read timeout


@pytest.fixture
def slow(seaweed):
    p = delaying_proxy(seaweed.endpoint).start()
    yield p
    p.stop()


def _status(m, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([flowfs_bin(), "status", str(m.path), *extra], capture_output=True, text=True,
                          timeout=30, stdin=subprocess.DEVNULL, env=m.env, check=False)


def _records(cache) -> list[str]:
    return sorted(str(p) for p in (cache / "staging").rglob("*.rec"))


def test_status_shows_a_pending_file_until_it_lands(mount, bucket, s3, slow):
    m = mount(bucket, "p", proxy=slow)
    r = _status(m)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pending: nothing" in r.stdout, r.stdout

    slow.delay(s3proxy.PUT, "p/out/held.bin", 8)
    data = payload(300_000, "held")
    (m / "out").mkdir()
    with open(m / "out/held.bin", "wb") as f:
        f.write(data)
    assert slow.wait_held(s3proxy.PUT, "p/out/held.bin", 30), "the upload never reached the proxy"

    r = _status(m)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 file(s), 300000 byte(s)" in r.stdout, r.stdout
    assert "p/out/held.bin" in r.stdout, r.stdout
    j = _status(m, "--json")
    assert j.returncode == 1
    rep = json.loads(j.stdout)
    assert rep["durable"] is False
    assert rep["pending"]["files"] == 1 and rep["pending"]["bytes"] == len(data)
    assert rep["pending"]["oldest_age_secs"] >= 0
    item = rep["pending"]["list"][0]
    assert item["key"] == "p/out/held.bin" and item["state"] in ("queued", "uploading"), item
    assert rep["failures"] == [] and rep["recovery"] == []

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = _status(m)
        if r.returncode == 0:
            break
        time.sleep(0.5)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sha256(s3.get_object(Bucket=bucket, Key="p/out/held.bin")["Body"].read()) == sha256(data)
    assert json.loads(_status(m, "--json").stdout)["durable"] is True


def test_status_of_no_mount_is_exit_2(flowfs_binary, work_dir):
    d = work_dir / "plain"
    d.mkdir()
    r = subprocess.run([flowfs_bin(), "status", str(d)], capture_output=True, text=True, timeout=30,
                       stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "is not mounted" in r.stderr, r.stderr


def _remount_uploads(mount, bucket, s3, slow, cache, key, data):
    slow.delay(s3proxy.PUT, key, 0)
    m2 = mount(bucket, "p", proxy=slow, cache_dir=cache)  # recovery runs before this returns
    got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert sha256(got) == sha256(data), f"{key}: {len(got)} bytes"
    st = _status(m2, "--json")
    rec = json.loads(st.stdout)["recovery"]
    assert {"key": key, "uploaded": True, "error": None} in rec, rec
    r = m2.unmount()
    assert r.returncode == 0, r.stderr
    assert _records(cache) == []


def test_unmount_force_keeps_the_journal_for_the_next_mount(mount, bucket, s3, slow):
    m = mount(bucket, "p", proxy=slow)
    key = "p/forced.bin"
    slow.delay(s3proxy.PUT, key, HOLD)
    data = payload(200_000, "forced")
    with open(m / "forced.bin", "wb") as f:
        f.write(data)
    assert slow.wait_held(s3proxy.PUT, key, 30), "the upload never reached the proxy"
    t0 = time.monotonic()
    r = subprocess.run([flowfs_bin(), "unmount", "--force", str(m.path)], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL, env=m.env, check=False)
    took = time.monotonic() - t0
    assert took < 10, f"unmount --force took {took:.1f} s"
    assert r.returncode == 1, r.stderr
    assert "without waiting for uploads" in r.stderr and key in r.stderr, r.stderr
    assert not is_mounted(m.path)
    assert len(_records(m.cache_dir)) == 1, _records(m.cache_dir)
    _remount_uploads(mount, bucket, s3, slow, m.cache_dir, key, data)


def test_a_second_sigterm_ends_a_waiting_unmount_at_once(flowfs_binary, seaweed, bucket, s3, slow, work_dir,
                                                          mount):
    mp = work_dir / "fg-mnt"
    mp.mkdir()
    m = start_mount(f"s3://{bucket}/p", mp, work_dir=work_dir / "fg", env=seaweed.env(slow.endpoint),
                    endpoint=slow.endpoint, foreground=True)
    try:
        key = "p/sig.bin"
        slow.delay(s3proxy.PUT, key, HOLD)
        data = payload(100_000, "sig")
        with open(mp / "sig.bin", "wb") as f:
            f.write(data)
        assert slow.wait_held(s3proxy.PUT, key, 30), "the upload never reached the proxy"
        m.proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):  # the first SIGTERM waits for the upload
            m.proc.wait(timeout=1.0)
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        try:
            rc = m.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("a second SIGTERM did not end the mount within 15 s")
        assert time.monotonic() - t0 < 15
        assert not is_mounted(mp)
        assert rc == 1, f"exit {rc}: files were left in the journal"
        log = m.log_text()
        assert "without waiting for uploads" in log and key in log, log[-3000:]
        assert len(_records(m.cache_dir)) == 1, _records(m.cache_dir)
    finally:
        m.close()
    _remount_uploads(mount, bucket, s3, slow, m.cache_dir, key, data)


def test_an_unmount_that_waits_says_what_it_waits_for(mount, bucket, s3, slow):
    """Issue 31: `flowfs unmount` that waits more than a few seconds for uploads names
    them on stderr, and still uploads them."""
    m = mount(bucket, "w", proxy=slow)
    slow.delay(s3proxy.PUT, "w/held.bin", 8)
    data = payload(200_000, "wait")
    (m / "held.bin").write_bytes(data)
    assert slow.wait_held(s3proxy.PUT, "w/held.bin", 30), "the upload never reached the proxy"
    r = m.unmount(timeout=120)
    assert r.returncode == 0, r.stderr
    assert "flowfs: waiting for 1 upload(s), 0.2 MiB: w/held.bin" in r.stderr, r.stderr
    assert sha256(s3.get_object(Bucket=bucket, Key="w/held.bin")["Body"].read()) == sha256(data)
