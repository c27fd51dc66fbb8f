"""Issue 14: never hang, never lose, always say why, under a failing object store.

flowfs mounts through the fault proxy (faultproxy.py, seeded: FLOWFS_FAULT_SEED) with the
faults of a level switched on once the mount is up:
  5pct   503 SlowDown 5 %, 500 InternalError 2 %, resets 1 %, 2 s stalls 2 %
  20pct  503 SlowDown 20 %, resets 5 %, 2 s stalls 2 %
(for object GETs half of the resets come mid-body). Under them the read set, the write set
and the write mix of test_write_mix.py must be byte-exact, no reader or writer may see an
error, and `flowfs unmount` must exit 0 with every object right as boto3 reads it straight
from the server. Then an outage (the proxy resetting everything, or the server itself
stopped and started) while files are created, written and closed. Every step runs under a
deadline: a hang fails the test and says where.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import random
import threading
import time

import pytest

import faultproxy as F
import s3proxy as P
from conftest import create_bucket
from fault_helpers import (
    MOUNT_EXTRA,
    Errors,
    assert_faults_injected,
    bounded,
    compare_objects,
    level_rates,
    read_file,
    unmount_checked,
    wait_uploaded,
    write_file,
)
from helpers import MiB, drop_kernel_caches, payload, put_many, sha256, upload_large
from seaweed import SeaweedServer
from test_write_mix import PREFIX as MIX_PREFIX, SEED as MIX_SEED, Twin, run_mix, seed_trees
from write_helpers import check_objects, restart_same_ports, snapshot

LEVELS = ["5pct", "20pct"]
N_SMALL_READ = 100  # 1 MiB files read whole
BIG = 64 * MiB  # read whole, and written
N_PREADS = 200
N_SMALL_WRITE = 200
OUTAGE = 25.0  # seconds
# The write mix at 0.1 of its size: each operation waits out its share of 2 s stalls and
# backoff, and the full mix took 226 s at 5 % and 464 s at 20 % (2 cores), 230 s at 0.4 of
# its size in CI and 153 s at 0.2; the kinds of operations are all there. FLOWFS_FAULTS_FULL=1
# (make test-faults) runs it in full, at both levels; CI runs it at 20 % only, to keep CI
# under 40 minutes, and the read set too (34 s at 5 %, 70 s at 20 %).
FULL = os.environ.get("FLOWFS_FAULTS_FULL") == "1"
MIX_SCALE = 1.0 if FULL else 0.1
LEVELS_IN_CI = [pytest.param(lv, marks=[] if FULL or lv == "20pct" else [
    pytest.mark.skip(reason="runs with FLOWFS_FAULTS_FULL=1 (make test-faults)")]) for lv in LEVELS]


def full_only(test):
    """`test` for another store's module (test_azure.py, test_gcs.py): the same test and
    parameters, run only with FLOWFS_FAULTS_FULL=1 (`make test-faults`). The retry layer
    under the faults is the same for every store and CI runs it on S3; the other stores'
    write mix and read set under 20 % faults cost CI 5 minutes (94 + 84 + 64 + 60 s)."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        return test(*args, **kwargs)

    # A list of its own: the mark added here must not reach `test` itself.
    run.pytestmark = list(getattr(test, "pytestmark", []))
    if not FULL:
        run.pytestmark.append(pytest.mark.skip(reason="on this store with FLOWFS_FAULTS_FULL=1 (make test-faults)"))
    return run


# ------------------------------------------------------------------ the read set


def _preads(path, data: bytes, rng: random.Random, errors: Errors) -> list[str]:
    bad = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(N_PREADS):
            n = rng.choice([1, 4096, 65536, rng.randrange(1, 1 << 20)])
            off = rng.randrange(0, len(data) - n)
            got = errors.call(f"pread #{i} ({n} bytes at {off})", os.pread, fd, n, off)
            if got is not None and got != data[off:off + n]:
                bad.append(f"pread #{i} ({n} bytes at {off}): wrong bytes")
    finally:
        os.close(fd)
    return bad


def _read_all(m, want: dict[str, bytes], errors: Errors) -> list[str]:
    def one(rel):
        got = errors.call(f"read {rel}", read_file, m / rel)
        return None if got is None or sha256(got) == sha256(want[rel]) else f"read {rel}: wrong bytes ({len(got)})"

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        return [r for r in ex.map(one, sorted(want)) if r]


