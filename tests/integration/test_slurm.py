"""Pipelines on a two-node Slurm cluster, one bucket, each node its own flowfs mount (issue 32).

    make test-slurm                    # installs Slurm and munge (apt), builds dist/flowfs, runs these
    python3 -m pytest tests/integration -m slurm -v

The cluster (slurm_cluster.py): slurmctld and two slurmd daemons, n1 and n2, on this host,
each slurmd in a mount namespace of its own where that node's flowfs mounts s3://B/data
(read-only) and s3://B/slurm-work at the same two paths the head uses, with the node's own
cache dir and control-socket directory (XDG_RUNTIME_DIR), as on separate machines. The head
(this process's namespace) mounts the same two prefixes at the same paths and runs
Nextflow with the slurm executor there: `-w` on the work mount, the launch dir local. Jobs
land on n1 and n2, read their inputs and write their outputs through their node's mount;
the head reads `.exitcode` and the outputs through its own.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import MountFactory
from seaweed import clean_env
from slurm_cluster import NODES, SlurmCluster
from workflow_helpers import (ENGINE_TIMEOUT, EngineRun, diff_records, need_tools, nextflow_cmd, run_engine,
                              snakemake_bin, snakemake_cmd, tool_env, vcf_records)

pytestmark = [pytest.mark.slurm]

SLURM_CONFIG = """\
// The test pipeline on the test cluster: every task a Slurm job in partition main.
process.executor = 'slurm'
process.queue = 'main'
executor {
    name = 'slurm'
    queueSize = 8
    pollInterval = '500 ms'
    queueStatInterval = '1 sec'
}
"""


def need_cluster() -> None:
    miss = [t for t in ("slurmctld", "slurmd", "sbatch", "squeue", "munged", "unshare", "nsenter")
            if shutil.which(t) is None]
    if miss:
        pytest.skip(f"{', '.join(miss)} missing: run `make test-slurm` (installs slurmctld, slurmd, "
                    "slurm-client and munge from Debian)")


@dataclass
class SlurmRun:
    run: EngineRun
    records: list[str] | None
    jobs: list[dict[str, str]]
    log: str  # what the engine left to read on failure: .nextflow.log, or Snakemake's job logs
    local: EngineRun | None = None  # the same pipeline with -w on the head's local disk
    resumed: EngineRun | None = None  # -resume from a fresh head mount
    resumed_jobs: list[dict[str, str]] | None = None
    unmount_rc: int | None = None
    site: "Site | None" = None  # the cluster and mounts, still up while the module's tests run


def _node_setup(flowfs: str, bucket: str, site: "Site", node: str, extra: str) -> str:
    nd = site.base / node
    opts = f"{extra} --cache-dir {nd / 'cache'}".strip()
    return "\n".join([
        f"export XDG_RUNTIME_DIR={nd / 'run'}",
        f"mkdir -p {nd / 'run'} {nd / 'cache'}",
        f"{flowfs} mount s3://{bucket}/data {site.data} --read-only {opts} --log-file {nd / 'data.log'}",
        f"{flowfs} mount s3://{bucket}/{site.prefix} {site.work} {opts} --log-file {nd / 'work.log'}",
    ])


@dataclass
class Site:
    """A cluster with flowfs mounts of s3://B/data (read-only) at `data` and s3://B/PREFIX at
    `work`, on both nodes and on the head (`head`: the head's work Mount)."""
    base: Path
    prefix: str
    cluster: SlurmCluster | None = None
    factory: MountFactory | None = None
    head: object = None

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def work(self) -> Path:
        return self.base / "work"

    def launch(self, name: str = "launch", extra_config: str = "") -> tuple[Path, Path, dict[str, str]]:
        """A local launch dir with the slurm config: (dir, config, the engine's env)."""
        d = self.base / name
        d.mkdir()
        cfg = d / "slurm.config"
        cfg.write_text(SLURM_CONFIG + extra_config)
        return d, cfg, tool_env({"NXF_HOME": str(d / "nxf-home"), "SLURM_CONF": str(self.cluster.conf)})


@contextmanager
def cluster_site(name: str, flowfs: str, seaweed, bucket: str, session_dir: Path, *, prefix: str = "slurm-work",
                 proxy=None, extra: tuple[str, ...] = (), epilog: str | None = None):
    """Starts the cluster with the nodes' mounts, then mounts the head; at the end unmounts
    the head, then each node's mounts (`--force`: a killed mount has nothing to flush) and
    stops every daemon."""
    need_cluster()
    site = Site(Path(tempfile.mkdtemp(prefix=f"{name}-", dir=session_dir)), prefix)
    site.data.mkdir()
    site.work.mkdir()
    site.cluster = SlurmCluster(site.base / "cluster")
    site.factory = MountFactory(seaweed, site.base / "head")
    endpoint = proxy.endpoint if proxy is not None else None
    setup = {n: _node_setup(flowfs, bucket, site, n, " ".join(extra)) for n in NODES}
    script = None
    if epilog is not None:
        script = site.base / "epilog.sh"
        script.write_text(epilog.format(base=site.base, flowfs=flowfs, work=site.work))
        script.chmod(0o755)
    try:
        site.cluster.start(setup=setup, node_env={n: clean_env(seaweed.env(endpoint)) for n in NODES},
                           epilog=str(script) if script else None)
        site.factory(bucket, "data", read_only=True, mountpoint=site.data, proxy=proxy, extra=extra)
        site.head = site.factory(bucket, prefix, mountpoint=site.work, proxy=proxy, extra=extra)
        yield site
    finally:
        site.factory.close_all()
        unmount = {}
        for n in NODES:
            rt = site.base / n / "run"
            unmount[n] = ["sh", "-c", f"XDG_RUNTIME_DIR={rt} {flowfs} unmount {site.work} || "
                                      f"XDG_RUNTIME_DIR={rt} {flowfs} unmount --force {site.work}; "
                                      f"XDG_RUNTIME_DIR={rt} {flowfs} unmount {site.data}"]
        site.cluster.stop(before=unmount)


def _warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"\b(WARN|ERROR)\b", line)]


