"""Issue 30: flowfs on Azure Blob, through a real FUSE mount of an Azurite container.

The same test functions as on SeaweedFS (imported below: the write mix compared with a
local directory, the kill -9 recovery, the read set), with this module's fixtures: `s3` is
azure_store.AzureS3 (the boto3 calls the helpers make, on azure-storage-blob), `bucket`
a new container, `mount` mounts `az://CONTAINER[/PREFIX]` with the development account's
AZURE_STORAGE_CONNECTION_STRING, `proxy` and `fault_proxy` sit between the mount and
Azurite (s3proxy.classify names Azure's requests by the S3 operations they stand for).
Selected by `pytest -m azure`; Azurite comes from scripts/setup.sh.
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

from azure_store import AzureS3
from conftest import FAULT_SEED, MountFactory, fill_big_object, fill_wide_dir
from helpers import MiB, payload, put_many, sha256
from emulators import AZURE_ACCOUNT, Azurite
from faultproxy import FaultProxy
from flowfs_mount import mount_args, start_mount
from metrics_helpers import AZURE_GROUPS, report_matches_proxy
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

# The same bodies, run here on Azure (pytest collects them in this module, with its
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
from test_write_crash import test_kill_9_during_upload_then_remount_recovers  # noqa: F401
from test_links import test_cp_al_makes_a_linked_tree, test_links_made_before_the_upload_and_renamed  # noqa: F401
from test_write_mix import test_write_mix  # noqa: F401

pytestmark = pytest.mark.azure


@pytest.fixture(scope="session")
def s3(azurite):
    return AzureS3(azurite.service())


def _container(s3, hint: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:40].strip("-") or "t"
    name = re.sub("-+", "-", f"it-{base}-{secrets.token_hex(4)}")
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def bucket(s3, request):
    return _container(s3, request.node.name)


# conftest's session data, on Azure (module scope: conftest's would be S3's when the
# session ran S3 tests first).
@pytest.fixture(scope="module")
def wide_dir(s3):
    return fill_wide_dir(s3, _container(s3, "wide"))


@pytest.fixture(scope="module")
def big_object(s3):
    return fill_big_object(s3, _container(s3, "big"))


@pytest.fixture
def proxy(azurite):
    p = CountingProxy(azurite.url).start()
    yield p
    p.stop()


@pytest.fixture
def fault_proxy(azurite, request):
    p = FaultProxy(azurite.url, seed=FAULT_SEED).start()
    request.node._fault_proxy = p
    yield p
    p.stop()


class AzureMountFactory(MountFactory):
    """`mount(container, prefix=None, proxy=None, ...)`: az://CONTAINER[/PREFIX], through
    `proxy` when given (its URL with the account's path as --endpoint-url)."""

    def __init__(self, azurite: Azurite, work_dir):
        super().__init__(None, work_dir)
        self.azurite = azurite

    def __call__(self, bucket, prefix=None, *, proxy=None, cache_dir=None, read_only=False,
                 foreground=False, extra=(), mountpoint=None, log_level=None):
        base = proxy.endpoint if proxy is not None else self.azurite.url
        endpoint = f"{base}/{AZURE_ACCOUNT}"
        source = f"az://{bucket}" + (f"/{prefix}" if prefix else "")
        mp = mountpoint or self.new_mountpoint()
        env = dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=self.azurite.connection_string)
        if log_level is not None:
            env["FLOWFS_LOG"] = log_level
        m = start_mount(source, mp, work_dir=self.work_dir / f"run{len(self.mounts)}", env=env,
                        endpoint=endpoint, cache_dir=cache_dir, read_only=read_only,
                        foreground=foreground, extra=extra)
        self.mounts.append(m)
        return m


@pytest.fixture
def mount(flowfs_binary, azurite, work_dir, request):  # noqa: ARG001 - flowfs_binary checks the path
    factory = AzureMountFactory(azurite, work_dir)
    request.node._flowfs_factory = factory
    yield factory
    factory.close_all()