@pytest.mark.parametrize("level", LEVELS_IN_CI)
def test_read_set_under_faults(mount, bucket, s3, fault_proxy, level):
    small = {f"r/s{i:03d}.bin": payload(MiB, f"rs{i}") for i in range(N_SMALL_READ)}
    big = payload(BIG, "read-big")
    put_many(s3, bucket, small)
    upload_large(s3, bucket, "r/big.bin", big)
    m = mount(bucket, proxy=fault_proxy, extra=MOUNT_EXTRA)
    fault_proxy.set_faults(level_rates(level))
    errors = Errors()
    t0 = time.monotonic()
    bad = bounded(lambda: _preads(m / "r/big.bin", big, random.Random(level), errors), 180, "200 preads")
    bad += bounded(lambda: _read_all(m, {**small, "r/big.bin": big}, errors), 180, "reading the read set")
    print(f"{level}: read set in {time.monotonic() - t0:.1f}s")
    unmount_checked(m, fault_proxy)
    assert not errors.items, f"{level}: readers saw errors:\n{errors.report()}\n{fault_proxy.fault_summary()}"
    assert not bad, f"{level}: wrong bytes:\n" + "\n".join(bad[:20])
    assert_faults_injected(fault_proxy)


# ------------------------------------------------------------------ the write set


def _write_set(m, files: dict[str, bytes], errors: Errors) -> None:
    os.makedirs(m / "w/small", exist_ok=True)

    def one(rel):
        errors.call(f"write+close {rel}", write_file, m / rel, files[rel])

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        list(ex.map(one, sorted(files, key=lambda k: -len(files[k]))))  # the big one first


@pytest.mark.parametrize("level", LEVELS)
def test_write_set_under_faults(mount, bucket, s3, fault_proxy, level):
    rng = random.Random(f"ws-{level}")
    files = {f"w/small/f{i:03d}.dat": rng.randbytes(rng.randrange(0, 64 * 1024)) for i in range(N_SMALL_WRITE)}
    files["w/big.bin"] = payload(BIG, f"write-big-{level}")
    m = mount(bucket, proxy=fault_proxy, extra=MOUNT_EXTRA)
    fault_proxy.set_faults(level_rates(level))
    errors = Errors()
    t0 = time.monotonic()
    bounded(lambda: _write_set(m, files, errors), 180, "writing the write set")
    print(f"{level}: write set written in {time.monotonic() - t0:.1f}s")
    assert not errors.items, f"{level}: writers saw errors:\n{errors.report()}\n{fault_proxy.fault_summary()}"
    unmount_checked(m, fault_proxy)
    problems = compare_objects(s3, bucket, files)
    assert not problems, f"{level}: unmount exited 0 but the bucket differs:\n" + "\n".join(problems[:30])
    assert_faults_injected(fault_proxy)


# ------------------------------------------------------------------ the write mix


@pytest.mark.timeout(1800 if FULL else 900)
@pytest.mark.parametrize("level", LEVELS_IN_CI)
def test_write_mix_under_faults(mount, bucket, s3, work_dir, fault_proxy, level):
    local = work_dir / "local"
    local.mkdir()
    seed_trees(s3, bucket, local)
    m = mount(bucket, MIX_PREFIX, proxy=fault_proxy, extra=MOUNT_EXTRA)
    fault_proxy.set_faults(level_rates(level))
    t = Twin(local, m.path)
    t0 = time.monotonic()
    bounded(lambda: run_mix(t, random.Random(MIX_SEED), True, MIX_SCALE), 600 / 0.4 * MIX_SCALE, "the write mix")
    print(f"{level}: {len(t.log)} operations in {time.monotonic() - t0:.1f}s")
    assert not t.mismatches, (f"{level}: operations whose outcome differs on the mount (writer-visible errors):\n"
                              + "\n".join(t.mismatches[:30]) + f"\n{fault_proxy.fault_summary()}")
    unmount_checked(m, fault_proxy)
    problems = check_objects(s3, bucket, MIX_PREFIX + "/", snapshot(local))
    assert not problems, f"{level}: unmount exited 0 but the bucket differs:\n" + "\n".join(problems[:40])
    assert_faults_injected(fault_proxy)


# ------------------------------------------------------------------ an outage


