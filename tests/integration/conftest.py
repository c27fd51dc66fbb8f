"""Fixtures: a session SeaweedFS, unique buckets, a counting proxy, and flowfs mounts that
are always unmounted.

Environment:
  FLOWFS_BIN        the flowfs binary (default: target/release/flowfs of this repo)
  FLOWFS_IT_KEEP=1  keep the session temp dir (server data, flowfs logs) for debugging
  FLOWFS_FAULT_SEED the seed of the fault proxy (default 14)
  FLOWFS_WF_MODE    data set of the pipeline tests: ci (default) or bench (the data of B7)
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from flowfs_mount import (  # noqa: E402
    SESSION_PID_FILE,
    TMP_PREFIX,
    Mount,
    cleanup_all,
    flowfs_bin,
    proc_mounts,
    start_mount,
    sweep_stale_mounts,
    sweep_stale_session_dirs,
)
from helpers import MiB, payload, put_many, sha256, upload_large  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402
from s3proxy import CountingProxy  # noqa: E402
from seaweed import SeaweedServer, _kill_live_groups  # noqa: E402
from workflow_helpers import ENGINE_TIMEOUT, data_dir, need_tools, nextflow_cmd, run_engine, tool_env, upload_data, vcf_records  # noqa: E402,E501



_INTERRUPTED = threading.Event()


def _hard_cleanup_and_exit(signum: int) -> None:
    cleanup_all()  # unmount everything this session mounted
    _kill_live_groups()  # weed mini and other process groups we started
    os._exit(128 + signum)


def _to_interrupt(signum, frame):  # noqa: ARG001
    """First SIGTERM/SIGHUP: unwind like Ctrl-C so fixture finalizers run; if that has not
    finished in 30 s (or a second signal comes), clean up directly and exit."""
    if _INTERRUPTED.is_set():
        _hard_cleanup_and_exit(signum)
    _INTERRUPTED.set()

    def later():
        time.sleep(30)
        _hard_cleanup_and_exit(signum)

    threading.Thread(target=later, name="hard-exit", daemon=True).start()
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_flowfs: the test mounts the flowfs binary")
    # The cache tests assert what a cache keeps, whatever the disk holds besides: the default
    # floor (10% of the disk free) made a CI disk over 90% full keep nothing and fail nine of
    # them. The floor itself is tested with its own value (test_cache_cli.py).
    os.environ.setdefault("FLOWFS_CACHE_MIN_FREE", "0")
    # A SIGTERM/SIGHUP (CI timeout, closed terminal) unwinds like Ctrl-C, so fixture
    # finalizers unmount and stop servers; atexit handlers are the last net.
    signal.signal(signal.SIGTERM, _to_interrupt)
    signal.signal(signal.SIGHUP, _to_interrupt)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "mount" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.needs_flowfs)
    # The slow real-tools cases run only when asked for: `make test-realworld`
    # (FLOWFS_REALWORLD_FULL=1) or a -m expression that names the marker.
    if os.environ.get("FLOWFS_REALWORLD_FULL") != "1" and "realworld_full" not in (config.option.markexpr or ""):
        slow = [i for i in items if i.get_closest_marker("realworld_full")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [i for i in items if not i.get_closest_marker("realworld_full")]
    # The two-node Slurm cluster tests (issue 32) run only when asked for: `make test-slurm`
    # (`-m slurm`) or FLOWFS_SLURM=1.
    if os.environ.get("FLOWFS_SLURM") != "1" and "slurm" not in (config.option.markexpr or ""):
        cluster = [i for i in items if i.get_closest_marker("slurm")]
        if cluster:
            config.hook.pytest_deselected(items=cluster)
            items[:] = [i for i in items if not i.get_closest_marker("slurm")]


# ------------------------------------------------------------------ session-level pieces

@pytest.fixture(scope="session")
def session_dir():
    tmp_root = tempfile.gettempdir()
    swept = sweep_stale_mounts(tmp_root)
    if swept:
        print(f"\nswept stale flowfs mounts from dead sessions: {swept}", file=sys.stderr)
    sweep_stale_session_dirs(tmp_root)
    d = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=tmp_root))
    (d / SESSION_PID_FILE).write_text(str(os.getpid()))
    yield d
    cleanup_all()
    still = [mp for _s, mp, _t, _o in proc_mounts() if mp.startswith(str(d))]
    if still:  # never rmtree through a live mount
        print(f"\nWARNING: mounts still present, leaving {d}: {still}", file=sys.stderr)
    elif os.environ.get("FLOWFS_IT_KEEP") != "1":
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def seaweed(session_dir):
    server = SeaweedServer(session_dir / "seaweed")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3(seaweed):
    """boto3 client straight to the server (never through flowfs)."""
    return seaweed.client()


def _bucket_name(hint: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:40].strip("-") or "t"
    return f"it-{base}-{secrets.token_hex(4)}"


def create_bucket(s3, hint: str) -> str:
    name = _bucket_name(hint)
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def bucket(s3, request):
    """A fresh, empty bucket for this test."""
    return create_bucket(s3, request.node.name)


@pytest.fixture
def proxy(seaweed):
    """A counting proxy in front of the server, new for each test (counters start at 0)."""
    p = CountingProxy(seaweed.endpoint).start()
    yield p
    p.stop()


FAULT_SEED = int(os.environ.get("FLOWFS_FAULT_SEED", "14"))


@pytest.fixture
def fault_proxy(seaweed, request):
    """A fault-injecting proxy (faultproxy.py) in front of the server, new for each test,
    seeded with FLOWFS_FAULT_SEED; no faults until the test sets rates. On failure its
    counters go into the report."""
    p = FaultProxy(seaweed.endpoint, seed=FAULT_SEED).start()
    request.node._fault_proxy = p
    yield p
    p.stop()


@pytest.fixture
def work_dir(session_dir, request):
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    d = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=session_dir))
    return d


# ------------------------------------------------------------------ flowfs mounts

@pytest.fixture(scope="session")
def flowfs_binary():
    path = flowfs_bin()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"flowfs binary not found at {path}: run `make build` or set FLOWFS_BIN", pytrace=False)
    return path


class MountFactory:
    """mount(bucket, prefix=None, proxy=None, cache_dir=None, read_only=False,
    foreground=False, extra=(), mountpoint=None, log_level=None) -> Mount. Every mount is unmounted at teardown."""

    def __init__(self, seaweed: SeaweedServer, work_dir: Path):
        self.seaweed = seaweed
        self.work_dir = work_dir
        self.mounts: list[Mount] = []

    def new_mountpoint(self) -> Path:
        mp = self.work_dir / f"mnt{len(self.mounts)}-{secrets.token_hex(2)}"
        mp.mkdir()
        return mp

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        return self.seaweed.env(endpoint)

    def __call__(self, bucket: str, prefix: str | None = None, *, proxy: CountingProxy | None = None,
                 cache_dir: Path | None = None, read_only: bool = False, foreground: bool = False,
                 extra: list[str] | tuple[str, ...] = (), mountpoint: Path | None = None,
                 log_level: str | None = None) -> Mount:
        endpoint = proxy.endpoint if proxy is not None else self.seaweed.endpoint
        source = f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
        mp = mountpoint or self.new_mountpoint()
        env = self.env(endpoint)
        if log_level is not None:
            env["FLOWFS_LOG"] = log_level
        m = start_mount(source, mp, work_dir=self.work_dir / f"run{len(self.mounts)}", env=env,
                        endpoint=endpoint, cache_dir=cache_dir, read_only=read_only, foreground=foreground,
                        extra=extra)
        self.mounts.append(m)
        return m

    def close_all(self) -> None:
        for m in reversed(self.mounts):
            m.close()


@pytest.fixture
def mount(flowfs_binary, seaweed, work_dir, request):  # noqa: ARG001 - flowfs_binary checks the path
    factory = MountFactory(seaweed, work_dir)
    request.node._flowfs_factory = factory
    yield factory
    factory.close_all()


@pytest.fixture
def own_server(flowfs_binary, session_dir, work_dir, request):  # noqa: ARG001
    """(server, mounts): a SeaweedFS of the test's own, for tests that stop and start it (the
    session's must stay up), and a MountFactory on it. At the end every mount is unmounted,
    the server stopped and its data removed (kept with FLOWFS_IT_KEEP=1)."""
    # a short path: weed's unix sockets live in it
    server = SeaweedServer(Path(tempfile.mkdtemp(prefix="sw-", dir=session_dir))).start()
    factory = MountFactory(server, work_dir)
    request.node._flowfs_factory = factory
    try:
        yield server, factory
    finally:
        factory.close_all()
        server.stop()
        if os.environ.get("FLOWFS_IT_KEEP") != "1":
            shutil.rmtree(server.base_dir, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    factory = getattr(item, "_flowfs_factory", None)
    if rep.failed and factory is not None and rep.when in ("call", "setup"):
        # The Azure factory's account key is Azurite's public development key.
        secret = factory.seaweed.creds.secret_key if factory.seaweed is not None else None
        for i, m in enumerate(factory.mounts):
            rep.sections.append((f"flowfs log (mount {i}: {m.source})", m.log_text(secret)[-6000:]))
    fp = getattr(item, "_fault_proxy", None)
    if rep.failed and fp is not None and rep.when in ("call", "setup"):
        rep.sections.append(("fault proxy", fp.fault_summary() + "\n" + fp.stats.summary(40)))


# ------------------------------------------------------------------ data helpers

@dataclass
class WideDir:
    bucket: str
    prefix: str  # "wide/"
    sizes: dict[str, int]  # name -> size


WIDE_COUNT = 2100


def fill_wide_dir(s3, b: str) -> WideDir:
    """2,100 small objects of distinct sizes under one prefix of bucket `b`."""
    sizes = {f"f{i:05d}.dat": (i * 7919) % 4099 for i in range(WIDE_COUNT)}
    put_many(s3, b, {f"wide/{n}": payload(sz, n) for n, sz in sizes.items()}, threads=16)
    return WideDir(b, "wide/", sizes)


@pytest.fixture(scope="session")
def wide_dir(s3):
    """2,100 small objects of distinct sizes under one prefix (three listing pages)."""
    return fill_wide_dir(s3, create_bucket(s3, "wide"))


@dataclass
class BigObject:
    bucket: str
    key: str
    data: bytes
    sha256: str


def fill_big_object(s3, b: str) -> BigObject:
    """One 256 MiB object in bucket `b` (multipart upload), its bytes kept."""
    data = payload(256 * MiB, "big-256")
    upload_large(s3, b, "data/big.bin", data)
    head = s3.head_object(Bucket=b, Key="data/big.bin")
    assert head["ContentLength"] == len(data)
    return BigObject(b, "data/big.bin", data, sha256(data))


@pytest.fixture(scope="session")
def big_object(s3):
    """One 256 MiB object (multipart upload), its bytes kept for comparisons."""
    return fill_big_object(s3, create_bucket(s3, "big"))


@pytest.fixture(scope="session")
def azurite(session_dir):
    """Azurite's blob service (emulators.py) for the session: test_azure.py and
    test_store_emulators.py."""
    from emulators import Azurite

    a = Azurite(session_dir / "azurite").start()
    yield a
    a.stop()


@pytest.fixture(scope="session")
def gcs(session_dir):
    """fake-gcs-server (emulators.py) for the session: test_gcs.py and
    test_store_emulators.py."""
    from emulators import FakeGcs

    g = FakeGcs(session_dir / "fake-gcs").start()
    yield g
    g.stop()


# ------------------------------------------------------------------ the test pipeline (workflows/)

@pytest.fixture(scope="session")
def wf_data():
    """The ci data set on local disk (generated once, then cached under FLOWFS_DEPS_DIR);
    FLOWFS_WF_MODE=bench: the larger data of benchmark B7."""
    miss = [t for t in ("wgsim", "bgzip", "tabix") if shutil.which(t) is None]
    if miss:
        pytest.skip(f"{', '.join(miss)} missing: run `make workflow-deps`")
    return data_dir(os.environ.get("FLOWFS_WF_MODE", "ci"))


@pytest.fixture(scope="session")
def wf_bucket(s3, wf_data):
    """A bucket holding the inputs under data/."""
    b = create_bucket(s3, "workflows")
    upload_data(s3, b, wf_data, "data/")
    return b


@pytest.fixture(scope="session")
def local_reference(wf_data, session_dir):
    """The pipeline run by Nextflow on plain local disk: the records every other run must match."""
    need_tools("nextflow")
    d = session_dir / "wf-local-nextflow"
    run = run_engine(nextflow_cmd(wf_data, d / "work", d / "results"), cwd=d,
                     env=tool_env({"NXF_HOME": str(d / "nxf-home")}), timeout=ENGINE_TIMEOUT)
    assert run.ok, f"Nextflow on local disk failed: {run.describe()}"
    recs = vcf_records(d / "results" / "annotated.vcf.gz")
    assert len(recs) > 100, f"only {len(recs)} variant records: the data set or the pipeline is broken"
    print(f"\nlocal Nextflow run: {run.wall_s:.1f}s, {len(recs)} records")
    return recs
