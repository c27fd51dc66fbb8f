"""Run the flowfs binary against the test server and always clean up its mounts.

Every mount made here is recorded; `Mount.close()` unmounts it (`flowfs unmount DIR`,
falling back to `fusermount3 -u -z DIR`) and stops the flowfs process it started (by the
pid from --pid-file or the foreground child's pid, never by name). `cleanup_all()` is the
atexit / session safety net, and `sweep_stale_mounts()` removes mounts left behind by an
earlier test session that died (only under this harness's own temp-dir prefix, only when
that session's pid is gone).
"""

from __future__ import annotations

import atexit
import errno
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from seaweed import clean_env, stop_group

TMP_PREFIX = "flowfs-it-"
SESSION_PID_FILE = "session.pid"

_MOUNTS: list["Mount"] = []
_MOUNTS_LOCK = threading.Lock()


def flowfs_bin() -> str:
    default = Path(__file__).resolve().parents[2] / "target" / "release" / "flowfs"
    return os.environ.get("FLOWFS_BIN") or str(default)


def _unescape_mount_field(s: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal.
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def proc_mounts() -> list[tuple[str, str, str, str]]:
    """(source, mountpoint, fstype, options) for every line of /proc/mounts."""
    rows = []
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4:
                rows.append((_unescape_mount_field(parts[0]), _unescape_mount_field(parts[1]), parts[2], parts[3]))
    return rows


def mount_entry(mountpoint: str | os.PathLike) -> tuple[str, str, str, str] | None:
    target = os.path.realpath(mountpoint) if os.path.exists(mountpoint) else os.path.abspath(mountpoint)
    for row in proc_mounts():
        if row[1] == target or row[1] == os.path.abspath(mountpoint):
            return row
    return None


def is_mounted(mountpoint: str | os.PathLike) -> bool:
    return mount_entry(mountpoint) is not None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def pids_serving(mountpoint: str) -> list[int]:
    """flowfs processes whose command line names this (unique, per-test) mountpoint."""
    mp = os.path.abspath(mountpoint)
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        args = _cmdline(int(d))
        if args and os.path.basename(args[0]) == "flowfs" and "mount" in args and mp in args:
            if _pid_alive(int(d)):
                found.append(int(d))
    return found


def wait_killed(m: "Mount", pid: int, what: str, timeout: float = 15.0) -> None:
    """After a SIGKILL of flowfs `pid`: waits until the process is gone and its mount too
    (auto_unmount removes it; else it is unmounted here); a hang fails the test."""
    import pytest

    deadline = time.monotonic() + timeout
    while (_pid_alive(pid) or is_mounted(m.path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_mounted(m.path):  # auto_unmount did not remove it
        force_unmount(str(m.path))
    if _pid_alive(pid) or is_mounted(m.path):
        pytest.fail(f"HANG: {what}: {timeout:.0f} s after SIGKILL, flowfs {pid} alive: {_pid_alive(pid)}, "
                    f"mounted: {is_mounted(m.path)}", pytrace=False)


def force_unmount(mountpoint: str) -> None:
    subprocess.run(["fusermount3", "-u", "-z", mountpoint], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
    if is_mounted(mountpoint):
        subprocess.run(["umount", "-l", mountpoint], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=False)


def _kill_pid(pid: int, timeout: float = 10.0) -> None:
    """Stop one flowfs process (and its group if it leads one)."""
    if not _pid_alive(pid):
        return
    args = _cmdline(pid)
    if not args or os.path.basename(args[0]) != "flowfs":
        return  # pid reused by something else: not ours
    try:
        group = os.getpgid(pid) == pid
    except ProcessLookupError:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return
            time.sleep(0.1)


@dataclass
class MountResult:
    """What a `flowfs mount` invocation did (for tests that expect it to fail)."""
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Mount:
    path: Path
    source: str
    cache_dir: Path
    log_file: Path
    pid_file: Path
    env: dict[str, str]
    proc: subprocess.Popen | None = None  # foreground mode only
    result: MountResult | None = None
    closed: bool = False
    unmount_result: subprocess.CompletedProcess | None = field(default=None, repr=False)

    def __fspath__(self) -> str:
        return str(self.path)

    def __truediv__(self, other) -> Path:
        return self.path / other

    def daemon_pid(self) -> int | None:
        if self.proc is not None:
            return self.proc.pid
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def log_text(self, secret: str | None = None) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "<no log file>"
        return text.replace(secret, "<secret>") if secret else text

    def unmount(self, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """`flowfs unmount DIR`; the result is returned, nothing is asserted."""
        r = subprocess.run([flowfs_bin(), "unmount", str(self.path)], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=timeout, env=self.env, check=False)
        self.unmount_result = r
        return r

    def close(self) -> None:
        """Unmount and stop the process, whatever state things are in. Idempotent."""
        if self.closed:
            return
        try:
            if is_mounted(self.path):
                try:
                    self.unmount()
                except (subprocess.TimeoutExpired, OSError):
                    pass
            if is_mounted(self.path):
                force_unmount(str(self.path))
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    stop_group(self.proc, timeout=10)
            pid = self.daemon_pid()
            if pid is not None:
                deadline = time.monotonic() + 10
                while _pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                _kill_pid(pid)
            for pid in pids_serving(str(self.path)):
                _kill_pid(pid)
            if is_mounted(self.path):
                force_unmount(str(self.path))
        finally:
            self.closed = True
            with _MOUNTS_LOCK:
                if self in _MOUNTS:
                    _MOUNTS.remove(self)


def mount_args(source: str, mountpoint: Path, *, cache_dir: Path | None, log_file: Path | None,
               pid_file: Path | None, endpoint: str | None, extra: list[str] | tuple[str, ...] = (),
               read_only: bool = False, foreground: bool = False) -> list[str]:
    args = [flowfs_bin(), "mount", source, str(mountpoint)]
    if cache_dir is not None:
        args += ["--cache-dir", str(cache_dir)]
    if endpoint is not None:
        args += ["--endpoint-url", endpoint]
    if log_file is not None:
        args += ["--log-file", str(log_file)]
    if pid_file is not None:
        args += ["--pid-file", str(pid_file)]
    if read_only:
        args.append("--read-only")
    if foreground:
        args.append("--foreground")
    args += list(extra)
    return args


def run_mount(args: list[str], env: dict[str, str], timeout: float = 120.0) -> MountResult:
    r = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout, env=clean_env(env), check=False)
    return MountResult(args, r.returncode, r.stdout, r.stderr)


def start_mount(source: str, mountpoint: Path, *, work_dir: Path, env: dict[str, str],
                endpoint: str | None = None, cache_dir: Path | None = None, read_only: bool = False,
                foreground: bool = False, extra: list[str] | tuple[str, ...] = (),
                timeout: float = 120.0) -> Mount:
    """Mount and return a registered Mount; raises (with stderr and log) when it fails."""
    work_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = cache_dir or (work_dir / "cache")
    cache_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(work_dir.glob("flowfs-*.log")))
    log_file = work_dir / f"flowfs-{n}.log"
    pid_file = work_dir / f"flowfs-{n}.pid"
    m = Mount(mountpoint, source, cache_dir, log_file, pid_file, clean_env(env))
    args = mount_args(source, mountpoint, cache_dir=cache_dir, log_file=log_file, pid_file=pid_file,
                      endpoint=endpoint, extra=extra, read_only=read_only, foreground=foreground)
    with _MOUNTS_LOCK:
        _MOUNTS.append(m)  # registered before starting: cleanup covers a half-started mount
    if not foreground:
        m.result = run_mount(args, env, timeout=timeout)
        if m.result.returncode != 0 or not is_mounted(mountpoint):
            detail = (f"flowfs mount failed: exit {m.result.returncode}, mounted={is_mounted(mountpoint)}\n"
                      f"stderr: {m.result.stderr.strip()}\nlog:\n{m.log_text(env.get('AWS_SECRET_ACCESS_KEY'))[-4000:]}")
            m.close()
            raise MountError(detail)
        return m
    out = open(work_dir / f"flowfs-{n}.stderr", "wb")
    m.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              env=m.env, start_new_session=True)
    out.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_mounted(mountpoint):
            return m
        if m.proc.poll() is not None:
            break
        time.sleep(0.05)
    err = (work_dir / f"flowfs-{n}.stderr").read_text(errors="replace")
    m.close()
    raise MountError(f"flowfs --foreground did not mount (exit {m.proc.returncode}): {err.strip()}\n"
                     f"log:\n{m.log_text(env.get('AWS_SECRET_ACCESS_KEY'))[-4000:]}")


class MountError(RuntimeError):
    pass


def cleanup_all() -> None:
    with _MOUNTS_LOCK:
        mounts = list(_MOUNTS)
    for m in mounts:
        try:
            m.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(cleanup_all)


def sweep_stale_mounts(tmp_root: str) -> list[str]:
    """Unmount FUSE mounts under TMP_PREFIX dirs whose owning test session is dead."""
    swept = []
    for _src, mp, fstype, _opts in proc_mounts():
        if not fstype.startswith("fuse"):
            continue
        if not mp.startswith(os.path.join(tmp_root, TMP_PREFIX)):
            continue
        session_dir = Path(tmp_root) / Path(mp).relative_to(tmp_root).parts[0]
        try:
            owner = int((session_dir / SESSION_PID_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and _pid_alive(owner):
            continue  # another live session's mount
        for pid in pids_serving(mp):
            _kill_pid(pid)
        force_unmount(mp)
        swept.append(mp)
    return swept


def sweep_stale_session_dirs(tmp_root: str) -> list[str]:
    """Remove temp dirs of dead test sessions (server data, caches, logs) that have no
    mount under them. Run after sweep_stale_mounts()."""
    import shutil

    removed = []
    mounted = [mp for _s, mp, _t, _o in proc_mounts()]
    for d in Path(tmp_root).glob(TMP_PREFIX + "*"):
        if not d.is_dir() or any(mp == str(d) or mp.startswith(str(d) + "/") for mp in mounted):
            continue
        try:
            owner = int((d / SESSION_PID_FILE).read_text())
        except (OSError, ValueError):
            continue  # not a test session's dir (or one just starting): not ours to judge
        if _pid_alive(owner):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    return removed


def errno_of(fn, *args, **kwargs) -> int | None:
    """Run fn; return the errno of the OSError it raised, or None if it succeeded."""
    try:
        fn(*args, **kwargs)
    except OSError as e:
        return e.errno
    return None


__all__ = ["Mount", "MountError", "MountResult", "start_mount", "run_mount", "mount_args", "is_mounted",
           "mount_entry", "cleanup_all", "sweep_stale_mounts", "sweep_stale_session_dirs", "errno_of", "flowfs_bin", "pids_serving",
           "force_unmount", "wait_killed", "errno"]