def test_usage_report_counts_the_requests_the_proxy_saw(mount, bucket, proxy, work_dir):
    """Issue 31: the report of `flowfs unmount --report` counts each request by the
    store's own name for it, and its counts are the proxy's."""
    report_matches_proxy(mount(bucket, proxy=proxy, extra=["--part-size", "5M"]), proxy, work_dir,
                         AZURE_GROUPS)


def test_requests_per_new_small_file(mount, bucket, s3, proxy):
    """Issue 30's target on Azure: B5's shape (new 400-byte files in a new directory, until
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


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metadata/identity/oauth2/token"


def _mount_fails(flowfs_binary, source, env, work_dir, extra=()):
    mp = work_dir / "mp"
    mp.mkdir(exist_ok=True)
    home = work_dir / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            # reqsign's managed-identity step asks this instead of 169.254.169.254: a closed
            # loopback port, so nothing leaves the machine and the refusal is immediate.
            "AZURE_IMDS_ENDPOINT": _closed_port_url()}
    args = mount_args(source, mp, cache_dir=work_dir / "cache", log_file=work_dir / "m.log",
                      pid_file=None, endpoint=None, extra=extra)
    t0 = time.monotonic()
    r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                       env=base | env, check=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    return r.returncode, (lines[-1] if lines else ""), time.monotonic() - t0, r.stderr


def test_no_account_names_what_to_set(flowfs_binary, work_dir):
    rc, line, took, _ = _mount_fails(flowfs_binary, "az://c", {}, work_dir)
    assert rc == 1, line
    assert line.startswith("flowfs: ") and "AZURE_STORAGE_CONNECTION_STRING" in line, line
    assert "--azure-account" in line and "AZURE_STORAGE_KEY" in line, line
    assert took < 15


def test_an_account_without_any_credential_names_what_was_looked_for(flowfs_binary, work_dir):
    rc, line, took, _ = _mount_fails(flowfs_binary, "az://c", {}, work_dir, extra=["--azure-account", "acct"])
    assert rc == 1, line
    assert "credentials" in line and "AZURE_STORAGE_CONNECTION_STRING" in line, line
    assert took < 15, f"took {took:.1f} s"


def test_a_wrong_key_is_access_denied_and_never_printed(flowfs_binary, azurite, bucket, work_dir):
    wrong = "d3JvbmcgYnV0IHdlbGwtZm9ybWVkIGtleSBmb3IgdGhlIHRlc3Q="
    cs = azurite.connection_string.replace(azurite.connection_string.split("AccountKey=")[1].split(";")[0], wrong)
    rc, line, _, err = _mount_fails(flowfs_binary, f"az://{bucket}", {"AZURE_STORAGE_CONNECTION_STRING": cs},
                                    work_dir)
    assert rc == 1, line
    assert "access to container" in line and "denied" in line, line
    log = work_dir / "m.log"
    assert wrong not in err, "the key is printed"
    assert not log.exists() or wrong not in log.read_text(errors="replace"), "the key is logged"


def test_a_missing_container_is_named(flowfs_binary, azurite, work_dir):
    rc, line, _, _ = _mount_fails(flowfs_binary, "az://no-such-container",
                                  {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string}, work_dir)
    assert rc == 1, line
    assert "container no-such-container does not exist" in line, line


# ------------------------------------------------------------------ the Snakemake pipeline on Azure

@pytest.fixture(scope="module")
def az_snakemake(flowfs_binary, azurite, s3, wf_data, session_dir):  # noqa: ARG001
    """test_workflows.py's Snakemake run on an Azure container (workflow_helpers.store_snakemake)."""
    need_tools("snakemake")
    b = _container(s3, "workflows")
    upload_data(s3, b, wf_data, "data/")
    base = Path(tempfile.mkdtemp(prefix="wf-snakemake-az-", dir=session_dir))
    factory = AzureMountFactory(azurite, base)
    try:
        yield store_snakemake(factory, b, "Azure")
    finally:
        factory.close_all()