@pytest.fixture(scope="module")
def slurm_nextflow(flowfs_binary, seaweed, wf_bucket, wf_data, session_dir):  # noqa: ARG001
    need_tools("nextflow")
    with cluster_site("slurm", flowfs_binary, seaweed, wf_bucket, session_dir) as site:
        cluster, data, work = site.cluster, site.data, site.work
        launch, cfg, env = site.launch()
        run = run_engine(nextflow_cmd(data, work, launch / "results", extra=["-c", str(cfg)]), cwd=launch, env=env,
                         timeout=ENGINE_TIMEOUT)
        print(f"\nNextflow on 2 Slurm nodes, -w on flowfs: {run.wall_s:.1f}s")
        vcf = launch / "results" / "annotated.vcf.gz"
        records = vcf_records(vcf) if run.ok and vcf.exists() else None
        log = (launch / ".nextflow.log").read_text(errors="replace") if (launch / ".nextflow.log").exists() else ""
        r = SlurmRun(run, records, cluster.jobs(), log, site=site)
        if run.ok:
            # The same pipeline with -w on the head's local disk, which both nodes see (the
            # NFS user's setup), in the same run: the wall-time peer.
            local, _, local_env = site.launch("launch-local")
            r.local = run_engine(nextflow_cmd(data, site.base / "local-work", local / "results", extra=["-c", str(cfg)]),
                                 cwd=local, env=local_env, timeout=ENGINE_TIMEOUT)
            print(f"Nextflow on 2 Slurm nodes, -w on local disk: {r.local.wall_s:.1f}s")
            # -resume from a fresh head mount (new cache dir): every task found complete.
            r.unmount_rc = site.head.unmount(timeout=300).returncode
            before = len(cluster.jobs())
            site.factory(wf_bucket, site.prefix, mountpoint=work)
            r.resumed = run_engine(nextflow_cmd(data, work, launch / "results", extra=["-c", str(cfg), "-resume"]),
                                   cwd=launch, env=env, timeout=ENGINE_TIMEOUT, log=launch / "resume.log")
            r.resumed_jobs = cluster.jobs()[before:]
        yield r


