"""Issue 30: flowfs on Google Cloud Storage, through a real FUSE mount of a fake-gcs-server
bucket (the GCS JSON API).

The same test functions as on SeaweedFS (imported below: the write mix compared with a
local directory, the kill -9 recovery, the read set, fsx, the fault proxy), with this
module's fixtures: `s3` is gcs_store.GcsS3 (the boto3 calls the helpers make, on the JSON
API), `bucket` a new bucket, `mount` mounts `gs://BUCKET[/PREFIX]` with
STORAGE_EMULATOR_HOST naming the emulator (or the proxy in front of it), `proxy` and
`fault_proxy` sit between the mount and the emulator (s3proxy.classify_gcs names GCS's
requests by the S3 operations they stand for). Selected by `pytest -m gcs`;
fake-gcs-server comes from scripts/setup.sh.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import FAULT_SEED, MountFactory, fill_big_object, fill_wide_dir
from faultproxy import FaultProxy
from flowfs_mount import is_mounted, mount_args, start_mount
from gcs_store import GcsS3
from helpers import MiB, payload, put_many, sha256
from metrics_helpers import GCS_GROUPS, report_matches_proxy
from copy_helpers import check_cp_copies_on_the_server, check_xattrs_survive_a_rename_and_a_remount
from s3proxy import CountingProxy
from test_cache_cli import cli, stats
from workflow_helpers import (
    assert_store_snakemake_matches,
    assert_store_snakemake_nothing_to_rerun,
    need_tools,
    store_snakemake,
    upload_data,
)

# The same bodies, run here on GCS (pytest collects them in this module, with its
# fixtures; the data fixtures of test_read come along, the session ones are redefined below).
from test_faults import full_only
from test_faults import test_read_set_under_faults as _read_set_under_faults
from test_faults import test_write_mix_under_faults as _write_mix_under_faults

test_read_set_under_faults = full_only(_read_set_under_faults)
test_write_mix_under_faults = full_only(_write_mix_under_faults)
from test_fsx import test_fsx_seeds  # noqa: F401
from test_read import (  # noqa: F401
    boundary_bucket,
    odd_bucket,
    prefix_bucket,
    test_big_object_random_preads_are_lazy,
    test_big_object_second_read_comes_from_cache,
    test_big_object_sequential_sha256,
    test_directory_shapes,
    test_missing_paths_are_enoent,
    test_odd_names_content,
    test_odd_names_listing,
    test_part_boundary_sizes_sha256,
    test_prefix_mount_shows_only_prefix,
    test_reads_across_block_boundaries,
    test_wide_directory_listdir_and_sizes,
    test_wide_directory_ls_l_issues_no_per_file_head,
)
from test_write_crash import test_kill_9_during_upload_then_remount_recovers as _kill_9_body
from test_links import test_cp_al_makes_a_linked_tree, test_links_made_before_the_upload_and_renamed  # noqa: F401
from test_write_mix import test_write_mix  # noqa: F401

pytestmark = pytest.mark.gcs

PARTS = ".flowfs-parts/"


@pytest.fixture(scope="session")
def s3(gcs):
    return GcsS3(gcs.url)


def _bucket(s3, hint: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:40].strip("-") or "t"
    name = re.sub("-+", "-", f"it-{base}-{secrets.token_hex(4)}")
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def bucket(s3, request):
    return _bucket(s3, request.node.name)


# conftest's session data, on GCS (module scope: conftest's would be S3's when the
# session ran S3 tests first).
@pytest.fixture(scope="module")
def wide_dir(s3):
    return fill_wide_dir(s3, _bucket(s3, "wide"))


@pytest.fixture(scope="module")
def big_object(s3):
    return fill_big_object(s3, _bucket(s3, "big"))


@pytest.fixture
def proxy(gcs):
    p = CountingProxy(gcs.url).start()
    yield p
    p.stop()


@pytest.fixture
def fault_proxy(gcs, request):
    p = FaultProxy(gcs.url, seed=FAULT_SEED).start()
    request.node._fault_proxy = p
    yield p
    p.stop()


def _host(url: str) -> str:
    return url.split("://", 1)[1]


class GcsMountFactory(MountFactory):
    """`mount(bucket, prefix=None, proxy=None, ...)`: gs://BUCKET[/PREFIX], with
    STORAGE_EMULATOR_HOST naming `proxy` when given, else the emulator."""

    def __init__(self, gcs, work_dir):
        super().__init__(None, work_dir)
        self.gcs = gcs

    def __call__(self, bucket, prefix=None, *, proxy=None, cache_dir=None, read_only=False,
                 foreground=False, extra=(), mountpoint=None, log_level=None):
        base = proxy.endpoint if proxy is not None else self.gcs.url
        source = f"gs://{bucket}" + (f"/{prefix}" if prefix else "")
        mp = mountpoint or self.new_mountpoint()
        env = dict(os.environ, STORAGE_EMULATOR_HOST=_host(base))
        if log_level is not None:
            env["FLOWFS_LOG"] = log_level
        m = start_mount(source, mp, work_dir=self.work_dir / f"run{len(self.mounts)}", env=env,
                        endpoint=None, cache_dir=cache_dir, read_only=read_only,
                        foreground=foreground, extra=extra)
        self.mounts.append(m)
        return m


@pytest.fixture
def mount(flowfs_binary, gcs, work_dir, request):  # noqa: ARG001 - flowfs_binary checks the path
    factory = GcsMountFactory(gcs, work_dir)
    request.node._flowfs_factory = factory
    yield factory
    factory.close_all()


def test_kill_9_during_upload_then_remount_recovers_and_leaves_no_parts(mount, bucket, s3):
    """test_write_crash's kill -9 in the middle of a 200 MiB upload (its parts are objects
    of their own on GCS), then: the recovery aborted the dead mount's uploads, so no part
    object is left in the bucket."""
    _kill_9_body(mount, bucket, s3)
    for m in mount.mounts:
        if is_mounted(m.path):
            r = m.unmount()
            assert r.returncode == 0, r.stderr
    left = [k for k in s3.all_keys(bucket) if k.startswith(PARTS)]
    assert not left, f"part objects left after the recovery: {left[:10]} ({len(left)})"


def test_a_big_file_is_composed_and_its_parts_are_deleted(mount, bucket, s3, proxy):
    """A 70 MiB file with --part-size 8M: 9 parts sent at once, one compose, one rewrite of
    it into the key, the parts then deleted; `.flowfs-parts/` never shows in the mount,
    and nothing of it stays."""
    data = payload(70 * MiB + 3, "gcs-big")
    m = mount(bucket, proxy=proxy)
    proxy.reset()
    (m / "out").mkdir()
    (m / "out/big.bin").write_bytes(data)
    assert PARTS.rstrip("/") not in os.listdir(m), os.listdir(m)
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    ops = proxy.stats.snapshot()["ops"]
    print(ops)
    assert ops.get("UPLOAD_PART") == 9 and ops.get("COMPLETE_MULTIPART") == 1, ops
    assert ops.get("CREATE_MULTIPART") == 1 and ops.get("COPY") == 1, ops
    assert sha256(s3.get_object(Bucket=bucket, Key="out/big.bin")["Body"].read()) == sha256(data)
    left = [k for k in s3.all_keys(bucket) if k.startswith(PARTS)]
    assert not left, left


def test_usage_report_counts_the_requests_the_proxy_saw(mount, bucket, proxy, work_dir):
    """Issue 31: the report of `flowfs unmount --report` counts each request by the
    store's own name for it, and its counts are the proxy's."""
    report_matches_proxy(mount(bucket, proxy=proxy, extra=["--part-size", "5M"]), proxy, work_dir,
                         GCS_GROUPS)


def test_requests_per_new_small_file(mount, bucket, s3, proxy):
    """Issue 30's target on GCS: B5's shape (new 400-byte files in a new directory, until
    durable) costs at most 1.1 requests per file, counted at the proxy from the first
    write to the end of `flowfs unmount`."""
    n = 200
    m = mount(bucket, proxy=proxy)
    proxy.reset()
    os.mkdir(m / "b5")
    for i in range(n):
        with open(m / f"b5/f{i:04d}.txt", "wb") as f:
            f.write(payload(400, f"b5-{i}"))
    r = m.unmount()
    assert r.returncode == 0, r.stderr
    ops = proxy.stats.snapshot()["ops"]
    total = sum(ops.values())
    per_file = total / n
    print(f"{n} new files: {total} requests ({per_file:.3f} per file): {ops}")
    assert per_file <= 1.1, f"{per_file:.3f} requests per new small file\n{proxy.stats.summary()}"
    listed = {k for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="b5/")
              for k in (o["Key"] for o in page["Contents"])}
    assert len([k for k in listed if not k.endswith("/")]) == n


def test_a_64k_pread_in_a_big_object_is_one_ranged_get_of_about_its_size(mount, big_object, proxy):
    """Issue 30's target: a 64 KiB pread in the middle of a big object is one ranged GET
    of about 64 KiB (no whole-part read-ahead on a random read)."""
    m = mount(big_object.bucket, proxy=proxy)
    size = os.stat(m / big_object.key).st_size
    proxy.reset()
    off = size // 2 + 12345
    with open(m / big_object.key, "rb") as f:
        got = os.pread(f.fileno(), 64 << 10, off)
    assert got == big_object.data[off:off + (64 << 10)]
    gets = proxy.count("GET", "GET_RANGE")
    print(proxy.stats.summary())
    assert gets == 1, proxy.stats.summary()
    assert proxy.stats.get_bytes <= 2 * (64 << 10), proxy.stats.summary()


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _mount_fails(flowfs_binary, source, env, work_dir, extra=()):  # noqa: ARG001
    mp = work_dir / "mp"
    mp.mkdir(exist_ok=True)
    home = work_dir / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            # reqsign's metadata-server step asks this instead of metadata.google.internal:
            # a closed loopback port, so nothing leaves the machine and the refusal is quick.
            "GCE_METADATA_HOST": _closed_port()}
    args = mount_args(source, mp, cache_dir=work_dir / "cache", log_file=work_dir / "m.log",
                      pid_file=None, endpoint=None, extra=extra)
    t0 = time.monotonic()
    r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                       env=base | env, check=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    return r.returncode, (lines[-1] if lines else ""), time.monotonic() - t0, r.stderr


def test_no_credentials_names_what_was_looked_for(flowfs_binary, work_dir):
    rc, line, took, _ = _mount_fails(flowfs_binary, "gs://b", {}, work_dir)
    assert rc == 1, line
    assert line.startswith("flowfs: ") and "GOOGLE_APPLICATION_CREDENTIALS" in line, line
    assert "gcloud auth application-default login" in line and "--anonymous" in line, line
    assert took < 15, f"took {took:.1f} s"


def test_a_missing_key_file_is_named_and_no_secret_printed(flowfs_binary, work_dir):
    bad = work_dir / "sa.json"
    secret = "-----BEGIN PRIVATE KEY-----\\nMIIBVwIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7AgEAAkEAq7BFUpkGp3+LQmlQ"
    bad.write_text('{"type": "service_account", "client_email": "x@y.iam.gserviceaccount.com", '
                   f'"private_key": "{secret}", "token_uri": "http://{_closed_port()}/token"}}')
    rc, line, took, err = _mount_fails(flowfs_binary, "gs://b", {"GOOGLE_APPLICATION_CREDENTIALS": str(bad)},
                                       work_dir)
    assert rc == 1, line
    assert "credentials" in line.lower() and "GOOGLE_APPLICATION_CREDENTIALS" in line, line
    assert "MIIBVwIBADAN" not in err, "the key is printed"
    log = work_dir / "m.log"
    assert not log.exists() or "MIIBVwIBADAN" not in log.read_text(errors="replace"), "the key is logged"
    assert took < 15, f"took {took:.1f} s"


def test_a_missing_bucket_is_named(flowfs_binary, gcs, work_dir):
    rc, line, _, _ = _mount_fails(flowfs_binary, "gs://no-such-bucket",
                                  {"STORAGE_EMULATOR_HOST": _host(gcs.url)}, work_dir)
    assert rc == 1, line
    assert "bucket no-such-bucket does not exist" in line, line


def test_anonymous_is_for_gs_sources_only(flowfs_binary, work_dir):
    rc, line, _, _ = _mount_fails(flowfs_binary, "s3://b", {}, work_dir, extra=["--anonymous"])
    assert rc == 1, line
    assert "--anonymous is for gs:// sources" in line, line


def test_anonymous_reaches_a_bucket_by_endpoint_url(flowfs_binary, gcs, s3, bucket, work_dir, mount):
    """--anonymous with --endpoint-url (no STORAGE_EMULATOR_HOST): requests go unsigned,
    no credential is looked for, and the bucket reads as it is."""
    put_many(s3, bucket, {"pub/a.txt": b"public\n"})
    mp = mount.new_mountpoint()
    env = {k: v for k, v in os.environ.items() if k != "STORAGE_EMULATOR_HOST"}
    env.update(HOME=str(work_dir), GCE_METADATA_HOST=_closed_port())
    m = start_mount(f"gs://{bucket}/pub", mp, work_dir=work_dir / "anon", env=env, endpoint=gcs.url,
                    cache_dir=None, read_only=True, foreground=False, extra=["--anonymous"])
    mount.mounts.append(m)
    assert (m / "a.txt").read_bytes() == b"public\n"


# ------------------------------------------------------------------ the Snakemake pipeline on GCS

@pytest.fixture(scope="module")
def gs_snakemake(flowfs_binary, gcs, s3, wf_data, session_dir):  # noqa: ARG001
    """test_workflows.py's Snakemake run on a GCS bucket (workflow_helpers.store_snakemake)."""
    need_tools("snakemake")
    b = _bucket(s3, "workflows")
    upload_data(s3, b, wf_data, "data/")
    base = Path(tempfile.mkdtemp(prefix="wf-snakemake-gs-", dir=session_dir))
    factory = GcsMountFactory(gcs, base)
    try:
        yield store_snakemake(factory, b, "GCS")
    finally:
        factory.close_all()


