"""Issue 14: the test pipeline (workflows/) under a failing object store.

Nextflow (`-w` on flowfs) or Snakemake (`--directory` on flowfs) runs with both its inputs
(a read-only mount) and its work directory mounted through the fault proxy, with the faults
of a level switched on once the mounts are up (the levels of test_faults.py: 5 % or 20 %
503 SlowDown, resets, 2 s stalls). The run must succeed (no task may see an error), give the
records of the run on local disk, and `flowfs unmount` must exit 0 with the final VCF in the
bucket as boto3 reads it straight from the server. Then the server itself is stopped for
30 s in the middle of a Nextflow run and started again: the run must complete the same.

CI runs Nextflow at 20 % and Snakemake at 5 %, and the outage with Nextflow; the rest of the
matrix runs with FLOWFS_FAULTS_FULL=1 (`make test-faults`). FLOWFS_WF_FAULT_REPEAT=N runs each
case N times (the issue's target is 20 at 20 %).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import MountFactory, create_bucket
from fault_helpers import MOUNT_EXTRA, UNMOUNT_TIMEOUT, assert_faults_injected, level_rates
from faultproxy import FaultProxy
from workflow_helpers import (ENGINE_TIMEOUT, EngineRun, diff_records, need_tools, nextflow_cmd, run_engine,
                              snakemake_cmd, tool_env, upload_data, vcf_records, vcf_records_bytes)
from write_helpers import restart_same_ports

pytestmark = [pytest.mark.workflows]

FULL = os.environ.get("FLOWFS_FAULTS_FULL") == "1"
REPEAT = int(os.environ.get("FLOWFS_WF_FAULT_REPEAT", "1"))
# CI runs one case per engine, each at the level that costs it less time: Nextflow at 20 %
# took 172 s of CI (JVM start-ups each waiting out stalls), Snakemake at 20 % 133 s and at
# 5 % 52 s. Both levels of both engines run in `make test-faults`.
IN_CI = {("nextflow", "5pct"), ("snakemake", "5pct")}
OUTAGE = 30.0  # seconds the server is down
SEED = int(os.environ.get("FLOWFS_FAULT_SEED", "14"))


@dataclass
class PipelineRun:
    engine: str
    run: EngineRun
    records: list[str] | None  # of the final VCF, read through the mount before the unmount
    vcf_key: str  # where the final VCF is in the bucket
    unmount_rc: int | None
    unmount_err: str


def _vcf_key(engine: str, s3, bucket: str, prefix: str) -> str:
    if engine == "snakemake":
        return f"{prefix}/results/annotated.vcf.gz"
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
            for o in page.get("Contents", []) if o["Key"].endswith("/annotated.vcf.gz")]
    return keys[0] if len(keys) == 1 else f"<{len(keys)} annotated.vcf.gz under {prefix}/>"


def start_pipeline(engine: str, factory: MountFactory, bucket: str, prefix: str, proxy=None) -> tuple:
    """Mounts the inputs and a work prefix; returns (command, cwd, env, work mount, final VCF path)."""
    data = factory(bucket, "data", proxy=proxy, read_only=True, extra=MOUNT_EXTRA)
    work = factory(bucket, prefix, proxy=proxy, extra=MOUNT_EXTRA)
    launch = factory.work_dir / f"launch-{prefix}"
    if engine == "nextflow":
        cmd = nextflow_cmd(data.path, work.path, launch / "results")
        return cmd, launch, tool_env({"NXF_HOME": str(launch / "nxf-home")}), work, launch / "results/annotated.vcf.gz"
    return snakemake_cmd(data.path, work.path), launch, tool_env(), work, work.path / "results/annotated.vcf.gz"


def finish_pipeline(engine: str, run: EngineRun, work, vcf: Path, s3, bucket: str, prefix: str) -> PipelineRun:
    records = vcf_records(vcf) if run.ok and vcf.exists() else None
    rc, err = None, ""
    if run.ok:
        um = work.unmount(timeout=UNMOUNT_TIMEOUT + 60)
        rc, err = um.returncode, um.stderr.strip()[-3000:]
    return PipelineRun(engine, run, records, _vcf_key(engine, s3, bucket, prefix), rc, err)


def check_run(r: PipelineRun, reference: list[str], s3, bucket: str, what: str) -> None:
    assert r.run.ok, f"{what}: {r.engine} failed: {r.run.describe()}"
    assert r.records == reference, f"{what}: the final VCF differs: {diff_records(r.records or [], reference)}"
    assert r.unmount_rc == 0, f"{what}: flowfs unmount exited {r.unmount_rc}: {r.unmount_err}"
    try:  # unmount exit 0 implies the outputs are in the bucket, right
        body = s3.get_object(Bucket=bucket, Key=r.vcf_key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        pytest.fail(f"{what}: unmount exited 0 but {r.vcf_key} is not in the bucket")
    got = vcf_records_bytes(body)
    assert got == reference, f"{what}: the VCF in the bucket differs: {diff_records(got, reference)}"


def _cases() -> list:
    out = []
    for engine in ("nextflow", "snakemake"):
        for level in ("5pct", "20pct"):
            marks = [] if FULL or (engine, level) in IN_CI else [
                pytest.mark.skip(reason="runs with FLOWFS_FAULTS_FULL=1 (make test-faults)")]
            out.append(pytest.param(engine, level, id=f"{engine}-{level}", marks=marks))
    return out


@pytest.mark.timeout(ENGINE_TIMEOUT * REPEAT + 600)
@pytest.mark.parametrize("engine,level", _cases())
def test_pipeline_under_faults(engine, level, seaweed, wf_bucket, local_reference, s3, work_dir, request):
    need_tools(engine)
    factory = MountFactory(seaweed, work_dir)
    request.node._flowfs_factory = factory
    walls = []
    try:
        for i in range(REPEAT):
            proxy = FaultProxy(seaweed.endpoint, seed=SEED + i).start()
            request.node._fault_proxy = proxy
            try:
                prefix = f"faults-{engine}-{level}-{i}"
                cmd, cwd, env, work, vcf = start_pipeline(engine, factory, wf_bucket, prefix, proxy)
                proxy.set_faults(level_rates(level))
                run = run_engine(cmd, cwd=cwd, env=env, timeout=ENGINE_TIMEOUT)
                r = finish_pipeline(engine, run, work, vcf, s3, wf_bucket, prefix)
                print(f"\n{engine} at {level}, run {i + 1}/{REPEAT}: {run.wall_s:.1f}s; {proxy.fault_summary()}")
                check_run(r, local_reference, s3, wf_bucket, f"{engine} at {level}, run {i + 1}/{REPEAT}")
                assert_faults_injected(proxy)
                walls.append(run.wall_s)
            finally:
                factory.close_all()
                proxy.stop()
    finally:
        factory.close_all()
    print(f"{engine} at {level}: {len(walls)} of {REPEAT} runs passed; wall times {[round(w) for w in walls]}")


# ------------------------------------------------------------------ the server stopped mid-pipeline


def _wait_for_line(log: Path, text: str, done: threading.Event, timeout: float) -> bool:
    """Polls the engine's log (a local file: no event to wait on) until `text` is in it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done.is_set():
        if log.exists() and text in log.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def _outage_cases() -> list:
    return [pytest.param(e, id=e, marks=[] if FULL or e == "nextflow" else [
        pytest.mark.skip(reason="runs with FLOWFS_FAULTS_FULL=1 (make test-faults)")]) for e in ("nextflow", "snakemake")]


