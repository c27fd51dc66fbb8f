"""B7: a real pipeline with its work directory on each mount, against local disk (issue 5).

The test pipeline of workflows/ (fastp -> bwa mem -> samtools sort/index -> bcftools
mpileup|call scattered over regions -> concat -> annotate against a large tabix-indexed
annotation) run by Nextflow 24.10.0 with the local executor:

- "local": inputs and `-w` on local disk (the baseline of B7);
- each writable mount (flowfs and the peers): the bucket mounted at MNT, the inputs read from
  MNT/b7/data (uploaded with boto3 beforehand; JuiceFS, which has its own format, gets them
  copied in through a mount, untimed), `-w MNT/b7/work-TOOL-rRUN`. The launch directory,
  .nextflow/ and NXF_HOME stay on local disk, as with Fusion.

Timed: from `nextflow run` to its exit, plus the mount's own unmount (every mount's
durability point for the work dir's files). Verified: the final VCF's records (the non-header
lines) are identical to those of an untimed reference run on local disk. A peer that cannot
run the pipeline (it lacks symlinks, rename, ...) gets the error it hit: the failing task's
`Command error` lines from Nextflow's output.

Data: workflows/gen_data.py bench mode (1.6 Mb reference, 240k read pairs, a 220 MiB
annotation); --quick uses the ci mode (64 MiB annotation), generated once and cached under
FLOWFS_DEPS_DIR (see tests/integration/workflow_helpers.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import util
from .server import BUCKET
from .tools import JuiceFS, LocalDisk, MountError, Tool

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

import workflow_helpers as wh  # noqa: E402

DATA_PREFIX = "b7/data/"


@dataclass
class B7State:
    mode: str = "bench"
    data: Path | None = None
    reference: list[str] = field(default_factory=list)
    reference_s: float | None = None
    error: str | None = None
    juicefs_imported: bool = False
    nxf_home: Path | None = None


def describe(mode: str) -> str:
    if mode == "bench":
        return ("Nextflow pipeline (fastp, bwa mem, samtools, bcftools over 16 regions, annotate against a "
                "220 MiB tabix file), work dir on the mount; time until the unmount returned")
    return ("Nextflow pipeline (ci data: 8 regions, 64 MiB annotation), work dir on the mount; "
            "time until the unmount returned")


def prepare(ctx, mode: str) -> B7State:
    """Tools, data (cached), upload to the bucket, the untimed local reference run."""
    st = B7State(mode=mode)
    ctx.b7 = st
    miss = wh.missing_tools(("nextflow",))
    if miss:
        util.log(f"B7: installing the workflow tools (scripts/workflow-deps.sh): missing {', '.join(miss)}")
        r = subprocess.run(["bash", str(ROOT / "scripts" / "workflow-deps.sh")], capture_output=True, text=True,
                           timeout=3600, stdin=subprocess.DEVNULL)
        miss = wh.missing_tools(("nextflow",))
        if miss:
            st.error = f"workflow tools missing ({', '.join(miss)}): {(r.stderr or r.stdout).strip()[-400:]}"
            return st
    try:
        util.log(f"B7: input data ({mode} mode; generated once, then cached)")
        st.data = wh.data_dir(mode)
        util.log("B7: uploading the inputs to s3://bench/b7/data/ (boto3, direct)")
        wh.upload_data(ctx.server.direct, BUCKET, st.data, DATA_PREFIX)
    except Exception as e:  # noqa: BLE001
        st.error = f"B7 data: {type(e).__name__}: {e}"
        return st
    st.nxf_home = ctx.work / "b7" / "nxf-home"
    util.log("B7: reference run on local disk (untimed)")
    d = ctx.work / "b7" / "reference"
    r = _nextflow(ctx, st, st.data, d / "work", d)
    if r.returncode != 0 or r.timed_out:
        st.error = f"B7 reference run on local disk failed: {_nextflow_error(d / 'nextflow.out', r)}"
        return st
    st.reference = wh.vcf_records(d / "results" / "annotated.vcf.gz")
    st.reference_s = r.wall_s
    util.rm_rf(d)
    util.log(f"B7: reference {len(st.reference)} records in {r.wall_s:.1f}s")
    return st


def _nextflow(ctx, st: B7State, data: Path, work: Path, launch: Path, on_timeout=None) -> util.RunResult:
    launch.mkdir(parents=True, exist_ok=True)
    cmd = wh.nextflow_cmd(data, work, launch / "results")
    env = wh.tool_env({"NXF_HOME": str(st.nxf_home)})
    return util.run(cmd, env=env, cwd=launch, timeout=max(ctx.timeout, 900), stdout_path=str(launch / "nextflow.out"),
                    name="nextflow", on_timeout=on_timeout)


def _nextflow_error(out: Path, r: util.RunResult) -> str:
    """The useful part of a failed run: Nextflow's ERROR line, the failing process, its
    'Command error' block."""
    if r.timed_out:
        return f"timed out after {r.wall_s:.0f}s"
    text = util.tail(out, 20000) + "\n" + (r.stderr or "")
    keep: list[str] = []
    m = re.search(r"^ERROR ~ (.*)$", text, re.M)
    if m:
        keep.append(m.group(1).strip())
    m = re.search(r"Caused by:\s*\n\s*(.+)", text)
    if m:
        keep.append(m.group(1).strip())
    m = re.search(r"Command error:\s*\n((?:\s{2,}.*\n?){1,8})", text)
    if m:
        keep.append("command error: " + " | ".join(x.strip() for x in m.group(1).splitlines() if x.strip()))
    if not keep:
        keep.append(" | ".join(text.strip().splitlines()[-6:]))
    return f"nextflow exit {r.returncode}: " + "; ".join(keep)


def _mount_error(ctx, h) -> str:
    """The first error line of the mount's own log (what the task's tools saw only as EIO)."""
    for line in h.log_tail(ctx, 20000).splitlines():
        if re.search(r"\bERROR\b|\berror\b", line):
            return f"; the mount's log: {line.strip()[:300]}"
    return ""


def _verify(st: B7State, launch: Path) -> tuple[bool, str]:
    vcf = launch / "results" / "annotated.vcf.gz"
    if not vcf.exists():
        return False, "no annotated.vcf.gz published"
    recs = wh.vcf_records(vcf)
    if recs == st.reference:
        return True, f"{len(recs)} VCF records identical to the local-disk reference"
    return False, f"VCF records differ from the reference ({len(recs)} vs {len(st.reference)})"


def b7(ctx, tool: Tool, run: int) -> list[dict]:
    from .workloads import Window, mounted, new_record

    rec = new_record("B7", "", tool, run)
    st: B7State | None = getattr(ctx, "b7", None)
    if st is None or st.error:
        rec["error"] = (st.error if st else "B7 not prepared")
        return [rec]
    launch = ctx.work / "b7" / f"{tool.name}-r{run}"
    util.rm_rf(launch)
    if isinstance(tool, LocalDisk):
        util.drop_caches()
        w = Window(ctx)
        r = _nextflow(ctx, st, st.data, launch / "work", launch)
        w.close(rec)
        rec["wall_s"], rec["client_cpu_s"] = round(r.wall_s, 3), round(r.cpu_s, 3)
        if r.returncode != 0 or r.timed_out:
            rec["error"] = _nextflow_error(launch / "nextflow.out", r)
            return [rec]
    else:
        prefix = f"b7/work-{tool.name}-r{run}"
        try:
            with mounted(ctx, tool, f"r{run}-b7") as h:
                rec["mount_s"] = round(h.mount_s, 3)
                data = h.path / DATA_PREFIX.rstrip("/")
                if isinstance(tool, JuiceFS) and not st.juicefs_imported:
                    _import_juicefs(st, data)
                util.drop_caches()
                w = Window(ctx, h)
                r = _nextflow(ctx, st, data, h.path / prefix, launch, on_timeout=h.abort)
                rec["client_cpu_s"] = round(r.cpu_s, 3)
                if r.returncode != 0 or r.timed_out:
                    w.close(rec)
                    rec["error"] = _nextflow_error(launch / "nextflow.out", r) + _mount_error(ctx, h)
                    return [rec]
                rec["write_s"] = round(r.wall_s, 3)  # the pipeline alone, before the unmount
                ok, dt, err = h.unmount(ctx, timeout=max(ctx.timeout, 300))
                w.close(rec)
                if not ok:
                    rec["error"] = f"unmount (durability point) failed: {err}"
                    return [rec]
                rec["wall_s"] = round(r.wall_s + dt, 3)
        finally:
            if not isinstance(tool, JuiceFS):
                ctx.server.delete_prefix(prefix + "/")
    rec["verified"], rec["notes"] = _verify(st, launch)
    if st.reference_s:
        rec["notes"] += f"; untimed local reference run {st.reference_s:.1f}s"
    util.rm_rf(launch)
    return [rec]


def _import_juicefs(st: B7State, dest: Path) -> None:
    """JuiceFS reads only its own format: copy the inputs in through its mount (untimed)."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in sorted(st.data.iterdir()):
        if p.is_file():
            r = util.run(["cp", str(p), str(dest / p.name)], timeout=3600)
            if r.returncode != 0:
                raise MountError(f"juicefs: copying the B7 inputs in failed: {r.stderr.strip()[-300:]}")
    st.juicefs_imported = True