@pytest.mark.workflows
def test_snakemake_on_gcs_matches_local(gs_snakemake, local_reference):
    assert_store_snakemake_matches(gs_snakemake, local_reference)


@pytest.mark.workflows
def test_snakemake_on_gcs_nothing_to_rerun_after_remount(gs_snakemake, local_reference):
    assert_store_snakemake_nothing_to_rerun(gs_snakemake, local_reference)


# ------------------------------------------------------------------ flowfs cache and flowfs run on GCS

def test_prefetch_then_a_mount_reads_from_disk(mount, s3, bucket, proxy, work_dir):
    """`flowfs cache prefetch gs://B/KEY` fills the node cache, where a mount of the same
    bucket finds it (the cache knows the bucket as gs://B): no GET."""
    a = payload(5 * MiB + 17, "pf-a")
    put_many(s3, bucket, {"ref/a.fa": a})
    cache = work_dir / "warm"
    env = dict(os.environ, STORAGE_EMULATOR_HOST=_host(proxy.endpoint))
    r = cli(["prefetch", f"gs://{bucket}/ref/a.fa", "--cache-dir", str(cache)], env)
    assert r.returncode == 0, r.stderr
    assert f"gs://{bucket}/ref/a.fa" in r.stdout, r.stdout
    assert len(a) <= proxy.stats.get_bytes <= 1.1 * len(a)
    st = stats(cache, env)
    assert st["buckets"][f"gs://{bucket}"]["objects"] == 1, st["buckets"]
    proxy.reset()
    m = mount(bucket, proxy=proxy, cache_dir=cache)
    assert (m / "ref/a.fa").read_bytes() == a
    assert proxy.count("GET", "GET_RANGE") == 0, proxy.stats.summary()


