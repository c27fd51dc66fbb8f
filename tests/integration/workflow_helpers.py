"""Running the test pipeline (workflows/) with Nextflow and Snakemake: finding the tools that
scripts/workflow-deps.sh installs, the generated input data (cached), the engine command
lines, and reading the final VCF. Used by test_workflows.py and by bench B7.

Environment:
  FLOWFS_DEPS_DIR   where workflow-deps.sh installed things (default ~/.cache/flowfs-deps)
  NEXTFLOW_BIN      a nextflow launcher (default $FLOWFS_DEPS_DIR/nextflow-24.10.0/bin/nextflow)
  SNAKEMAKE_BIN     a snakemake (default $FLOWFS_DEPS_DIR/snakemake-venv/bin/snakemake)
  FLOWFS_WF_DATA    a directory of data already made by workflows/gen_data.py (skips the cache)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
GEN_DATA = WORKFLOWS / "gen_data.py"
NXF_VERSION = "24.10.0"
BIO_TOOLS = ("fastp", "bwa", "samtools", "wgsim", "bcftools", "bgzip", "tabix", "java")
DATA_FILES = ("ref.fa", "reads_1.fq.gz", "reads_2.fq.gz", "regions.txt", "annot.tsv.gz", "annot.tsv.gz.tbi",
              "annot.hdr", "manifest.json")


def deps_dir() -> Path:
    return Path(os.environ.get("FLOWFS_DEPS_DIR") or Path.home() / ".cache" / "flowfs-deps")


def nextflow_bin() -> str:
    return os.environ.get("NEXTFLOW_BIN") or str(deps_dir() / f"nextflow-{NXF_VERSION}" / "bin" / "nextflow")


def snakemake_bin() -> str:
    return os.environ.get("SNAKEMAKE_BIN") or str(deps_dir() / "snakemake-venv" / "bin" / "snakemake")


ENGINE_TIMEOUT = 900  # seconds, one engine run


def need_tools(*engines: str) -> None:
    """Skips the calling test unless the engines and the tools are installed."""
    import pytest

    miss = missing_tools(engines)
    if miss:
        pytest.skip(f"workflow tools missing ({', '.join(miss)}): run `make workflow-deps`")


def missing_tools(engines: tuple[str, ...] = ("nextflow", "snakemake")) -> list[str]:
    """What is missing to run the pipeline (empty when all is there)."""
    miss = [t for t in BIO_TOOLS if shutil.which(t) is None]
    if "nextflow" in engines and not os.access(nextflow_bin(), os.X_OK):
        miss.append(f"nextflow ({nextflow_bin()})")
    if "snakemake" in engines and not os.access(snakemake_bin(), os.X_OK):
        miss.append(f"snakemake ({snakemake_bin()})")
    return miss


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def data_dir(mode: str = "ci", seed: int = 20261123) -> Path:
    """The generated input data: FLOWFS_WF_DATA if set, else a cache entry under
    FLOWFS_DEPS_DIR/wfdata keyed by mode, seed and the generator's own sha256 (made on the
    first call: ~35 s for ci, ~4 min for bench)."""
    if os.environ.get("FLOWFS_WF_DATA"):
        d = Path(os.environ["FLOWFS_WF_DATA"])
        if not (d / "manifest.json").exists():
            raise FileNotFoundError(f"FLOWFS_WF_DATA={d} has no manifest.json")
        return d
    key = f"{mode}-{seed}-{_file_sha(GEN_DATA)[:12]}"
    root = deps_dir() / "wfdata"
    d = root / key
    if (d / "manifest.json").exists() and all((d / f).exists() for f in DATA_FILES):
        return d
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        subprocess.run([sys.executable, str(GEN_DATA), str(tmp), "--mode", mode, "--seed", str(seed)], check=True,
                       stdin=subprocess.DEVNULL, timeout=1800)
        if d.exists():
            shutil.rmtree(d)
        os.replace(tmp, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # drop older versions of the same mode (another generator version or seed)
    for old in root.glob(f"{mode}-*"):
        if old != d and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    return d


def manifest(data: Path) -> dict:
    return json.loads((data / "manifest.json").read_text())


def upload_data(s3, bucket: str, data: Path, prefix: str = "data/") -> list[str]:
    """Every input file to s3://bucket/PREFIX with boto3 (straight to the server)."""
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20, max_concurrency=4)
    keys = []
    for name in sorted(os.listdir(data)):
        p = data / name
        if p.is_file():
            s3.upload_file(str(p), bucket, prefix + name, Config=cfg)
            keys.append(prefix + name)
    return keys


# ---------------------------------------------------------------------- engines


