"""Running the external exercisers (fsx, pjdfstest) under a timeout, always stopped.

Each tool runs in its own process group (start_new_session) that is registered with the
seaweed module's atexit net, so a timeout, a failed assertion or an interrupted session
stops it (SIGTERM to the group, then SIGKILL) before the mount fixture unmounts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from seaweed import _set_pdeathsig, register_group, stop_group


def tool(name: str) -> str:
    """Path of an exerciser installed by scripts/setup.sh: the copy `cargo install` put in
    $CARGO_HOME/bin (~/.cargo/bin) first (another `fsx` may be on PATH), then PATH. Fails
    the test when there is none."""
    cargo_home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    candidate = cargo_home / "bin" / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"{name} not found in {cargo_home / 'bin'} or on PATH: run `make setup` "
                f"(scripts/setup.sh installs it with cargo install)", pytrace=False)


@dataclass
class ToolRun:
    args: list[str]
    returncode: int | None  # None: killed at the timeout
    seconds: float
    stdout_file: Path
    stderr_file: Path

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def stdout(self) -> str:
        return self.stdout_file.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_file.read_text(errors="replace")


class ToolProcess:
    """A started exerciser; `wait()` enforces the deadline given at start."""

    def __init__(self, args: list[str], out_prefix: Path, timeout: float, cwd: Path | None = None,
                 env: dict[str, str] | None = None):
        self.args = args
        self.timeout = timeout
        self.stdout_file = out_prefix.with_name(out_prefix.name + ".stdout")
        self.stderr_file = out_prefix.with_name(out_prefix.name + ".stderr")
        full_env = dict(os.environ)
        full_env["NO_COLOR"] = "1"
        full_env.update(env or {})
        with open(self.stdout_file, "wb") as out, open(self.stderr_file, "wb") as err:
            self.start = time.monotonic()
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         cwd=cwd, env=full_env, start_new_session=True,
                                         preexec_fn=_set_pdeathsig)
        register_group(self.proc.pid, f"{Path(args[0]).name} {out_prefix.name}")
        self.end: float | None = None  # when it exited, seen by a reaper thread
        self._exited = threading.Event()
        threading.Thread(target=self._reap, name=f"reap-{self.proc.pid}", daemon=True).start()

    def _reap(self) -> None:
        self.proc.wait()
        self.end = time.monotonic()
        self._exited.set()

    def wait(self) -> ToolRun:
        remaining = self.timeout - (time.monotonic() - self.start)
        try:
            rc: int | None = self.proc.returncode if self._exited.wait(max(remaining, 0.1)) else None
        finally:
            stop_group(self.proc, timeout=10)  # also kills what it left in its group, unregisters it
        end = self.end if rc is not None and self.end is not None else time.monotonic()
        return ToolRun(self.args, rc, end - self.start, self.stdout_file, self.stderr_file)

    def stop(self) -> None:
        stop_group(self.proc, timeout=10)


def run_tool(args: list[str], out_prefix: Path, timeout: float, **kw) -> ToolRun:
    return ToolProcess(args, out_prefix, timeout, **kw).wait()


def tail(text: str, lines: int) -> str:
    rows = text.rstrip("\n").splitlines()
    head = f"[... {len(rows) - lines} earlier lines ...]\n" if len(rows) > lines else ""
    return head + "\n".join(rows[-lines:])