class Outage:
    """Either the fault proxy resetting every request, or a dedicated server stopped and
    started again on the same ports and data dir."""

    def __init__(self, kind: str, proxy: F.FaultProxy | None, server: SeaweedServer | None):
        self.kind, self.proxy, self.server = kind, proxy, server

    def begin(self) -> None:
        if self.proxy is not None:
            self.proxy.down(mode="reset")
        else:
            self.server.stop()

    def end(self) -> None:
        if self.proxy is not None:
            self.proxy.up()
        else:
            restart_same_ports(self.server)  # returns once S3 answers signed requests


def _during_outage(m, before: dict, files: dict[str, bytes], errors: Errors, times: dict) -> None:
    """Finish the files opened before the outage, then create, write and close new ones."""
    for rel, f in before.items():
        t0 = time.monotonic()
        errors.call(f"write+close {rel} (opened before the outage)", _finish, f, files[rel])
        times[rel] = time.monotonic() - t0
    t0 = time.monotonic()
    errors.call("mkdir out/during", os.mkdir, m / "out/during")
    times["mkdir out/during"] = time.monotonic() - t0
    for rel in sorted(files):
        if rel in before or rel == "out/durable.txt":
            continue
        t0 = time.monotonic()
        errors.call(f"create+write+close {rel}", write_file, m / rel, files[rel])
        times[rel] = time.monotonic() - t0


