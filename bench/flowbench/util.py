"""Process, timing and cleanup helpers shared by the benchmark driver (stdlib only)."""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
T0 = time.monotonic()
HOST = "127.0.0.1"

# ---------------------------------------------------------------- progress


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def save_results(out: str, name: str, payload: dict) -> Path:
    """Writes `payload` as OUT/NAME-<date>-<time>.json (the record of a benchmark run); its path."""
    import datetime as dt
    import json

    Path(out).mkdir(parents=True, exist_ok=True)
    path = Path(out) / f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(payload, indent=1))
    return path


def parse_size(s: str) -> int:
    """A size as the benchmarks' options take it: 256M, 2G, 512K or plain bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * units[s[-1].upper()]) if s[-1].upper() in units else int(s)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f}".rstrip("0").rstrip(".") + f" {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def redact(text: str, secrets_: list[str]) -> str:
    for s in secrets_:
        if s:
            text = text.replace(s, "<secret>")
    return text


def tail(path: Path | str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- /proc readers


def proc_cpu_s(pid: int) -> float | None:
    """utime+stime of the process and of its reaped children, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is state (field 3); utime..cstime are fields 14..17
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def proc_status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _pdeathsig() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


# ---------------------------------------------------------------- child processes with rusage


@dataclass
class Child:
    """A child process reaped with wait4, so its exact CPU time and peak RSS are known."""

    name: str
    popen: subprocess.Popen
    t_start: float = field(default_factory=time.monotonic)
    t_end: float | None = None
    returncode: int | None = None
    cpu_s: float | None = None  # user+sys of it and its reaped descendants, once exited
    maxrss_kib: int | None = None
    _last_cpu: float = 0.0
    _last_hwm: int = 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        # sample while alive: the last sample stands in if someone else reaps it
        c = proc_cpu_s(self.pid)
        if c is not None:
            self._last_cpu = max(self._last_cpu, c)
        h = proc_status_kib(self.pid, "VmHWM")
        if h:
            self._last_hwm = max(self._last_hwm, h)
        try:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._finish(-1, None)
            return self.returncode
        if pid == 0:
            return None
        self._finish(os.waitstatus_to_exitcode(status), ru)
        return self.returncode

    def _finish(self, rc: int, ru) -> None:
        self.returncode = rc
        self.popen.returncode = rc  # keep Popen from reaping it again
        self.t_end = time.monotonic()
        if ru is not None:
            self.cpu_s = ru.ru_utime + ru.ru_stime
            self.maxrss_kib = ru.ru_maxrss
        else:
            self.cpu_s = self._last_cpu
            self.maxrss_kib = self._last_hwm
        _unregister_child(self)

    def wait(self, timeout: float | None = None, poll_s: float = 0.02) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rc = self.poll()
            if rc is not None:
                return rc
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)

    def tree(self) -> list[int]:
        """This process and its live descendants (some tools run the file system in a child)."""
        return [self.pid] + descendants(self.pid)

    def cpu_now(self) -> float:
        """CPU seconds so far of the whole process tree (live ones plus those already reaped)."""
        if self.returncode is not None:
            return self.cpu_s or 0.0
        total, seen = 0.0, False
        for p in self.tree():
            c = proc_cpu_s(p)
            if c is not None:
                total += c
                seen = seen or p == self.pid
        if not seen:
            self.poll()
            return self.cpu_s if self.cpu_s is not None else self._last_cpu
        self._last_cpu = total
        return total

    def peak_rss_kib(self) -> int | None:
        """Peak RSS (VmHWM) summed over the process tree; ru_maxrss once it has exited."""
        if self.returncode is not None:
            return max(self.maxrss_kib or 0, self._last_hwm) or None
        total = sum(proc_status_kib(p, "VmHWM") or 0 for p in self.tree())
        if total:
            self._last_hwm = max(self._last_hwm, total)
            return self._last_hwm
        self.poll()
        return max(self.maxrss_kib or 0, self._last_hwm) or None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the child's own process group, then SIGKILL; by pid only."""
        if self.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    pass
            if self.wait(timeout) is not None:
                return
        self.wait(5)


_CHILDREN: dict[int, Child] = {}
_MOUNTS: dict[str, str] = {}
_LOCK = threading.Lock()


def _unregister_child(c: Child) -> None:
    with _LOCK:
        _CHILDREN.pop(c.pid, None)


def spawn(name: str, cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
          stdin=subprocess.DEVNULL, stdout=None, stderr=None, new_session: bool = True) -> Child:
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                         start_new_session=new_session, preexec_fn=_pdeathsig)
    c = Child(name, p)
    with _LOCK:
        _CHILDREN[p.pid] = c
    return c


@dataclass
class RunResult:
    returncode: int | None
    wall_s: float
    cpu_s: float
    maxrss_kib: int
    stderr: str
    timed_out: bool = False


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600, cwd=None,
        stdout_path: str | None = None, secrets_: list[str] | None = None, name: str | None = None,
        on_timeout=None) -> RunResult:
    """Run one command; wall time, CPU (user+sys incl. descendants) and peak RSS via wait4."""
    import tempfile

    with tempfile.TemporaryFile() as err:
        out = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
        try:
            t0 = time.monotonic()
            c = spawn(name or os.path.basename(cmd[0]), cmd, env=env, cwd=cwd, stdout=out, stderr=err)
            rc = c.wait(timeout)
            wall = time.monotonic() - t0
            timed_out = rc is None
            if timed_out:
                if on_timeout is not None:
                    on_timeout()  # e.g. abort the mount a reader is stuck on
                c.stop()
        finally:
            if stdout_path:
                out.close()
        err.seek(0)
        text = err.read()[-4000:].decode(errors="replace")
    return RunResult(c.returncode, wall, c.cpu_s or 0.0, c.maxrss_kib or 0,
                     redact(text, secrets_ or []), timed_out)