def test_nextflow_on_two_slurm_nodes_matches_local(slurm_nextflow, local_reference):
    r = slurm_nextflow
    assert r.run.ok, f"Nextflow on Slurm with -w on flowfs failed: {r.run.describe()}"
    assert r.records == local_reference, diff_records(r.records or [], local_reference)


def test_tasks_ran_on_both_nodes_and_none_failed(slurm_nextflow):
    r = slurm_nextflow
    assert r.run.ok, "the Slurm run failed (see test_nextflow_on_two_slurm_nodes_matches_local)"
    nodes = {j.get("NodeList") for j in r.jobs}
    assert {"n1", "n2"} <= nodes, f"jobs ran on {nodes}: {r.jobs}"
    bad = [j for j in r.jobs if j.get("JobState") != "COMPLETED" or j.get("ExitCode") != "0:0"]
    assert not bad, bad
    # No task waited for its .exitcode or an output the head could not see yet, none retried.
    warnings = _warnings(r.log)
    assert not warnings, "\n".join(warnings[:20])
    submitted = len(re.findall(r"Submitted process > ", r.run.output))
    assert submitted == len(r.jobs), (submitted, len(r.jobs))


def test_resume_from_a_fresh_head_mount_caches_every_task(slurm_nextflow):
    r = slurm_nextflow
    assert r.run.ok and r.unmount_rc == 0, f"the Slurm run or its head's unmount failed: {r.unmount_rc}"
    assert r.resumed is not None and r.resumed.ok, r.resumed.describe() if r.resumed else "not run"
    assert r.resumed_jobs == [], f"-resume submitted jobs again: {r.resumed_jobs}"
    cached = len(re.findall(r"Cached process > ", r.resumed.output))
    assert cached == len(r.jobs), f"{cached} tasks cached of {len(r.jobs)}:\n{r.resumed.output[-3000:]}"


def test_wall_time_against_a_shared_local_work_dir(slurm_nextflow, local_reference):
    """Target (issue 32): within 1.15x the same pipeline on the same cluster with -w on the
    head's local disk (what an NFS user has), in the same run."""
    r = slurm_nextflow
    assert r.local is not None and r.local.ok, r.local.describe() if r.local else "not run"
    ratio = r.run.wall_s / r.local.wall_s
    print(f"\nSlurm, -w on flowfs {r.run.wall_s:.1f}s vs local disk {r.local.wall_s:.1f}s: {ratio:.2f}x")
    assert ratio <= 1.15, f"{ratio:.2f}x the local-disk run"


def _repeats() -> int:
    raw = os.environ.get("FLOWFS_SLURM_REPEAT", "5")
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"FLOWFS_SLURM_REPEAT={raw!r}: give a number of runs, 1 or more")
    return int(raw)


