"""One node cache shared by concurrent flowfs processes on one --cache-dir (issue 16):
bytes fetched by one are read from disk by the others, each range is fetched once even
when several ask at the same moment, eviction keeps the directory within its limit, and
a process killed with -9 in the middle leaves nothing wrong behind. Every byte read is
compared with the object; the GET bytes the server sent are counted by the proxy."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading

import pytest

from flowfs_mount import flowfs_bin, wait_killed
from helpers import MiB

MOUNTS = 4
SEGMENT = 16 * MiB  # read by every mount in one phase, then left for eviction
READ = 128 * 1024
CACHE = "64M"
WAIT = 300  # seconds any one phase may take at most


def run_cli(args, env, timeout=120):
    return subprocess.run([flowfs_bin(), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL, check=False)


def cache_stats(cache, env) -> dict:
    r = run_cli(["cache", "stats", str(cache), "--json"], env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class Reader:
    """One mount's reads: every 128 KiB piece of each segment in its own random order,
    each compared with the object."""

    def __init__(self, n: int, m, big, rng: random.Random):
        self.n, self.m, self.big, self.rng = n, m, big, rng
        self.fd = os.open(m / big.key, os.O_RDONLY)
        self.reads = 0

    def reopen(self, m) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.m = m
        self.fd = os.open(m / self.big.key, os.O_RDONLY)

    def read(self, off: int) -> bytes:
        return os.pread(self.fd, READ, off)

    def phase(self, seg: int, on_read=None) -> None:
        offs = list(range(seg * SEGMENT, min((seg + 1) * SEGMENT, len(self.big.data)), READ))
        self.rng.shuffle(offs)
        for off in offs:
            got = on_read(self, off) if on_read else self.read(off)
            want = self.big.data[off:off + READ]
            assert got == want, f"mount {self.n}: wrong bytes at {off}"
            self.reads += 1


def test_concurrent_mounts_share_one_cache_through_kill_and_eviction(mount, big_object, proxy, work_dir):
    cache = work_dir / "node-cache"
    cache.mkdir()
    extra = ["--cache-size", CACHE, "--cache-min-free", "0"]
    mounts = [mount(big_object.bucket, proxy=proxy, cache_dir=cache, extra=extra) for _ in range(MOUNTS)]
    proxy.reset()
    size = len(big_object.data)
    phases = (size + SEGMENT - 1) // SEGMENT
    kill_phase, kill_after = phases // 3, 40
    readers = [Reader(i, m, big_object, random.Random(1000 + i)) for i, m in enumerate(mounts)]
    barrier = threading.Barrier(MOUNTS, timeout=WAIT)
    killed = {"pid": None, "errors": 0}
    errors: list[BaseException] = []

    def kill_and_restart(r: Reader, off: int) -> bytes:
        """Mount 0, phase kill_phase: SIGKILL its flowfs while a read of it is in flight
        (a fetch of its, likely), then a new mount on the same cache dir goes on."""
        if killed["pid"] is None and r.reads % (SEGMENT // READ) == kill_after:
            pid = r.m.daemon_pid()
            killed["pid"] = pid
            def in_flight() -> None:
                try:
                    os.pread(r.fd, 4 * READ, off)
                except OSError:  # ENOTCONN: the mount is gone, as intended
                    pass

            t = threading.Thread(target=in_flight, daemon=True)
            t.start()
            os.kill(pid, signal.SIGKILL)
            t.join(WAIT)
            wait_killed(r.m, pid, "mount 0 of the shared cache")
            r.reopen(mount(big_object.bucket, proxy=proxy, cache_dir=cache, extra=extra))
        return r.read(off)

    def run(r: Reader) -> None:
        try:
            for seg in range(phases):
                r.phase(seg, kill_and_restart if (r.n == 0 and seg == kill_phase) else None)
                barrier.wait()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(r,), name=f"reader-{r.n}") for r in readers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * phases)
    assert not any(t.is_alive() for t in threads), "HANG: a reader did not finish"
    assert not errors, errors[0]
    assert killed["pid"] is not None, "the kill did not happen"
    for r in readers:
        os.close(r.fd)
    got = proxy.get_bytes
    print(f"{MOUNTS} mounts, {size / MiB:.0f} MiB each, cache {CACHE}: {got / MiB:.1f} MiB fetched; "
          f"{proxy.stats.snapshot()}")
    assert got <= 1.1 * size, f"{got / MiB:.1f} MiB fetched for a {size / MiB:.0f} MiB object\n{proxy.stats.summary()}"
    # A read returns once its bytes are in memory; their store and the eviction after it
    # follow. A mount evicts before it is ready: by then the directory is within its limit.
    for m in mounts[1:] + [r.m for r in readers[:1]]:
        assert m.unmount().returncode == 0
    last = mount(big_object.bucket, proxy=proxy, cache_dir=cache, extra=extra)
    st = cache_stats(cache, last.env)
    assert st["in_use"] is True
    assert st["bytes"] <= 64 * MiB, st
    # On the disk too (sparse files: what is allocated), within the limit and the maps.
    on_disk = sum(p.stat().st_blocks * 512 for p in (cache / "objects").iterdir() if p.suffix in (".bytes", ".map"))
    assert 0 < on_disk <= 64 * MiB + 2 * MiB, f"{on_disk / MiB:.1f} MiB allocated in objects/"


def test_a_range_is_fetched_once_when_mounts_ask_at_once(mount, big_object, proxy, work_dir):
    """Four mounts read the same 32 MiB at the same moment, front to back: the server sends
    it about once (cross-process single flight), and each mount gets the right bytes."""
    cache = work_dir / "at-once"
    cache.mkdir()
    extra = ["--max-readahead", "8M"]
    mounts = [mount(big_object.bucket, proxy=proxy, cache_dir=cache, extra=extra) for _ in range(MOUNTS)]
    proxy.reset()
    span = 32 * MiB
    start = threading.Barrier(MOUNTS, timeout=60)
    out: dict[int, bytes | BaseException] = {}

    def read(i: int) -> None:
        try:
            with open(mounts[i] / big_object.key, "rb") as f:
                start.wait()
                out[i] = f.read(span)
        except BaseException as e:  # noqa: BLE001
            out[i] = e

    threads = [threading.Thread(target=read, args=(i,)) for i in range(MOUNTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads), "HANG"
    for i in range(MOUNTS):
        assert out[i] == big_object.data[:span], f"mount {i}: {out[i]!r:.200}"
    got = proxy.get_bytes
    print(f"{MOUNTS} mounts reading the same {span // MiB} MiB at once: {got / MiB:.1f} MiB fetched")
    # Read-ahead past the span is fetched too (once): up to --max-readahead and a part
    # more. A private cache per mount would fetch the span four times (128 MiB).
    assert got <= 1.1 * (span + 16 * MiB), f"{got / MiB:.1f} MiB fetched\n{proxy.stats.summary()}"