def tool_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an engine run: no AWS settings (the engines never talk to S3
    themselves), no proxies, plain logs."""
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("AWS_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NXF_ANSI_LOG"] = "false"
    env["NXF_DISABLE_CHECK_LATEST"] = "true"
    env["NXF_OFFLINE"] = "true"
    if extra:
        env.update(extra)
    return env


def nextflow_cmd(data: Path, workdir: Path, outdir: Path, threads: int = 2, extra: list[str] | tuple = ()) -> list[str]:
    return [nextflow_bin(), "run", str(WORKFLOWS / "main.nf"), "--data", str(data), "--outdir", str(outdir),
            "--threads", str(threads), "-w", str(workdir), *extra]


def snakemake_cmd(data: Path, directory: Path, threads: int = 2, extra: list[str] | tuple = ()) -> list[str]:
    return [snakemake_bin(), "-s", str(WORKFLOWS / "Snakefile"), "--directory", str(directory),
            "--config", f"data={data}", f"threads={threads}", "--cores", str(threads), *extra]


@dataclass
class EngineRun:
    cmd: list[str]
    returncode: int | None
    wall_s: float
    output: str  # stdout+stderr (tail)
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def describe(self) -> str:
        what = "timed out" if self.timed_out else f"exit {self.returncode}"
        return f"{' '.join(self.cmd[:3])} ... {what} after {self.wall_s:.1f}s\n{self.output[-6000:]}"


def run_engine(cmd: list[str], cwd: Path, timeout: float = 900, env: dict[str, str] | None = None,
               log: Path | None = None) -> EngineRun:
    """Run an engine in its own session (killed as a group on timeout); output to `log`."""
    cwd.mkdir(parents=True, exist_ok=True)
    log = log or (cwd / "engine.log")
    t0 = time.monotonic()
    with open(log, "wb") as out:
        p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=env or tool_env(), start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            import signal

            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=15)
                    break
                except subprocess.TimeoutExpired:
                    continue
    wall = time.monotonic() - t0
    return EngineRun(cmd, p.returncode, wall, log.read_text(errors="replace"), timed_out)


# ---------------------------------------------------------------------- results


def vcf_records(path: Path) -> list[str]:
    """The non-header lines of a (bgzipped) VCF."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [line.rstrip("\n") for line in f if not line.startswith("#")]


def vcf_records_bytes(data: bytes) -> list[str]:
    text = gzip.decompress(data).decode()
    return [line for line in text.splitlines() if not line.startswith("#")]


def diff_records(a: list[str], b: list[str]) -> str:
    """What differs between two record lists, in one line (or "identical")."""
    if len(a) != len(b):
        return f"{len(a)} records vs {len(b)} expected"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"record {i} differs:\n  got      {x[:300]}\n  expected {y[:300]}"
    return "identical"


def bytes_fetched(records, key_suffix: str) -> int:
    """Body bytes of object GETs of keys ending with key_suffix (CountingProxy records)."""
    return sum(r.resp_bytes for r in records if r.op in ("GET", "GET_RANGE") and r.key.endswith(key_suffix))


# ------------------------------------------------------------------ the Snakemake pipeline on another store

def store_snakemake(factory, bucket: str, store: str) -> dict:
    """test_workflows.py's Snakemake run on another store's mounts (test_azure.py,
    test_gcs.py): the inputs (already below `data/`) on a read-only mount of BUCKET/data,
    `--directory` on a mount of BUCKET/smk, unmounted at the end when the run passed.
    `factory(bucket, prefix, read_only=...)` mounts; `store` names it in messages."""
    data = factory(bucket, "data", read_only=True)
    smk = factory(bucket, "smk")
    run = run_engine(snakemake_cmd(data.path, smk.path), cwd=factory.work_dir, timeout=ENGINE_TIMEOUT)
    print(f"\nSnakemake on {store}, --directory on flowfs: {run.wall_s:.1f}s")
    vcf = smk.path / "results" / "annotated.vcf.gz"
    records = vcf_records(vcf) if run.ok and vcf.exists() else None
    um = smk.unmount(timeout=300) if run.ok else None
    return {"run": run, "records": records, "unmount": um, "factory": factory, "data": data,
            "bucket": bucket, "store": store}


def assert_store_snakemake_matches(r: dict, local_reference: list[str]) -> None:
    logs = "\n".join(m.log_text()[-3000:] for m in r["factory"].mounts)
    assert r["run"].ok, f"Snakemake on a {r['store']} mount failed: {r['run'].describe()}\n{logs}"
    assert r["records"] == local_reference, diff_records(r["records"] or [], local_reference)
    assert r["unmount"] is not None and r["unmount"].returncode == 0, r["unmount"]


def assert_store_snakemake_nothing_to_rerun(r: dict, local_reference: list[str]) -> None:
    """A new mount of the run's directory: `snakemake -n` finds nothing to do."""
    assert r["run"].ok, f"the Snakemake run on {r['store']} failed (see the test that compares its records)"
    smk2 = r["factory"](r["bucket"], "smk")
    d = r["factory"].work_dir / "dry-run"
    dry = run_engine(snakemake_cmd(r["data"].path, smk2.path, extra=["-n"]), cwd=d, timeout=300)
    assert dry.ok, f"snakemake -n on the remounted directory failed: {dry.describe()}"
    assert "Nothing to be done" in dry.output, f"Snakemake wants to rerun jobs after a remount:\n{dry.output[-4000:]}"
    assert vcf_records(smk2.path / "results" / "annotated.vcf.gz") == local_reference