def test_repeated_runs_retry_no_task(slurm_nextflow, local_reference):
    """Target (issue 32): 0 tasks retried for a visibility reason in 5 runs
    (FLOWFS_SLURM_REPEAT, default 5), each a new work dir on the same mounts and cluster.
    The config lets Nextflow retry (as nf-core's does): a task whose .exitcode or output the
    head could not see yet would be retried or waited for, and the run would still end 0,
    so the count of submissions and the log say it, not the exit code."""
    site = slurm_nextflow.site
    assert slurm_nextflow.run.ok, "the first Slurm run failed (see test_nextflow_on_two_slurm_nodes_matches_local)"
    retry = "process.errorStrategy = 'retry'\nprocess.maxRetries = 2\n"
    for i in range(_repeats()):
        launch, cfg, env = site.launch(f"launch-repeat-{i}", extra_config=retry)
        before = len(site.cluster.jobs())
        run = run_engine(nextflow_cmd(site.data, site.work / f"repeat-{i}", launch / "results", extra=["-c", str(cfg)]),
                         cwd=launch, env=env, timeout=ENGINE_TIMEOUT)
        jobs = site.cluster.jobs()[before:]
        print(f"\nrepeat {i + 1}: {run.wall_s:.1f}s, {len(jobs)} jobs on "
              f"{sorted({j.get('NodeList') for j in jobs})}")
        assert run.ok, f"run {i + 1}: {run.describe()}"
        assert vcf_records(launch / "results" / "annotated.vcf.gz") == local_reference, f"run {i + 1}"
        log = (launch / ".nextflow.log").read_text(errors="replace")
        warnings = _warnings(log)
        assert not warnings, f"run {i + 1}:\n" + "\n".join(warnings[:20])
        retried = [line for line in (run.output + log).splitlines() if "Re-submitted process" in line
                   or "Execution is retried" in line]
        assert not retried, f"run {i + 1} retried:\n" + "\n".join(retried[:20])
        bad = [j for j in jobs if j.get("JobState") != "COMPLETED" or j.get("ExitCode") != "0:0"]
        assert not bad, (i + 1, bad)
        assert len(jobs) == len(slurm_nextflow.jobs), (i + 1, len(jobs), len(slurm_nextflow.jobs))


EPILOG = """#!/bin/sh
# After every job: a node whose flowfs cannot say that everything written is in the bucket
# (exit 1: pending or failed, waited for up to 60 s; exit 2: the mount does not answer) fails
# its epilog, and Slurm drains it.
export XDG_RUNTIME_DIR={base}/$SLURMD_NODENAME/run
i=0
while [ $i -lt 60 ]; do
    {flowfs} status {work} >/dev/null 2>&1
    case $? in 0) exit 0 ;; 2) exit 1 ;; esac
    i=$((i + 1)); sleep 1
done
exit 1
"""


def _flowfs_pid_in(cluster: SlurmCluster, node: str, mountpoint: Path) -> int:
    """The pid of the flowfs process serving `mountpoint` in `node`'s namespace."""
    ns = os.readlink(f"/proc/{next(n.pid for n in cluster.nodes if n.name == node)}/ns/mnt")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            if os.readlink(f"/proc/{d}/ns/mnt") == ns and str(mountpoint).encode() in argv and b"mount" in argv:
                return int(d)
        except OSError:
            continue
    raise LookupError(f"no flowfs of {mountpoint} on {node}")


