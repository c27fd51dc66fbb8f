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

import pytest

from azure_store import AzureS3
from conftest import FAULT_SEED, WIDE_COUNT, BigObject, MountFactory, WideDir
from helpers import MiB, payload, put_many, sha256, upload_large
from emulators import AZURE_ACCOUNT, Azurite
from faultproxy import FaultProxy
from flowfs_mount import start_mount
from s3proxy import CountingProxy

# The same bodies, run here on Azure (pytest collects them in this module, with its
# fixtures; the data fixtures of test_read come along, the session ones are redefined below).
from test_faults import test_read_set_under_faults, test_write_mix_under_faults  # noqa: F401
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
from test_write_mix import test_write_mix  # noqa: F401

pytestmark = pytest.mark.azure


@pytest.fixture(scope="session")
def azurite(session_dir):
    a = Azurite(session_dir / "azurite").start()
    yield a
    a.stop()


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
    b = _container(s3, "wide")
    sizes = {f"f{i:05d}.dat": (i * 7919) % 4099 for i in range(WIDE_COUNT)}
    put_many(s3, b, {f"wide/{n}": payload(sz, n) for n, sz in sizes.items()}, threads=16)
    return WideDir(b, "wide/", sizes)


@pytest.fixture(scope="module")
def big_object(s3):
    b = _container(s3, "big")
    data = payload(256 * MiB, "big-256")
    upload_large(s3, b, "data/big.bin", data)
    assert s3.head_object(Bucket=b, Key="data/big.bin")["ContentLength"] == len(data)
    return BigObject(b, "data/big.bin", data, sha256(data))


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
