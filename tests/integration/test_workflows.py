"""Workflows on flowfs (issue 5): the test pipeline of workflows/ run end to end by Nextflow
and by Snakemake with their work directories on flowfs mounts of a SeaweedFS bucket, compared
with a run on local disk; and the completion-marker ordering seen from a second mount.

    make test-workflows                          # installs the engines and tools, then these
    python3 -m pytest tests/integration -m workflows -v

The pipeline tests skip (saying what is missing) unless `make workflow-deps` has installed
Nextflow, Snakemake and the bioinformatics tools. The ordering tests need only flowfs.

Layout of a pipeline test: the inputs (workflows/gen_data.py, ci mode: a ~64 MiB annotation)
are uploaded with boto3 to s3://B/data/ and mounted read-only at D; the work directory is a
second mount, of s3://B/work (Nextflow: `-w` on it; its launch directory, .nextflow/ and
.nextflow.log stay on local disk, as with Fusion) or of s3://B/smk (Snakemake: `--directory`
on it, so the job outputs and Snakemake's own .snakemake/ metadata, locks and logs live in the
bucket). Both mounts go through the counting proxy, which tells how many bytes of the
annotation were fetched.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import MountFactory
from helpers import MiB
from s3proxy import CountingProxy
from workflow_helpers import (ENGINE_TIMEOUT, EngineRun, bytes_fetched, diff_records, manifest, need_tools,
                              nextflow_cmd, run_engine, snakemake_cmd, tool_env, vcf_records, vcf_records_bytes)

pytestmark = [pytest.mark.workflows]

PART = 8 * MiB  # flowfs's default --part-size


def _annotation_budget(m: dict) -> int:
    """What reading the annotation through its index may cost: the compressed bytes of the
    two reference contigs, plus one part (8 MiB) for each of the three places bcftools reads
    (the header at offset 0, the chr7 stretch, the chr19 stretch), plus the index."""
    spans = m["annotation"]["ref_contig_spans"]
    need = sum(e - s for s, e in spans.values())
    return need + 3 * PART + m["files"]["annot.tsv.gz.tbi"]["size"]


def _annotation_reads(proxy, m: dict, what: str) -> tuple[bool, str]:
    """(within the budget, message); asserted at the end of a test, so the other checks run."""
    size = m["files"]["annot.tsv.gz"]["size"]
    got = bytes_fetched(proxy.stats.records, "data/annot.tsv.gz")
    budget = _annotation_budget(m)
    ranges = [f"{r.range}" for r in proxy.stats.records if r.key.endswith("data/annot.tsv.gz") and r.range]
    msg = (f"{what}: {got:,} bytes of the {size:,}-byte annotation fetched ({100 * got / size:.0f}%), "
           f"budget {budget:,} ({100 * budget / size:.0f}%); GETs: {ranges}")
    print("\n" + msg)
    if got == 0:
        return False, f"{what}: the annotation was never read through the mount?\n{msg}"
    return got <= budget, msg


# ------------------------------------------------------------------ the pipeline


def test_local_engines_agree(wf_data, local_reference, work_dir):
    """Snakemake on local disk gives the same records as Nextflow on local disk (same steps)."""
    need_tools("snakemake")
    d = work_dir / "smk-local"
    d.mkdir()
    run = run_engine(snakemake_cmd(wf_data, d), cwd=work_dir, timeout=ENGINE_TIMEOUT)
    assert run.ok, f"Snakemake on local disk failed: {run.describe()}"
    recs = vcf_records(d / "results" / "annotated.vcf.gz")
    assert recs == local_reference, diff_records(recs, local_reference)


@dataclass
class FlowfsRun:
    """One engine run on flowfs, shared by the tests that check its different properties."""
    run: EngineRun
    records: list[str] | None  # of the published / final VCF
    annotation: tuple[bool, str]  # (within budget, message)
    work: object  # the Mount of the work dir (unmounted by the fixture before the tests)
    unmount: subprocess.CompletedProcess | None
    factory: MountFactory
    data: object  # the Mount of the inputs
    resumed: EngineRun | None = None  # nextflow -resume on a fresh mount (Nextflow only)
    keys_after_unmount: dict | None = None  # key -> size under work/, before the -resume run


def _logs(factory: MountFactory, secret: str) -> str:
    return "\n".join(f"--- flowfs log, mount {m.source}:\n{m.log_text(secret)[-3000:]}" for m in factory.mounts)


@pytest.fixture(scope="module")
def nextflow_on_flowfs(flowfs_binary, seaweed, wf_bucket, wf_data, session_dir):  # noqa: ARG001
    """Nextflow, inputs on a read-only mount of s3://B/data, `-w` on a mount of s3://B/work;
    the launch dir, .nextflow/ and NXF_HOME on local disk. Unmounted at the end (the durability
    point), so the bucket can be checked."""
    need_tools("nextflow")
    base = Path(tempfile.mkdtemp(prefix="wf-nextflow-", dir=session_dir))
    factory = MountFactory(seaweed, base)
    proxy = CountingProxy(seaweed.endpoint).start()
    try:
        data = factory(wf_bucket, "data", proxy=proxy, read_only=True)
        work = factory(wf_bucket, "work", proxy=proxy)
        launch = base / "launch"
        proxy.reset()
        run = run_engine(nextflow_cmd(data.path, work.path, launch / "results"), cwd=launch,
                         env=tool_env({"NXF_HOME": str(launch / "nxf-home")}), timeout=ENGINE_TIMEOUT)
        print(f"\nNextflow, -w on flowfs: {run.wall_s:.1f}s")
        vcf = launch / "results" / "annotated.vcf.gz"
        records = vcf_records(vcf) if run.ok and vcf.exists() else None
        lazy = _annotation_reads(proxy, manifest(wf_data), "Nextflow ANNOTATE")
        um = work.unmount(timeout=300) if run.ok else None
        keys = {o["Key"]: o["Size"] for o in _list_all(seaweed.client(), wf_bucket, "work/")}
        resumed = None
        if run.ok and um is not None and um.returncode == 0:
            # -resume from a fresh mount of the same prefix (new cache dir): every task's
            # directory is found complete in the bucket, so every task is cached
            work2 = factory(wf_bucket, "work", proxy=proxy, mountpoint=work.path)
            resumed = run_engine(nextflow_cmd(data.path, work2.path, launch / "results", extra=["-resume"]),
                                 cwd=launch, env=tool_env({"NXF_HOME": str(launch / "nxf-home")}),
                                 timeout=ENGINE_TIMEOUT, log=launch / "resume.log")
        yield FlowfsRun(run, records, lazy, work, um, factory, data, resumed, keys)
    finally:
        factory.close_all()
        proxy.stop()


def test_nextflow_on_flowfs_matches_local(nextflow_on_flowfs, local_reference, seaweed):
    r = nextflow_on_flowfs
    assert r.run.ok, f"Nextflow with -w on flowfs failed: {r.run.describe()}\n{_logs(r.factory, seaweed.creds.secret_key)}"
    assert r.records == local_reference, diff_records(r.records or [], local_reference)


def test_nextflow_on_flowfs_outputs_durable_in_bucket(nextflow_on_flowfs, s3, wf_bucket, wf_data, local_reference):
    """After `flowfs unmount` (exit 0), the bucket holds every task directory with its
    .exitcode "0", the .command.* files, the final VCF (same records) and the staged inputs
    stored as flowfs symlinks."""
    r = nextflow_on_flowfs
    if not r.run.ok:
        pytest.fail("the Nextflow run failed (see test_nextflow_on_flowfs_matches_local)")
    assert r.unmount is not None and r.unmount.returncode == 0, \
        f"flowfs unmount of the work dir: exit {r.unmount.returncode}: {r.unmount.stderr}"
    keys = r.keys_after_unmount
    task_dirs = {k.rsplit("/", 1)[0] for k in keys if k.endswith("/.command.run")}
    n_tasks = 6 + len((wf_data / "regions.txt").read_text().split())  # 6 steps + one CALL per region
    assert len(task_dirs) == n_tasks, f"{len(task_dirs)} task dirs in the bucket, expected {n_tasks}"
    for t in sorted(task_dirs):
        body = s3.get_object(Bucket=wf_bucket, Key=f"{t}/.exitcode")["Body"].read()
        assert body.strip() == b"0", f"{t}/.exitcode = {body!r}"
        for f in (".command.sh", ".command.out", ".command.err", ".command.log", ".command.begin"):
            assert f"{t}/{f}" in keys, f"{t}/{f} missing from the bucket"
    ann = [k for k in keys if k.endswith("/annotated.vcf.gz")]
    assert len(ann) == 1, ann
    assert vcf_records_bytes(s3.get_object(Bucket=wf_bucket, Key=ann[0])["Body"].read()) == local_reference
    # Nextflow staged the inputs as symlinks; flowfs stores them as objects marked as symlinks
    link = ann[0].rsplit("/", 1)[0] + "/annot.tsv.gz"
    head = s3.head_object(Bucket=wf_bucket, Key=link)
    assert "flowfs-symlink" in head.get("Metadata", {}), f"{link} is not stored as a symlink: {head}"


def test_nextflow_on_flowfs_resume_from_a_fresh_mount(nextflow_on_flowfs, wf_data):
    """`nextflow run -resume` with the same launch dir and a fresh mount of the work prefix
    reruns nothing. Nextflow's default cache key includes each input file's size and mtime,
    so this holds only if a file's mtime on a later mount equals the one the first mount
    reported when the downstream task was hashed."""
    r = nextflow_on_flowfs
    if r.resumed is None:
        pytest.fail("the first Nextflow run or its unmount failed (see the other tests)")
    assert r.resumed.ok, f"nextflow -resume failed: {r.resumed.describe()}"
    n_tasks = 6 + len((wf_data / "regions.txt").read_text().split())
    cached = r.resumed.output.count("Cached process >")
    submitted = r.resumed.output.count("Submitted process >")
    assert (cached, submitted) == (n_tasks, 0), \
        f"-resume cached {cached} and reran {submitted} of {n_tasks} tasks:\n{r.resumed.output[-3000:]}"


def test_nextflow_on_flowfs_reads_annotation_lazily(nextflow_on_flowfs):
    """bcftools annotate reads ~1.2 MB of the 64 MiB annotation through its index; the bytes
    flowfs fetched for it must stay within that plus one 8 MiB part per place read."""
    r = nextflow_on_flowfs
    if not r.run.ok:
        pytest.fail("the Nextflow run failed (see test_nextflow_on_flowfs_matches_local)")
    ok, msg = r.annotation
    assert ok, msg


@pytest.fixture(scope="module")
def snakemake_on_flowfs(flowfs_binary, seaweed, wf_bucket, wf_data, session_dir):  # noqa: ARG001
    """Snakemake with --directory on a mount of s3://B/smk (job outputs and .snakemake/ in the
    bucket), inputs on a read-only mount. Unmounted at the end."""
    need_tools("snakemake")
    base = Path(tempfile.mkdtemp(prefix="wf-snakemake-", dir=session_dir))
    factory = MountFactory(seaweed, base)
    proxy = CountingProxy(seaweed.endpoint).start()
    try:
        data = factory(wf_bucket, "data", proxy=proxy, read_only=True)
        smk = factory(wf_bucket, "smk", proxy=proxy)
        proxy.reset()
        run = run_engine(snakemake_cmd(data.path, smk.path), cwd=base, timeout=ENGINE_TIMEOUT)
        print(f"\nSnakemake, --directory on flowfs: {run.wall_s:.1f}s")
        vcf = smk.path / "results" / "annotated.vcf.gz"
        records = vcf_records(vcf) if run.ok and vcf.exists() else None
        lazy = _annotation_reads(proxy, manifest(wf_data), "Snakemake annotate")
        um = smk.unmount(timeout=300) if run.ok else None
        yield FlowfsRun(run, records, lazy, smk, um, factory, data)
    finally:
        factory.close_all()
        proxy.stop()


def test_snakemake_on_flowfs_matches_local(snakemake_on_flowfs, local_reference, seaweed):
    r = snakemake_on_flowfs
    assert r.run.ok, (f"Snakemake with --directory on flowfs failed: {r.run.describe()}\n"
                      f"{_logs(r.factory, seaweed.creds.secret_key)}")
    assert r.records == local_reference, diff_records(r.records or [], local_reference)
    assert r.unmount is not None and r.unmount.returncode == 0, \
        f"flowfs unmount: exit {r.unmount.returncode}: {r.unmount.stderr}"


def test_snakemake_on_flowfs_nothing_to_rerun_after_remount(snakemake_on_flowfs, wf_bucket, local_reference):
    """A fresh mount of the finished run's prefix (file times now come from the bucket's
    LastModified): Snakemake must find everything present and up to date."""
    r = snakemake_on_flowfs
    if not r.run.ok:
        pytest.fail("the Snakemake run failed (see test_snakemake_on_flowfs_matches_local)")
    smk2 = r.factory(wf_bucket, "smk")
    d = r.factory.work_dir / "dry-run"
    dry = run_engine(snakemake_cmd(r.data.path, smk2.path, extra=["-n"]), cwd=d, timeout=300)
    assert dry.ok, f"snakemake -n on the remounted directory failed: {dry.describe()}"
    assert "Nothing to be done" in dry.output, f"Snakemake wants to rerun jobs after a remount:\n{dry.output[-4000:]}"
    assert vcf_records(smk2.path / "results" / "annotated.vcf.gz") == local_reference


def test_snakemake_on_flowfs_reads_annotation_lazily(snakemake_on_flowfs):
    r = snakemake_on_flowfs
    if not r.run.ok:
        pytest.fail("the Snakemake run failed (see test_snakemake_on_flowfs_matches_local)")
    ok, msg = r.annotation
    assert ok, msg


def _list_all(s3, bucket: str, prefix: str) -> list[dict]:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += page.get("Contents", [])
    return out


# ------------------------------------------------------------------ completion ordering

# What a task writes before its marker: a big file (multipart upload: 3 parts of 8 MiB), a
# middle one, small ones, one in a subdirectory, one written through a temp name + rename.
OUTPUT_SIZES = {"out.bam": 20 * MiB + 12345, "out.bam.bai": 96 * 1024, "stats.txt": 1000, "empty.txt": 0,
                "sub/part.vcf.gz": 3 * MiB + 7, "final.json": 512}


def _outputs(seed: str) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {name: rng.randbytes(n) for name, n in OUTPUT_SIZES.items()}


WRITER = r"""
import os, sys
task, seed = sys.argv[1], sys.argv[2]
import random
rng = random.Random(seed)
os.makedirs(os.path.join(task, "sub"), exist_ok=True)
sizes = %r
for name, n in sizes.items():
    data = rng.randbytes(n)
    if name == "final.json":  # temp name, then rename, like many tools do
        tmp = os.path.join(task, ".final.json.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, os.path.join(task, name))
        continue
    with open(os.path.join(task, name), "wb") as f:
        for off in range(0, n, 1 << 20):
            f.write(data[off:off + (1 << 20)])
with open(os.path.join(task, ".exitcode"), "w") as f:  # last, as Nextflow's wrapper does
    f.write("0")
""" % (OUTPUT_SIZES,)


def _check_complete_in_bucket(s3, bucket: str, prefix: str, want: dict[str, bytes]) -> list[str]:
    keys = {o["Key"][len(prefix):]: o["Size"] for o in _list_all(s3, bucket, prefix)}
    bad = []
    for name, data in want.items():
        if name not in keys:
            bad.append(f"{name}: not in the listing")
        elif keys[name] != len(data):
            bad.append(f"{name}: size {keys[name]} != {len(data)}")
    if not bad:
        for name, data in want.items():
            got = s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()
            if hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
                bad.append(f"{name}: content differs")
    return bad


def _check_complete_on_mount(task: Path, want: dict[str, bytes]) -> list[str]:
    bad = []
    try:
        listed = set(os.listdir(task)) | {f"sub/{n}" for n in os.listdir(task / "sub")}
    except OSError as e:
        return [f"listing failed: {e}"]
    for name, data in want.items():
        if name not in listed:
            bad.append(f"{name}: not in the listing")
            continue
        try:
            got = (task / name).read_bytes()
        except OSError as e:
            bad.append(f"{name}: {e}")
            continue
        if len(got) != len(data):
            bad.append(f"{name}: size {len(got)} != {len(data)}")
        elif hashlib.sha256(got).digest() != hashlib.sha256(data).digest():
            bad.append(f"{name}: content differs")
    return bad


def _wait_for(predicate, timeout: float, interval: float = 0.02) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(interval)
    return None


@pytest.mark.parametrize("rounds", [4])
def test_marker_orders_outputs_across_mounts(mount, s3, bucket, work_dir, rounds):
    """Mount A runs a task that writes outputs then `.exitcode`; a watcher of the bucket
    (boto3) and a watcher on mount B (a second mount of the same bucket) wait for the marker;
    the moment either sees it, every output must be listed, complete and intact."""
    a = mount(bucket, "work")
    b = mount(bucket, "work")
    problems: list[str] = []
    seen_after: list[tuple[float | None, float | None]] = []
    for i in range(rounds):
        name = f"task{i:02d}"
        seed = f"{name}-{random.random()}"
        want = _outputs(seed)
        (a.path / name).mkdir()
        found: dict[str, float | None] = {}

        def bucket_watch():
            key = f"work/{name}/.exitcode"

            def there():
                try:
                    s3.head_object(Bucket=bucket, Key=key)
                    return True
                except s3.exceptions.ClientError:
                    return False

            found["bucket"] = _wait_for(there, 120)
            if found["bucket"] is not None:
                for p in _check_complete_in_bucket(s3, bucket, f"work/{name}/", want):
                    problems.append(f"round {i}, bucket watcher: {p}")

        def mount_watch():
            marker = b.path / name / ".exitcode"
            found["mount"] = _wait_for(marker.exists, 120, 0.05)
            if found["mount"] is not None:
                for p in _check_complete_on_mount(b.path / name, want):
                    problems.append(f"round {i}, mount B watcher: {p}")

        watchers = [threading.Thread(target=bucket_watch), threading.Thread(target=mount_watch)]
        for t in watchers:
            t.start()
        w = subprocess.run(["python3", "-c", WRITER, str(a.path / name), seed], capture_output=True, text=True,
                           timeout=120)
        assert w.returncode == 0, w.stderr
        for t in watchers:
            t.join(timeout=180)
        assert found.get("bucket") is not None, f"round {i}: .exitcode never reached the bucket"
        assert found.get("mount") is not None, f"round {i}: .exitcode never appeared on mount B"
        seen_after.append((found["bucket"], found["mount"]))
    print(f"\nmarker seen after (bucket, mount B) seconds: {[(round(x, 2), round(y, 2)) for x, y in seen_after]}")
    assert not problems, "a watcher saw .exitcode before the task's outputs were complete:\n" + "\n".join(problems)


def test_marker_is_the_configured_name_only(mount, s3, bucket):
    """A custom --completion-marker name orders like .exitcode (here `DONE`)."""
    a = mount(bucket, "w", extra=["--completion-marker", "DONE"])
    want = _outputs("custom-marker")
    problems: list[str] = []
    seen: dict[str, float | None] = {}

    def watch():
        def there():
            try:
                s3.head_object(Bucket=bucket, Key="w/t/DONE")
                return True
            except s3.exceptions.ClientError:
                return False

        seen["t"] = _wait_for(there, 120)
        if seen["t"] is not None:
            problems.extend(_check_complete_in_bucket(s3, bucket, "w/t/", want))

    th = threading.Thread(target=watch)
    th.start()
    task = a.path / "t"
    (task / "sub").mkdir(parents=True)
    for name, data in want.items():
        (task / name).write_bytes(data)
    (task / "DONE").write_text("ok")
    th.join(timeout=180)
    assert seen.get("t") is not None, "DONE never reached the bucket"
    assert not problems, "DONE was visible before the outputs were complete:\n" + "\n".join(problems)


def test_flowfs_run_task_wrapper(s3, seaweed, bucket, work_dir, flowfs_binary):
    """`flowfs run` as the task wrapper of a container (Kubernetes / AWS Batch): it mounts,
    runs a Nextflow-like task script, passes its exit code through, and returns only when the
    outputs and the marker are in the bucket."""
    from seaweed import clean_env

    help_text = subprocess.run([flowfs_binary, "run", "--help"], capture_output=True, text=True).stdout
    if "--mount" not in help_text:
        pytest.skip("this flowfs has no `run` subcommand")
    mnt = work_dir / "task-mnt"
    want = _outputs("flowfs-run")
    script = work_dir / "task.py"
    script.write_text(WRITER)
    env = clean_env(seaweed.env())
    for code in (0, 3):
        task = f"t{code}"
        cmd = [flowfs_binary, "run", "--mount", f"s3://{bucket}/work={mnt}", "--cache-dir", str(work_dir / "cache"),
               "--endpoint-url", seaweed.endpoint, "--",
               "bash", "-c", f'python3 {script} {mnt}/{task} flowfs-run && exit {code}']
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
        assert r.returncode == code, f"flowfs run exit {r.returncode}, expected the command's {code}: {r.stderr}"
        # durable when flowfs run returns: no waiting
        bad = _check_complete_in_bucket(s3, bucket, f"work/{task}/", {**want, ".exitcode": b"0"})
        assert not bad, f"after flowfs run returned: {bad}"
        assert not os.path.ismount(mnt), "flowfs run left its mount behind"


# ------------------------------------------------------------------ what the pipeline's tools do


def test_file_keeps_its_size_when_its_directory_is_listed_after_the_upload(mount, bucket):
    """A task writes a file; the next task lists the directory (a shell glob, Nextflow's
    output matching) and reads the file. bwa index then bwa mem hit this in benchmark B7:
    `[fread] Unexpected end of file`. Wait ~0.4 s after close (the upload has finished), list,
    then stat and read: the full size and content, in a new and in an existing directory."""
    m = mount(bucket)
    (m.path / "old").mkdir()
    time.sleep(1.5)
    bad = []
    for where in ("new", "old"):
        for i in range(6):
            d = m.path / (f"new{i}" if where == "new" else "old")
            d.mkdir(exist_ok=True)
            p = d / f"x{i}.bin"
            data = random.Random(f"{where}{i}").randbytes(1_000_000)
            p.write_bytes(data)
            time.sleep(0.4)
            os.listdir(d)
            st = p.stat().st_size
            got = p.read_bytes()
            if st != len(data) or got != data:
                bad.append(f"{where} dir, {p.name}: stat {st}, read {len(got)} of {len(data)} bytes")
    assert not bad, "after listing the directory, a file just uploaded looked shorter:\n" + "\n".join(bad)


def test_rewrite_right_after_close(mount, bucket, s3):
    """`bwa index` writes genome.fa.bwt, closes it, and rewrites it at once (fopen "wb"):
    every close must succeed and the bucket must end with the last content."""
    m = mount(bucket)
    errors = []
    want = {}
    for i in range(60):
        p = m.path / f"x{i}.bwt"
        a, b = random.Random(f"a{i}").randbytes(1_000_000), random.Random(f"b{i}").randbytes(3_300_000)
        want[f"x{i}.bwt"] = b
        p.write_bytes(a)
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)  # at once: the upload of `a` has just started
        step = "write"
        try:
            os.write(fd, b)
            step = "close"
            os.close(fd)
        except OSError as e:
            errors.append(f"x{i}.bwt: {step} of the rewrite: errno {e.errno} ({e.strerror})")
            if step == "write":
                os.close(fd)
    r = m.unmount(timeout=120)
    assert r.returncode == 0, r.stderr
    for name, b in want.items():
        got = s3.get_object(Bucket=bucket, Key=name)["Body"].read()
        assert got == b, f"{name}: the bucket holds {len(got)} bytes, not the last version"
    assert not errors, f"{len(errors)} of 60 rewrites failed:\n" + "\n".join(errors)
