"""Helpers of test_faults.py (issue 14): fault levels, I/O under a deadline, writer-visible
errors, and the checks that faults were injected and that the bucket holds what was written."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field

import pytest

import faultproxy as F
import s3proxy as P
from helpers import sha256

UNMOUNT_TIMEOUT = 150  # flowfs --unmount-timeout; the `flowfs unmount` command gets more
MOUNT_EXTRA = ("--unmount-timeout", str(UNMOUNT_TIMEOUT))

# The levels of the brief. "reset" is split for object GETs: half before the response, half
# mid-body (headers and part of the body, then an RST).
LEVELS = {
    "5pct": dict(slowdown=0.05, internal=0.02, reset=0.01, stall=0.02),
    "20pct": dict(slowdown=0.20, reset=0.05, stall=0.02),
}


def level_rates(level: str) -> dict[str, dict[str, float]]:
    rates = F.mix(**LEVELS[level])
    for op in P.OBJECT_GETS:
        r = dict(rates[op])
        r[F.RESET_MID_BODY] = r[F.RESET] / 2
        r[F.RESET] /= 2
        rates[op] = r
    return rates


def bounded(fn, seconds: float, what: str):
    """Run fn() in a daemon thread; a hang (no result within `seconds`) fails the test.
    (The thread may stay blocked in a FUSE call: the mount fixture's teardown unmounts
    lazily and stops flowfs, which ends the call.)"""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    th = threading.Thread(target=run, name=f"bounded-{what}", daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        pytest.fail(f"HANG: {what} did not finish within {seconds:.0f} s", pytrace=False)
    if "error" in box:
        raise box["error"]
    return box.get("value")


@dataclass
class Errors:
    """Errors a reader or writer saw (errno and message per operation); thread-safe."""
    items: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except OSError as e:
            name = errno.errorcode.get(e.errno or 0, str(e.errno))
            with self.lock:
                self.items.append(f"{what}: {name} ({e.strerror})")
            return None

    def report(self, limit: int = 20) -> str:
        head = self.items[:limit]
        more = f"\n... and {len(self.items) - limit} more" if len(self.items) > limit else ""
        return "\n".join(head) + more


def write_file(path, data: bytes, chunk: int = 1 << 20) -> None:
    with open(path, "wb") as f:
        for i in range(0, len(data), chunk):
            f.write(data[i:i + chunk])


def read_file(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def unmount_checked(m, proxy=None) -> subprocess.CompletedProcess:
    """`flowfs unmount` under a deadline; fails the test on a hang or a non-zero exit."""
    t0 = time.monotonic()
    try:
        r = m.unmount(timeout=UNMOUNT_TIMEOUT + 60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"HANG: flowfs unmount did not return within {UNMOUNT_TIMEOUT + 60} s", pytrace=False)
    took = time.monotonic() - t0
    print(f"flowfs unmount: exit {r.returncode} after {took:.1f}s; stderr: {r.stderr.strip()[-1500:]!r}")
    extra = f"\nfault proxy: {proxy.fault_summary()}" if proxy is not None else ""
    assert r.returncode == 0, (f"flowfs unmount exited {r.returncode} after {took:.0f}s:\n"
                               f"{r.stderr.strip()[-3000:]}{extra}")
    return r


def assert_faults_injected(proxy: F.FaultProxy) -> None:
    """A test that injects nothing proves nothing: every kind whose expected count is 6 or
    more (P(0) < 0.3 %) must have been injected at least once."""
    snap = proxy.faults.snapshot()
    print(proxy.fault_summary())
    missing = [k for k, e in snap["expected"].items() if e >= 6 and not snap["injected"].get(k)]
    assert sum(snap["injected"].values()) > 0, f"no fault was injected: {proxy.fault_summary()}"
    assert not missing, f"faults of kinds {missing} were expected but never injected: {proxy.fault_summary()}"


def compare_objects(s3, bucket: str, want: dict[str, bytes]) -> list[str]:
    """What boto3 reads straight from the server (not through the proxy) against `want`."""
    problems = []
    for key, data in sorted(want.items()):
        try:
            got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            problems.append(f"{key}: no object")
            continue
        if len(got) != len(data) or sha256(got) != sha256(data):
            problems.append(f"{key}: {len(got)} bytes, want {len(data)} (sha256 differs)")
    return problems


def wait_uploaded(s3, bucket: str, want: dict[str, bytes], timeout: float) -> list[str]:
    """Polls (boto3, straight to the server) until every key has its size; returns the
    keys still missing or of the wrong size at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        sizes = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            sizes.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
        missing = [k for k, v in want.items() if sizes.get(k) != len(v)]
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.5)


def all_files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
