"""What the metrics and usage-report tests share (tests/integration/test_metrics.py and the
GCS and Azure suites): a workload that sends every kind of request, and the proxy's
classes of requests by the names flowfs counts them under on each store."""

from __future__ import annotations

import os
from pathlib import Path

import s3proxy
from helpers import payload, sha256

MiB = 1 << 20

# The proxy's classes of S3 requests, by the SDK's operation names flowfs counts.
S3_OPS: dict[str, tuple[str, ...]] = {
    "GetObject": (s3proxy.GET, s3proxy.GET_RANGE),
    "HeadObject": (s3proxy.HEAD,),
    "ListObjectsV2": (s3proxy.LIST,),
    "PutObject": (s3proxy.PUT,),
    "CopyObject": (s3proxy.COPY,),
    "CreateMultipartUpload": (s3proxy.CREATE_MULTIPART,),
    "UploadPart": (s3proxy.UPLOAD_PART,),
    "CompleteMultipartUpload": (s3proxy.COMPLETE_MULTIPART,),
    "AbortMultipartUpload": (s3proxy.ABORT_MULTIPART,),
    "ListMultipartUploads": (s3proxy.LIST_MULTIPART,),
    "DeleteObject": (s3proxy.DELETE,),
}


def proxy_counts(proxy) -> dict[str, int]:
    """The proxy's counts by flowfs's op names; a class flowfs never sends fails the test."""
    snap = proxy.stats.snapshot()["ops"]
    known = {c for classes in S3_OPS.values() for c in classes}
    assert set(snap) <= known, f"requests of a kind not mapped here: {snap}"
    out = {op: sum(snap.get(c, 0) for c in classes) for op, classes in S3_OPS.items()}
    return {op: n for op, n in out.items() if n}



S3_GROUPS = [((op,), classes) for op, classes in S3_OPS.items()]

# GCS and Azure: groups of flowfs's op names and the proxy's classes they fall in
# (s3proxy.classify_gcs / classify_azure name a request by the S3 operation it stands for).
GCS_GROUPS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("objects.get",), (s3proxy.GET, s3proxy.GET_RANGE)),
    (("objects.getMetadata",), (s3proxy.HEAD,)),
    (("objects.list", "buckets.get"), (s3proxy.LIST,)),
    (("objects.insert",), (s3proxy.PUT, s3proxy.UPLOAD_PART, s3proxy.CREATE_MULTIPART)),
    (("objects.compose",), (s3proxy.COMPLETE_MULTIPART,)),
    (("objects.rewrite", "objects.update"), (s3proxy.COPY,)),
    (("objects.delete",), (s3proxy.DELETE,)),
]
AZURE_GROUPS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("GetBlob",), (s3proxy.GET, s3proxy.GET_RANGE)),
    (("GetBlobProperties",), (s3proxy.HEAD,)),
    (("ListBlobs",), (s3proxy.LIST,)),
    (("PutBlob",), (s3proxy.PUT,)),
    (("PutBlock",), (s3proxy.UPLOAD_PART,)),
    (("PutBlockList",), (s3proxy.COMPLETE_MULTIPART,)),
    (("GetBlockList",), (s3proxy.LIST_MULTIPART,)),
    (("SetBlobMetadata", "CopyBlob"), (s3proxy.COPY,)),
    (("DeleteBlob",), (s3proxy.DELETE,)),
    (("GetContainerProperties",), (s3proxy.BUCKET_OTHER,)),
    (("CreateContainer",), (s3proxy.CREATE_BUCKET,)),
]


def grouped(requests: dict[str, int], proxy, groups) -> tuple[dict, dict]:
    """(flowfs's counts, the proxy's) summed by group; an op or a class outside every
    group fails the test."""
    snap = proxy.stats.snapshot()["ops"]
    ops = {o for g, _ in groups for o in g}
    classes = {c for _, cs in groups for c in cs}
    assert set(requests) <= ops, f"ops not mapped here: {set(requests) - ops}"
    assert set(snap) <= classes, f"proxy classes not mapped here: {set(snap) - classes}"
    mine = {g[0]: sum(requests.get(o, 0) for o in g) for g, _ in groups}
    seen = {g[0]: sum(snap.get(c, 0) for c in cs) for g, cs in groups}
    return mine, seen


def workload(root: Path) -> dict[str, str]:
    """Small files, a multipart file, reads, a listing, a rename and a delete."""
    want = {}
    (root / "d").mkdir()
    for i in range(12):
        data = payload(3000 + i, f"small{i}")
        (root / "d" / f"f{i}.txt").write_bytes(data)
        want[f"d/f{i}.txt"] = sha256(data)
    big = payload(12 * MiB + 5, "big")
    (root / "big.bin").write_bytes(big)
    want["big.bin"] = sha256(big)
    os.rename(root / "d" / "f0.txt", root / "d" / "g0.txt")
    want["d/g0.txt"] = want.pop("d/f0.txt")
    os.unlink(root / "d" / "f1.txt")
    del want["d/f1.txt"]
    assert sorted(os.listdir(root / "d")) == sorted(k[2:] for k in want if k.startswith("d/"))
    return want


def check_read(root: Path, want: dict[str, str]) -> None:
    for k, h in want.items():
        assert sha256((root / k).read_bytes()) == h, k


def report_matches_proxy(m, proxy, work_dir: Path, groups) -> dict:
    """Runs the workload on mount `m` (behind `proxy`), unmounts it with `--report`, and
    checks that the report's requests are the proxy's, group by group and in all."""
    import json
    import subprocess

    from flowfs_mount import flowfs_bin

    want = workload(m.path)
    check_read(m.path, want)
    report = work_dir / "flowfs-report.json"
    r = subprocess.run([flowfs_bin(), "unmount", str(m.path), "--report", str(report)],
                       capture_output=True, text=True, timeout=120, env=m.env, check=False)
    assert r.returncode == 0, r.stderr
    u = json.loads(report.read_text())
    mine, seen = grouped(u["requests"], proxy, groups)
    assert mine == seen, proxy.stats.summary()
    assert sum(u["requests"].values()) == proxy.stats.snapshot()["requests"]
    assert u["cost_usd"] > 0 and not u["cost"]["unpriced"], u["cost"]
    return u