@pytest.mark.workflows
def test_snakemake_on_azure_matches_local(az_snakemake, local_reference):
    assert_store_snakemake_matches(az_snakemake, local_reference)


@pytest.mark.workflows
def test_snakemake_on_azure_nothing_to_rerun_after_remount(az_snakemake, local_reference):
    assert_store_snakemake_nothing_to_rerun(az_snakemake, local_reference)


# ------------------------------------------------------------------ flowfs cache and flowfs run on Azure

def test_prefetch_then_a_mount_reads_from_disk(mount, s3, bucket, proxy, work_dir, azurite):
    """`flowfs cache prefetch az://C/KEY` fills the node cache, where a mount of the same
    container finds it (the cache knows the container as az://ACCOUNT/C): no GET."""
    a = payload(5 * MiB + 17, "pf-a")
    put_many(s3, bucket, {"ref/a.fa": a})
    cache = work_dir / "warm"
    env = dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string)
    r = cli(["prefetch", f"az://{bucket}/ref/a.fa", "--cache-dir", str(cache),
             "--endpoint-url", f"{proxy.endpoint}/{AZURE_ACCOUNT}"], env)
    assert r.returncode == 0, r.stderr
    assert f"az://{bucket}/ref/a.fa" in r.stdout, r.stdout
    assert len(a) <= proxy.stats.get_bytes <= 1.1 * len(a)
    st = stats(cache, env)
    assert st["buckets"][f"az://{AZURE_ACCOUNT}/{bucket}"]["objects"] == 1, st["buckets"]
    proxy.reset()
    m = mount(bucket, proxy=proxy, cache_dir=cache)
    assert (m / "ref/a.fa").read_bytes() == a
    assert proxy.count("GET", "GET_RANGE") == 0, proxy.stats.summary()


def test_flowfs_run_with_an_azure_mount(s3, bucket, work_dir, flowfs_binary, azurite):
    """`flowfs run --mount az://C/work=DIR -- CMD`: the command's exit code comes back, and
    its outputs are in the container when flowfs run returns."""
    mnt = work_dir / "task"
    env = dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=azurite.connection_string)
    out = payload(9 * MiB + 5, "run-out")  # more than one part: a block list
    (work_dir / "out.bin").write_bytes(out)
    for code in (0, 3):
        cmd = [flowfs_binary, "run", "--mount", f"az://{bucket}/work={mnt}", "--cache-dir", str(work_dir / "cache"),
               "--", "bash", "-c", f"mkdir -p {mnt}/t{code} && cp {work_dir}/out.bin {mnt}/t{code}/ "
                                   f"&& echo {code} > {mnt}/t{code}/.exitcode && exit {code}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == code, r.stderr
        got = s3.get_object(Bucket=bucket, Key=f"work/t{code}/out.bin")["Body"].read()
        assert sha256(got) == sha256(out)
        assert s3.get_object(Bucket=bucket, Key=f"work/t{code}/.exitcode")["Body"].read() == f"{code}\n".encode()
        assert not os.path.ismount(mnt)


def test_a_part_size_above_azures_largest_block_is_refused(flowfs_binary, azurite, bucket, work_dir):
    rc, line, _, _ = _mount_fails(flowfs_binary, f"az://{bucket}",
                                  {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string}, work_dir,
                                  extra=["--part-size", "4G"])
    assert rc == 1, line
    assert "--part-size" in line and "4000M" in line, line


def test_cp_within_a_mount_is_a_copy_on_the_server(mount, bucket, s3, proxy):
    """Issue 49: `cp` of 64 MiB within the mount moves no byte of it through the node."""
    check_cp_copies_on_the_server(mount, bucket, s3, proxy, 64 * MiB)


def test_extended_attributes_survive_a_rename_and_a_remount(mount, bucket):
    """Issue 49: `user.*` attributes live in the object's metadata on this store too."""
    check_xattrs_survive_a_rename_and_a_remount(mount, bucket)