# The moment: once the alignment's output is being sorted, with the calls still to come.
MID = {"nextflow": "Submitted process > SORT", "snakemake": "rule sort:"}


@pytest.mark.timeout(ENGINE_TIMEOUT + 600)
@pytest.mark.parametrize("engine", _outage_cases())
def test_pipeline_server_stopped_mid_run(engine, wf_data, local_reference, own_server):
    need_tools(engine)
    server, factory = own_server
    s3 = server.client()
    bucket = create_bucket(s3, "wf-outage")
    upload_data(s3, bucket, wf_data, "data/")
    cmd, cwd, env, work, vcf = start_pipeline(engine, factory, bucket, "work")
    box, done = {}, threading.Event()

    def engine_thread():
        box["run"] = run_engine(cmd, cwd=cwd, env=env, timeout=ENGINE_TIMEOUT)
        done.set()

    threading.Thread(target=engine_thread, name="engine", daemon=True).start()
    assert _wait_for_line(cwd / "engine.log", MID[engine], done, 600), \
        f"{engine} never reached {MID[engine]!r} (finished: {done.is_set()})"
    server.stop()
    t_down = time.monotonic()
    time.sleep(OUTAGE)  # the outage is a timed scenario: nothing to await
    still_running = not done.is_set()
    restart_same_ports(server)
    print(f"\nserver down {time.monotonic() - t_down:.1f}s; {engine} still running at restart: {still_running}")
    assert done.wait(ENGINE_TIMEOUT + 60), f"{engine} did not finish"
    r = finish_pipeline(engine, box["run"], work, vcf, s3, bucket, "work")
    check_run(r, local_reference, s3, bucket, f"{engine}, server stopped for {OUTAGE:.0f}s")
    assert still_running, f"{engine} finished during the outage: the outage was not mid-run"