def test_a_node_whose_flowfs_is_killed_is_drained_and_its_tasks_run_again_on_the_other(
        flowfs_binary, seaweed, s3, wf_bucket, wf_data, local_reference, session_dir):  # noqa: ARG001
    """kill -9 of n1's flowfs (the work mount) while a job runs there: the job fails, the
    node's epilog (`flowfs status`) fails and Slurm drains n1, Nextflow retries the task on
    n2, the run ends with the local run's records; every task n1 completed before the kill
    has its .exitcode in the bucket."""

    need_tools("nextflow")
    prefix = f"slurm-kill-{os.getpid()}"
    with cluster_site("slurm-kill", flowfs_binary, seaweed, wf_bucket, session_dir, prefix=prefix,
                      epilog=EPILOG) as site:
        cluster, data, work = site.cluster, site.data, site.work
        # A task whose node died gets no .exitcode: Nextflow gives up on it after
        # exitReadTimeout (270 s by default) and retries it.
        launch, cfg, env = site.launch(extra_config="process.errorStrategy = 'retry'\nprocess.maxRetries = 3\n"
                                                    "executor.exitReadTimeout = '15 sec'\n")
        with open(launch / "engine.log", "wb") as out:
            nf = subprocess.Popen(nextflow_cmd(data, work, launch / "results", extra=["-c", str(cfg)]), cwd=launch,
                                  env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
            done_on_n1, last_before = _kill_n1_mid_run(cluster, nf, work)
        output = (launch / "engine.log").read_text(errors="replace")
        assert nf.returncode == 0, f"Nextflow failed after n1's flowfs was killed:\n{output[-5000:]}"
        recs = vcf_records(launch / "results" / "annotated.vcf.gz")
        assert recs == local_reference, diff_records(recs, local_reference)
        after = _assert_drained_and_rerun_on_n2(cluster, last_before)
        # Nothing n1 had finished before the kill is lost: its tasks' .exitcode are in the bucket.
        for j in done_on_n1:
            rel = Path(j["WorkDir"]).relative_to(work)
            key = f"{prefix}/{rel}/.exitcode"
            body = s3.get_object(Bucket=wf_bucket, Key=key)["Body"].read()
            assert body.strip() == b"0", (key, body)
        print(f"\n{len(done_on_n1)} tasks done on n1 before the kill; {len(after)} jobs after it, none on n1 after its drain")


def test_nextflow_on_slurm_through_a_failing_store(flowfs_binary, seaweed, wf_bucket, wf_data, local_reference,
                                                  session_dir):  # noqa: ARG001
    """Every mount (both nodes' and the head's) through the fault proxy at the 5 % level of
    test_workflow_faults.py (503 SlowDown, 500s, resets before and mid-body, stalls): the
    run succeeds with the local run's records, no job fails, and the faults were injected."""
    from fault_helpers import MOUNT_EXTRA, assert_faults_injected, level_rates
    from faultproxy import FaultProxy

    need_tools("nextflow")
    proxy = FaultProxy(seaweed.endpoint, seed=32).start()
    try:
        with cluster_site("slurm-faults", flowfs_binary, seaweed, wf_bucket, session_dir,
                          prefix=f"slurm-faults-{os.getpid()}", proxy=proxy, extra=MOUNT_EXTRA) as site:
            launch, cfg, env = site.launch()
            proxy.set_faults(level_rates("5pct"))
            run = run_engine(nextflow_cmd(site.data, site.work, launch / "results", extra=["-c", str(cfg)]),
                             cwd=launch, env=env, timeout=ENGINE_TIMEOUT)
            print(f"\nNextflow on 2 Slurm nodes through the fault proxy at 5 %: {run.wall_s:.1f}s; "
                  f"{proxy.fault_summary()}")
            assert run.ok, f"Nextflow on Slurm under faults failed: {run.describe()}"
            recs = vcf_records(launch / "results" / "annotated.vcf.gz")
            assert recs == local_reference, diff_records(recs, local_reference)
            jobs = site.cluster.jobs()
            assert {"n1", "n2"} <= {j.get("NodeList") for j in jobs}, jobs
            assert all(j.get("ExitCode") == "0:0" for j in jobs), jobs
            assert_faults_injected(proxy)
            um = site.head.unmount(timeout=300)
            assert um.returncode == 0, um
    finally:
        proxy.stop()


# ------------------------------------------------------------------ Snakemake

# Status checks every 2 s from the start (the plugin waits 40 s, then longer and longer:
# 282 s for this 15-job pipeline whatever the work dir, where Nextflow took 26 s).
SMK_SLURM = ["--executor", "slurm", "--jobs", "8", "--slurm-status-command", "squeue",
             "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2",
             "--default-resources", "slurm_partition=main", "mem_mb=400", "runtime=30"]


def _smk_plugin() -> None:
    py = Path(snakemake_bin()).parent / "python"
    r = subprocess.run([str(py), "-c", "import snakemake_executor_plugin_slurm"], capture_output=True)
    if r.returncode != 0:
        pytest.skip("snakemake-executor-plugin-slurm missing: run `make slurm-deps`")


def _smk_env(site: Site) -> dict[str, str]:
    # The jobs run Snakemake itself on the node (the plugin's job step): from the venv.
    path = f"{Path(snakemake_bin()).parent}:{os.environ.get('PATH', '')}"
    return tool_env({"SLURM_CONF": str(site.cluster.conf), "PATH": path})


def _smk_cmd(site: Site, directory: Path, extra: tuple[str, ...] = ()) -> list[str]:
    return snakemake_cmd(site.data, directory, extra=[*SMK_SLURM, *extra])


def _smk_job_logs(directory: Path) -> str:
    return "\n".join(f"--- {p}:\n{p.read_text(errors='replace')[-2000:]}"
                     for p in sorted((directory / ".snakemake" / "slurm_logs").rglob("*.log"))[:6])


def _assert_smk_jobs(jobs: list[dict[str, str]]) -> None:
    nodes = {j.get("NodeList") for j in jobs}
    assert {"n1", "n2"} <= nodes, f"jobs ran on {nodes}: {jobs}"
    bad = [j for j in jobs if j.get("JobState") != "COMPLETED" or j.get("ExitCode") != "0:0"]
    assert not bad, bad


@pytest.fixture(scope="module")
def slurm_snakemake(flowfs_binary, seaweed, wf_bucket, wf_data, session_dir):  # noqa: ARG001
    """Snakemake with the slurm executor plugin, `--directory` on the work mount (every
    node's and the head's), the inputs on the read-only data mount."""
    need_tools("snakemake")
    _smk_plugin()
    with cluster_site("slurm-smk", flowfs_binary, seaweed, wf_bucket, session_dir, prefix="slurm-smk") as site:
        env = _smk_env(site)
        run = run_engine(_smk_cmd(site, site.work / "smk"), cwd=site.base / "launch", env=env, timeout=ENGINE_TIMEOUT)
        print(f"\nSnakemake on 2 Slurm nodes, --directory on flowfs: {run.wall_s:.1f}s")
        vcf = site.work / "smk" / "results" / "annotated.vcf.gz"
        records = vcf_records(vcf) if run.ok and vcf.exists() else None
        r = SlurmRun(run, records, site.cluster.jobs(), _smk_job_logs(site.work / "smk"), site=site)
        if run.ok:
            r.local = run_engine(_smk_cmd(site, site.base / "local-smk"), cwd=site.base / "launch-local", env=env,
                                 timeout=ENGINE_TIMEOUT)
            print(f"Snakemake on 2 Slurm nodes, --directory on local disk: {r.local.wall_s:.1f}s")
        yield r


def test_snakemake_on_two_slurm_nodes_matches_local(slurm_snakemake, local_reference):
    r = slurm_snakemake
    assert r.run.ok, f"Snakemake on Slurm with --directory on flowfs failed: {r.run.describe()}\n{r.log}"
    assert r.records == local_reference, diff_records(r.records or [], local_reference)
    _assert_smk_jobs(r.jobs)
    # No job waited for an output the head could not see (Snakemake's --latency-wait).
    assert "Waiting at most" not in r.run.output, r.run.output[-4000:]
    assert r.local is not None and r.local.ok, r.local.describe() if r.local else "not run"
    print(f"\nSnakemake on Slurm, flowfs {r.run.wall_s:.1f}s vs local disk {r.local.wall_s:.1f}s: "
          f"{r.run.wall_s / r.local.wall_s:.2f}x")


def test_snakemake_on_slurm_through_a_failing_store(flowfs_binary, seaweed, wf_bucket, wf_data, local_reference,
                                                    session_dir):  # noqa: ARG001
    """Snakemake's run with every mount through the fault proxy at 5 %: the local run's
    records, every job COMPLETED 0:0 on both nodes, no latency wait, faults injected."""
    from fault_helpers import MOUNT_EXTRA, assert_faults_injected, level_rates
    from faultproxy import FaultProxy

    need_tools("snakemake")
    _smk_plugin()
    proxy = FaultProxy(seaweed.endpoint, seed=3232).start()
    try:
        with cluster_site("slurm-smk-faults", flowfs_binary, seaweed, wf_bucket, session_dir,
                          prefix=f"slurm-smk-faults-{os.getpid()}", proxy=proxy, extra=MOUNT_EXTRA) as site:
            proxy.set_faults(level_rates("5pct"))
            smk = site.work / "smk"
            run = run_engine(_smk_cmd(site, smk), cwd=site.base / "launch", env=_smk_env(site), timeout=ENGINE_TIMEOUT)
            print(f"\nSnakemake on 2 Slurm nodes through the fault proxy at 5 %: {run.wall_s:.1f}s; "
                  f"{proxy.fault_summary()}")
            assert run.ok, f"Snakemake on Slurm under faults failed: {run.describe()}\n{_smk_job_logs(smk)}"
            recs = vcf_records(smk / "results" / "annotated.vcf.gz")
            assert recs == local_reference, diff_records(recs, local_reference)
            _assert_smk_jobs(site.cluster.jobs())
            assert "Waiting at most" not in run.output, run.output[-4000:]
            assert_faults_injected(proxy)
            um = site.head.unmount(timeout=300)
            assert um.returncode == 0, um
    finally:
        proxy.stop()


def test_snakemake_node_whose_flowfs_is_killed_is_drained_and_its_jobs_run_again_on_the_other(
        flowfs_binary, seaweed, s3, wf_bucket, wf_data, local_reference, session_dir):  # noqa: ARG001
    """kill -9 of n1's work mount while a Snakemake job runs there (`--retries 3`): the job
    fails, n1's epilog drains it, Snakemake resubmits to n2 and ends with the local run's
    records; the Slurm log of every job n1 completed before the kill (written by n1's slurmd
    through n1's mount, closed when the job ended) is in the bucket."""

    need_tools("snakemake")
    _smk_plugin()
    prefix = f"slurm-smk-kill-{os.getpid()}"
    with cluster_site("slurm-smk-kill", flowfs_binary, seaweed, wf_bucket, session_dir, prefix=prefix,
                      epilog=EPILOG) as site:
        cluster, smk = site.cluster, site.work / "smk"
        (site.base / "launch").mkdir()
        # The plugin deletes a successful job's log unless told to keep it.
        cmd = _smk_cmd(site, smk, extra=("--retries", "3", "--slurm-keep-successful-logs"))
        with open(site.base / "launch" / "engine.log", "wb") as out:
            eng = subprocess.Popen(cmd, cwd=site.base / "launch", env=_smk_env(site), stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            done_on_n1, last_before = _kill_n1_mid_run(cluster, eng, site.work)
        output = (site.base / "launch" / "engine.log").read_text(errors="replace")
        assert eng.returncode == 0, f"Snakemake failed after n1's flowfs was killed:\n{output[-5000:]}"
        recs = vcf_records(smk / "results" / "annotated.vcf.gz")
        assert recs == local_reference, diff_records(recs, local_reference)
        after = _assert_drained_and_rerun_on_n2(cluster, last_before)
        logs = {p.stem: p for p in (smk / ".snakemake" / "slurm_logs").rglob("*.log")}
        for j in done_on_n1:
            assert j["JobId"] in logs, f"job {j['JobId']}'s log is gone: {sorted(logs)}"
            key = f"{prefix}/{logs[j['JobId']].relative_to(site.work)}"
            s3.head_object(Bucket=wf_bucket, Key=key)
        print(f"\n{len(done_on_n1)} jobs done on n1 before the kill; {len(after)} jobs after it, none on n1 after its drain")


def _kill_n1_mid_run(cluster: SlurmCluster, engine: subprocess.Popen, mountpoint: Path) -> tuple[list, int]:
    """Once a job runs on n1 with one finished there before it, kills n1's flowfs of
    `mountpoint` with -9, then waits for the engine (its group killed if it outlives
    ENGINE_TIMEOUT). Returns n1's jobs completed before the kill and the last job id
    known then."""
    try:
        q, done_on_n1 = _await_a_job_on_n1_after_one_done(cluster, engine)
        os.kill(_flowfs_pid_in(cluster, "n1", mountpoint), 9)
        last_before = max([int(line.split()[0]) for line in q.stdout.splitlines()]
                          + [int(j["JobId"]) for j in cluster.jobs()])
        engine.wait(timeout=ENGINE_TIMEOUT)
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, 9)
    return done_on_n1, last_before


def _assert_drained_and_rerun_on_n2(cluster: SlurmCluster, last_before: int) -> list:
    """n1 is drained, no job started on n1 after the drain (a job the scheduler placed
    there between the kill and the epilog that drained it may run and fail: the engine
    retries it), and jobs after the kill ran on n2; returns the jobs after the kill."""
    assert "DRAIN" in cluster.node_states()["n1"], cluster.node_states()
    drained = cluster.drained_at("n1")
    after = [j for j in cluster.jobs() if int(j["JobId"]) > last_before]
    late_on_n1 = [j for j in after if j.get("NodeList") == "n1" and j.get("StartTime", "") > drained]
    assert not late_on_n1, f"jobs started on n1 after its drain at {drained}: {late_on_n1}"
    assert any(j.get("NodeList") == "n2" for j in after), after
    return after


def _await_a_job_on_n1_after_one_done(cluster: SlurmCluster, engine) -> tuple:
    """Waits until a job runs on n1 while another has finished there; returns the squeue
    output of that moment and n1's completed jobs."""

    deadline = time.monotonic() + 300
    while True:
        q = subprocess.run(["squeue", "-h", "-o", "%i %N %T"], env=cluster.env(), capture_output=True, text=True)
        running_n1 = [line for line in q.stdout.splitlines() if line.split()[1:2] == ["n1"] and "RUNNING" in line]
        done = [j for j in cluster.jobs() if j.get("NodeList") == "n1" and j.get("JobState") == "COMPLETED"]
        if running_n1 and done:
            return q, done
        assert engine.poll() is None and time.monotonic() < deadline, "no job on n1 to kill under"
        time.sleep(0.2)


def _static(path: str) -> bool:
    """An ELF with no program interpreter (nothing to load at run time)."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    return head[:4] == b"\x7fELF" and b"/ld-linux" not in head and b"ld-musl" not in head


def test_the_static_binary_runs_flowfs_run_in_a_root_with_nothing_else(flowfs_binary, seaweed, s3, bucket, work_dir):
    """A task container with only dist/flowfs and a static busybox in it (no libc, no
    /etc, no fusermount3): `flowfs run` mounts the bucket, the task copies a file through
    the mount, and the copy is in the bucket when the run ends."""
    busybox = shutil.which("busybox")
    if busybox is None or not _static(busybox):
        pytest.skip("a static busybox is missing: run `make slurm-deps` (busybox-static)")
    if not _static(flowfs_binary):
        pytest.skip(f"{flowfs_binary} is not static: run `make dist` and point FLOWFS_BIN at dist/flowfs")

    data = os.urandom(3 << 20)
    s3.put_object(Bucket=bucket, Key="in/a.bin", Body=data)
    root = work_dir / "root"
    for d in ("bin", "dev", "proc", "mnt", "tmp", "cache"):
        (root / d).mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    (root / "bin" / "sh").symlink_to("busybox")
    shutil.copy(flowfs_binary, root / "flowfs")
    assert sorted(p.name for p in root.iterdir()) == ["bin", "cache", "dev", "flowfs", "mnt", "proc", "tmp"]
    task = "cat /mnt/a.bin > /mnt/b.bin && /bin/busybox sha256sum /mnt/b.bin"
    inner = (f"mount --bind /dev {root}/dev && mount -t proc proc {root}/proc && "
             f"exec chroot {root} /flowfs run --mount s3://{bucket}/in=/mnt --cache-dir /cache "
             f"--log-file /tmp/run.log -- /bin/sh -c '{task}'")
    env = {"PATH": "/bin:/usr/bin:/usr/sbin:/sbin", "HOME": "/", "XDG_RUNTIME_DIR": "/tmp", **seaweed.env()}
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "--", "sh", "-c", inner], env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    log = (root / "tmp" / "run.log").read_text(errors="replace") if (root / "tmp" / "run.log").exists() else ""
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}\n{log[-3000:]}"
    assert hashlib.sha256(data).hexdigest() in r.stdout, r.stdout
    got = s3.get_object(Bucket=bucket, Key="in/b.bin")["Body"].read()
    assert got == data