def test_flowfs_run_with_a_gcs_mount(s3, bucket, work_dir, flowfs_binary, gcs):
    """`flowfs run --mount gs://B/work=DIR -- CMD`: the command's exit code comes back, and
    its outputs are in the bucket when flowfs run returns."""
    mnt = work_dir / "task"
    env = dict(os.environ, STORAGE_EMULATOR_HOST=_host(gcs.url))
    out = payload(9 * MiB + 5, "run-out")  # more than one part: a compose
    (work_dir / "out.bin").write_bytes(out)
    for code in (0, 3):
        cmd = [flowfs_binary, "run", "--mount", f"gs://{bucket}/work={mnt}", "--cache-dir", str(work_dir / "cache"),
               "--", "bash", "-c", f"mkdir -p {mnt}/t{code} && cp {work_dir}/out.bin {mnt}/t{code}/ "
                                   f"&& echo {code} > {mnt}/t{code}/.exitcode && exit {code}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == code, r.stderr
        got = s3.get_object(Bucket=bucket, Key=f"work/t{code}/out.bin")["Body"].read()
        assert sha256(got) == sha256(out)
        assert s3.get_object(Bucket=bucket, Key=f"work/t{code}/.exitcode")["Body"].read() == f"{code}\n".encode()
        assert not os.path.ismount(mnt)
    assert not [k for k in s3.all_keys(bucket) if k.startswith(PARTS)]


def test_cp_within_a_mount_is_a_copy_on_the_server(mount, bucket, s3, proxy):
    """Issue 49: `cp` of 64 MiB within the mount moves no byte of it through the node."""
    check_cp_copies_on_the_server(mount, bucket, s3, proxy, 64 * MiB)


def test_extended_attributes_survive_a_rename_and_a_remount(mount, bucket):
    """Issue 49: `user.*` attributes live in the object's metadata on this store too."""
    check_xattrs_survive_a_rename_and_a_remount(mount, bucket)