def _finish(f, data: bytes) -> None:
    f.write(data[len(data) // 2:])
    f.close()


def _outage_files() -> dict[str, bytes]:
    # new files in a directory that exists before the outage, and one in a new directory
    files = {f"out/new{i:02d}.txt": payload(100 + 997 * i, f"during-{i}") for i in range(12)}
    files["out/new-big.bin"] = payload(12 * MiB + 5, "during-big")  # multipart (8 MiB parts)
    files["out/during/in-new-dir.txt"] = payload(777, "in-new-dir")
    files["out/opened-before.txt"] = payload(5000, "opened-before")
    files["out/opened-before-big.bin"] = payload(9 * MiB, "opened-before-big")
    return files


def _prepare(m, files: dict[str, bytes]) -> dict:
    """Before the outage: a durable file, and two files opened and half written."""
    os.makedirs(m / "out")
    write_file(m / "out/durable.txt", b"durable\n")
    with open(m / "out/durable.txt", "rb+") as f:
        os.fsync(f.fileno())
    files["out/durable.txt"] = b"durable\n"
    before = {rel: open(m / rel, "wb") for rel in files if "opened-before" in rel}
    for rel, f in before.items():
        f.write(files[rel][: len(files[rel]) // 2])
    return before


def _write_through_outage(m, outage: Outage, files: dict[str, bytes], before: dict) -> list[str]:
    """Down for OUTAGE seconds while a writer works; returns the writer's problems."""
    errors, times, done = Errors(), {}, threading.Event()

    def worker():
        try:
            _during_outage(m, before, files, errors, times)
        finally:
            done.set()

    t_down = time.monotonic()
    outage.begin()
    th = threading.Thread(target=worker, name="outage-writer", daemon=True)
    th.start()
    done.wait(OUTAGE)
    remaining = OUTAGE - (time.monotonic() - t_down)
    if remaining > 0:
        time.sleep(remaining)  # the outage is a timed scenario: nothing to await
    outage.end()
    print(f"{outage.kind}: down for {time.monotonic() - t_down:.1f}s; writer done while down: {done.is_set()}")
    th.join(120)
    problems = ["HANG: the writer did not finish within 120 s after the outage ended"] if th.is_alive() else []
    print(f"operation times over 5 s: { {k: round(v, 1) for k, v in times.items() if v > 5} }")
    return problems + [f"writer-visible error during the outage: {e}" for e in errors.items]


def _run_outage(m, s3, bucket, outage: Outage) -> list[str]:
    """The scenario; returns the problems seen (empty when the contract held)."""
    files = _outage_files()
    before = _prepare(m, files)
    problems = _write_through_outage(m, outage, files, before)
    missing = wait_uploaded(s3, bucket, files, timeout=60)
    if missing:
        problems.append(f"60 s after the outage ended, {len(missing)} closed files were still not uploaded "
                        f"(before any unmount): {missing}")
    try:
        unmount_checked(m)
    except BaseException as e:  # noqa: BLE001 - the bucket is checked too, then everything is reported
        problems.append(" | ".join(str(e).splitlines()[:6]))
    problems += [f"after unmount: {p}" for p in compare_objects(s3, bucket, files)]
    return problems


def test_outage_proxy_resets_everything(mount, bucket, s3, fault_proxy):
    m = mount(bucket, proxy=fault_proxy, extra=MOUNT_EXTRA)
    problems = bounded(lambda: _run_outage(m, s3, bucket, Outage("proxy-reset", fault_proxy, None)), 420,
                       "the outage scenario")
    print(fault_proxy.fault_summary())
    assert fault_proxy.injected(F.DOWN_RESET) > 0, "the outage reset nothing"
    assert not problems, "\n".join(problems)


def test_outage_server_stopped_and_started(own_server):
    server, factory = own_server
    s3 = server.client()
    bucket = create_bucket(s3, "outage")
    m = factory(bucket, extra=MOUNT_EXTRA)
    problems = bounded(lambda: _run_outage(m, s3, bucket, Outage("server-restart", None, server)), 420,
                       "the outage scenario")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ the mount itself


# Seeds of the mount-time run: 3 in CI (about 10 s each), 20 with FLOWFS_FAULTS_FULL=1.
MOUNT_SEEDS = list(range(777, 797 if FULL else 780))


def test_mount_under_faults_retries_cut_listings(mount, bucket, s3, seaweed):
    """Issue 26: with the faults on from the start (the 20pct level, 2 % 500s, and every
    listing body cut mid-way at 60 %), `flowfs mount` must come up and serve, not exit at
    once calling the server "not S3" for an answer the network broke off; then 20 files
    written and read back with no error, and `flowfs unmount` exit 0 with every byte in
    the bucket. One mount per seed, each with its own proxy."""
    s3.put_object(Bucket=bucket, Key="probe.txt", Body=b"probe\n")
    cut = 0
    for seed in MOUNT_SEEDS:
        proxy = F.FaultProxy(seaweed.endpoint, seed=seed).start()
        try:
            rates = F.mix(slowdown=0.20, internal=0.02, reset=0.05, stall=0.02)
            rates[P.LIST] = {F.RESET_MID_BODY: 0.6}
            proxy.set_faults(rates)
            m = mount(bucket, proxy=proxy, extra=MOUNT_EXTRA)
            got = bounded(lambda: (m / "probe.txt").read_bytes(), 120, f"read (seed {seed})")
            assert got == b"probe\n"
            want = {f"s{seed}/f{i}": payload(4096 + i, seed * 100 + i) for i in range(20)}
            errors = Errors()

            def write_all():
                (m / f"s{seed}").mkdir()
                for key, data in want.items():
                    errors.call(f"write {key}", write_file, m / key, data)
            bounded(write_all, 200, f"writes (seed {seed})")
            assert not errors.items, f"seed {seed}: {errors.items}"
            unmount_checked(m, proxy)
            problems = compare_objects(s3, bucket, want)
            assert not problems, f"seed {seed}: " + "\n".join(problems)
            cut += proxy.injected(F.RESET_MID_BODY, op=P.LIST)
        finally:
            proxy.stop()
    assert cut > 0, "no listing body was cut"


def test_a_change_forgotten_by_the_kernel_before_its_upload_is_still_what_stat_and_read_see(
        mount, bucket, s3, fault_proxy):
    """An object changed here (`>>`), its upload held up by a slow store, and the kernel's
    dentries dropped meanwhile (`drop_caches`, memory pressure): `stat` and `cat` show the
    change, not the bucket's older copy (they did: the node went with the kernel's last
    reference, and the next lookup asked the bucket), and the change lands."""
    s3.put_object(Bucket=bucket, Key="kept/x", Body=b"v1")
    m = mount(bucket, proxy=fault_proxy, extra=["--metadata-ttl", "0"])
    p = m / "kept" / "x"
    assert p.read_bytes() == b"v1"
    fault_proxy.configure({"rates": {P.PUT: {F.STALL: 1.0}}, "stall_seconds": 6})
    with open(p, "ab") as f:
        f.write(b" and v2")
    drop_kernel_caches()
    assert p.stat().st_size == len(b"v1 and v2")
    assert p.read_bytes() == b"v1 and v2"
    fault_proxy.clear_faults()
    unmount_checked(m, fault_proxy)
    assert s3.get_object(Bucket=bucket, Key="kept/x")["Body"].read() == b"v1 and v2"