@dataclass
class PipeResult:
    ok: bool
    wall_s: float
    first: RunResult
    second: RunResult


def run_pipe(cmd1: list[str], cmd2: list[str], *, env1=None, env2=None, timeout: float = 600, cwd=None,
             secrets_: list[str] | None = None) -> PipeResult:
    """cmd1 | cmd2, each reaped with wait4 (rusage per side)."""
    import tempfile

    e1, e2 = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    try:
        r, w = os.pipe()
        t0 = time.monotonic()
        c1 = spawn(os.path.basename(cmd1[0]), cmd1, env=env1, cwd=cwd, stdout=w, stderr=e1)
        c2 = spawn(os.path.basename(cmd2[0]), cmd2, env=env2, cwd=cwd, stdin=r, stdout=subprocess.DEVNULL,
                   stderr=e2)
        os.close(r)
        os.close(w)
        deadline = t0 + timeout
        timed_out = False
        while c1.poll() is None or c2.poll() is None:
            if time.monotonic() > deadline:
                timed_out = True
                c1.stop()
                c2.stop()
                break
            time.sleep(0.02)
        wall = time.monotonic() - t0
        res = []
        for c, e in ((c1, e1), (c2, e2)):
            e.seek(0)
            res.append(RunResult(c.returncode, wall, c.cpu_s or 0.0, c.maxrss_kib or 0,
                                 redact(e.read()[-3000:].decode(errors="replace"), secrets_ or []), timed_out))
        ok = not timed_out and res[0].returncode == 0 and res[1].returncode == 0
        return PipeResult(ok, wall, res[0], res[1])
    finally:
        e1.close()
        e2.close()


# ---------------------------------------------------------------- mounts


def proc_mountpoints() -> set[str]:
    out = set()
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                out.add(parts[1].replace("\\040", " "))
    return out


def is_mounted(path: str | Path) -> bool:
    return os.path.abspath(path) in proc_mountpoints()


def register_mount(path: str | Path, what: str) -> None:
    with _LOCK:
        _MOUNTS[os.path.abspath(path)] = what


def unregister_mount(path: str | Path) -> None:
    with _LOCK:
        _MOUNTS.pop(os.path.abspath(path), None)


def force_unmount(path: str | Path) -> None:
    p = str(path)
    for cmd in (["fusermount3", "-u", "-z", p], ["fusermount", "-u", "-z", p], ["umount", "-l", p]):
        if not is_mounted(p):
            return
        if shutil.which(cmd[0]):
            subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=30, check=False)


def fuse_unmount(path: str | Path, timeout: float = 60) -> bool:
    """A clean (non-lazy) unmount; False if it is still mounted afterwards."""
    p = str(path)
    if not is_mounted(p):
        return True
    tool = "fusermount3" if shutil.which("fusermount3") else "fusermount"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        subprocess.run([tool, "-u", p], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout, check=False)
        if not is_mounted(p):
            return True
        time.sleep(0.3)  # EBUSY: a straggling reader
    return not is_mounted(p)


# ---------------------------------------------------------------- cleanup


_CLEANUPS: list = []


def on_cleanup(fn) -> None:
    _CLEANUPS.append(fn)


def cleanup_all() -> None:
    """Unmount every mount and stop every process this driver started.

    Safe to call again (atexit after finally, or after a second Ctrl-C): each mount and
    process leaves the registry once handled, so a repeated call finishes the rest.
    """
    while True:
        with _LOCK:
            mounts = list(_MOUNTS)
        if not mounts:
            break
        m = mounts[0]
        try:
            force_unmount(m)
        except Exception:  # noqa: BLE001 - best effort
            pass
        unregister_mount(m)
    while True:
        with _LOCK:
            children = list(_CHILDREN.values())
        if not children:
            break
        c = children[0]
        try:
            c.stop(timeout=5)
        except Exception:  # noqa: BLE001
            pass
        _unregister_child(c)
    while _CLEANUPS:
        fn = _CLEANUPS.pop()
        try:
            fn()
        except Exception:  # noqa: BLE001
            pass


def install_signal_handlers() -> None:
    atexit.register(cleanup_all)

    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


# ---------------------------------------------------------------- misc


def drop_caches() -> bool:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def rm_rf(path: str | Path) -> None:
    p = Path(path)
    if p.is_symlink() or p.is_file():
        p.unlink(missing_ok=True)
    elif p.exists():
        root = os.path.abspath(p)
        if any(m == root or m.startswith(root + "/") for m in proc_mountpoints()):
            raise RuntimeError(f"refusing to delete {p}: a mount is still inside it")
        shutil.rmtree(p, ignore_errors=True)


def median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def python_exe() -> str:
    return sys.executable
