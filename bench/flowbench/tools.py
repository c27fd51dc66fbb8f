"""The tools under test: two command-line copiers and the FUSE mounts.

Every tool talks to the counting proxy (ctx.server.endpoint), never to SeaweedFS directly.
Mounts run in the foreground as children of the driver (each in its own session), so their
CPU time and peak RSS come exactly from wait4 once they exit, and from /proc while alive.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import util
from .server import BUCKET, REGION

READ_WORKLOADS = {"B1", "B1s", "B1p", "B1c", "B2", "B3", "B4", "B8"}
WRITE_WORKLOADS = {"B5", "B6"}
ALL_WORKLOADS = READ_WORKLOADS | WRITE_WORKLOADS
WORKFLOW_WORKLOADS = {"B7"}  # a pipeline with its work dir on a writable mount (flowbench/b7.py)
ARCHIVE_WORKLOADS = {"B11"}  # an archive object mounted in place (flowbench/b11.py): flowfs, ratarmount


class MountError(RuntimeError):
    pass


@dataclass
class Tool:
    name: str
    kind: str = "cli"  # "cli" or "mount"
    workloads: set[str] = field(default_factory=lambda: set(ALL_WORKLOADS))
    install: str = ""  # key in install.ensure()
    unavailable: str | None = None  # set when install failed / not installable
    version: str = ""
    note: str = ""

    def supports(self, w: str) -> bool:
        return w in self.workloads


# ====================================================================== command-line tools


@dataclass
class CliTool(Tool):
    exe: str = ""

    def env(self, ctx) -> dict[str, str]:
        return ctx.server.env()


@dataclass
class S5cmd(CliTool):
    def _base(self, ctx) -> list[str]:
        # 64 workers: the baseline issue 2 names for B1 (s5cmd's default is 256).
        return [self.exe, "--endpoint-url", ctx.server.endpoint, "--numworkers", "64"]

    def get_prefix(self, ctx, prefix: str, dest: Path) -> list[str]:
        return self._base(ctx) + ["cp", f"s3://{BUCKET}/{prefix}*", f"{dest}/"]

    def stream(self, ctx, key: str) -> list[str]:
        return self._base(ctx) + ["cat", f"s3://{BUCKET}/{key}"]

    def list_prefix(self, ctx, prefix: str) -> list[str]:
        # One flat listing, no delimiter: what a copier that knows every key runs.
        return self._base(ctx) + ["ls", f"s3://{BUCKET}/{prefix}*"]

    def get(self, ctx, key: str, dest: Path) -> list[str]:
        return self._base(ctx) + ["cp", f"s3://{BUCKET}/{key}", str(dest)]

    def put_dir(self, ctx, src: Path, prefix: str) -> list[str]:
        return self._base(ctx) + ["cp", f"{src}/*", f"s3://{BUCKET}/{prefix}"]

    def put(self, ctx, src: Path, key: str) -> list[str]:
        return self._base(ctx) + ["cp", str(src), f"s3://{BUCKET}/{key}"]


@dataclass
class Aws(CliTool):
    max_concurrent: int | None = None  # None: the CLI's default (10)

    def env(self, ctx) -> dict[str, str]:
        cfg = ctx.work / f"aws-{self.name}.config"
        if not cfg.exists():
            lines = ["[default]", f"region = {REGION}"]
            if self.max_concurrent:
                lines += ["s3 =", f"    max_concurrent_requests = {self.max_concurrent}"]
            cfg.write_text("\n".join(lines) + "\n")
        return ctx.server.env({"AWS_CONFIG_FILE": str(cfg),
                               "AWS_SHARED_CREDENTIALS_FILE": str(ctx.work / "aws-no-credentials")})

    def _cp(self, ctx, *args: str) -> list[str]:
        return [self.exe, "--endpoint-url", ctx.server.endpoint, "s3", "cp", "--only-show-errors", *args]

    def get_prefix(self, ctx, prefix: str, dest: Path) -> list[str]:
        return self._cp(ctx, "--recursive", f"s3://{BUCKET}/{prefix}", f"{dest}/")

    def stream(self, ctx, key: str) -> list[str]:
        return self._cp(ctx, f"s3://{BUCKET}/{key}", "-")

    def list_prefix(self, ctx, prefix: str) -> list[str]:
        return [self.exe, "--endpoint-url", ctx.server.endpoint, "s3", "ls", "--recursive", f"s3://{BUCKET}/{prefix}"]

    def get(self, ctx, key: str, dest: Path) -> list[str]:
        return self._cp(ctx, f"s3://{BUCKET}/{key}", str(dest))

    def put_dir(self, ctx, src: Path, prefix: str) -> list[str]:
        return self._cp(ctx, "--recursive", f"{src}/", f"s3://{BUCKET}/{prefix}")

    def put(self, ctx, src: Path, key: str) -> list[str]:
        return self._cp(ctx, str(src), f"s3://{BUCKET}/{key}")


# ====================================================================== mounts


@dataclass
class MountHandle:
    tool: "MountTool"
    path: Path
    child: util.Child
    cache_dir: Path
    log: Path
    mount_s: float = 0.0
    closed: bool = False
    # flowfs: its usage report, written at its unmount
    usage_at_unmount: dict | None = None

    def cpu_now(self) -> float:
        return self.child.cpu_now()

    def peak_rss_mib(self) -> float | None:
        k = self.child.peak_rss_kib()
        return None if not k else k / 1024

    def log_tail(self, ctx, n: int = 1500) -> str:
        return util.redact(util.tail(self.log, n), ctx.server.secrets).strip()

    def unmount(self, ctx, timeout: float = 120) -> tuple[bool, float, str]:
        """Clean unmount; waits for the daemon to exit. (ok, seconds, error)."""
        t0 = time.monotonic()
        err = ""
        if self.closed:
            return True, 0.0, ""
        try:
            ok, err = self.tool.unmount_cmd(ctx, self, timeout)
            if self.child.wait(timeout) is None:
                ok, err = False, (err + "; daemon did not exit after unmount").strip("; ")
        except subprocess.TimeoutExpired:
            ok, err = False, "unmount timed out"
        dt = time.monotonic() - t0
        if not ok:
            self.abort()
        else:
            util.unregister_mount(self.path)
            self.closed = True
        return ok, dt, err

    def abort(self) -> None:
        """Kill the daemon and lazily unmount: unblocks anything stuck in the mount."""
        try:
            self.child.stop(timeout=5)
        finally:
            util.force_unmount(self.path)
            if not util.is_mounted(self.path):
                util.unregister_mount(self.path)
            self.closed = True


@dataclass
class MountTool(Tool):
    kind: str = "mount"
    exe: str = ""
    writable: bool = True
    # how a write becomes durable: "poll" (objects appear in the bucket by themselves),
    # "unmount" (the tool's own unmount is its durability point), "close" (close() is)
    durable: str = "poll"
    _fails: int = 0

    def __post_init__(self):
        if not self.writable:
            self.workloads = self.workloads & READ_WORKLOADS
        else:
            self.workloads = self.workloads | WORKFLOW_WORKLOADS

    # subclasses: the command and its environment
    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        raise NotImplementedError

    def env(self, ctx) -> dict[str, str]:
        return ctx.server.env()

    def unmount_cmd(self, ctx, h: MountHandle, timeout: float) -> tuple[bool, str]:
        ok = util.fuse_unmount(h.path, timeout)
        return ok, "" if ok else "fusermount -u failed (busy?)"

    def mount(self, ctx, tag: str, timeout: float = 60, cache: Path | None = None) -> MountHandle:
        """A fresh mount with an empty cache dir of its own, or on `cache` as it is (B11:
        a remount that finds the index the first mount kept there)."""
        if self._fails >= 2:
            raise MountError(f"not mounted: {self._fails} earlier mounts failed")
        base = ctx.work / "mounts" / f"{self.name}-{tag}"
        mnt, log = base / "mnt", base / "mount.log"
        util.rm_rf(base)
        mnt.mkdir(parents=True)
        if cache is None:
            cache = base / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        cmd = self.command(ctx, mnt, cache, log)
        util.register_mount(mnt, self.name)
        out = open(log, "ab")
        t0 = time.monotonic()
        child = util.spawn(self.name, cmd, env=self.env(ctx), cwd=base, stdout=out, stderr=out)
        out.close()
        h = MountHandle(self, mnt, child, cache, log)
        deadline = t0 + timeout
        while True:
            if util.is_mounted(mnt) and self.ready(h):
                h.mount_s = time.monotonic() - t0
                self._fails = 0
                return h
            rc = child.poll()
            if rc is not None or time.monotonic() > deadline:
                h.abort()
                self._fails += 1
                what = f"exited with code {rc}" if rc is not None else f"not mounted after {timeout:.0f}s"
                raise MountError(f"{self.name} mount {what}: {h.log_tail(ctx, 1200) or '(no output)'}")
            time.sleep(0.02)

    def ready(self, h: MountHandle) -> bool:
        return True


# ---------------------------------------------------------------------- flowfs


@dataclass
class FlowFS(MountTool):
    durable: str = "unmount"
    _help: str | None = None
    extra: tuple[str, ...] = ()  # more mount options (flowfs-nopt: --passthrough off)
    archive_key: str = ""  # B11: mount this archive object (s3://bench/KEY) instead of the bucket

    def __post_init__(self):
        super().__post_init__()
        self.workloads = self.workloads | ARCHIVE_WORKLOADS

    def of_archive(self, key: str) -> "FlowFS":
        """The same tool mounting the archive object `key` in place (read-only)."""
        return dataclasses.replace(self, archive_key=key)

    def clear_cache(self, ctx, cache: Path) -> None:
        """`flowfs cache clear`: every cached object goes, an archive's index stays
        (B11: cold data, index present)."""
        r = util.run([self.exe, "cache", "clear", str(cache)], env=self.env(ctx), timeout=300,
                     secrets_=ctx.server.secrets)
        if r.returncode != 0:
            raise MountError(f"flowfs cache clear exit {r.returncode}: {r.stderr.strip()[-400:]}")

    def _flags(self) -> str:
        if self._help is None:
            try:
                r = subprocess.run([self.exe, "mount", "--help"], capture_output=True, text=True, timeout=30,
                                   stdin=subprocess.DEVNULL)
                self._help = r.stdout + r.stderr
            except (OSError, subprocess.SubprocessError):
                self._help = ""
        return self._help

    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        source = f"s3://{BUCKET}/{self.archive_key}" if self.archive_key else f"s3://{BUCKET}"
        cmd = [self.exe, "mount", source, str(mnt), "--cache-dir", str(cache),
               "--endpoint-url", ctx.server.endpoint, "--region", REGION, "--foreground"]
        if "--log-file" in self._flags():
            cmd += ["--log-file", str(log.with_name("flowfs.log"))]
        if ctx.flowfs_cache_size and "--cache-size" in self._flags():
            cmd += ["--cache-size", ctx.flowfs_cache_size]
        return cmd + list(self.extra)

    def unmount_cmd(self, ctx, h: MountHandle, timeout: float) -> tuple[bool, str]:
        report = h.log.with_name("flowfs-report.json")
        # With its usage report when this build has one (flowfs-base may not).
        extra = ["--report", str(report)] if "report" in self._flags_of("unmount") else []
        r = subprocess.run([self.exe, "unmount", str(h.path), *extra], capture_output=True, text=True,
                           timeout=timeout, env=self.env(ctx), stdin=subprocess.DEVNULL)
        if r.returncode != 0 or util.is_mounted(h.path):
            msg = util.redact((r.stderr or r.stdout).strip(), ctx.server.secrets)[-600:]
            return False, f"flowfs unmount exit {r.returncode}: {msg}"
        try:
            h.usage_at_unmount = json.loads(report.read_text()) if extra else None
        except (OSError, ValueError, KeyError):
            h.usage_at_unmount = None
        return True, ""

    def _flags_of(self, sub: str) -> str:
        try:
            r = subprocess.run([self.exe, sub, "--help"], capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            return r.stdout + r.stderr
        except (OSError, subprocess.SubprocessError):
            return ""


# ---------------------------------------------------------------------- s3fs-fuse


@dataclass
class S3fs(MountTool):
    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        pw = ctx.work / "s3fs.passwd"
        if not pw.exists():
            fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"{ctx.server.access_key}:{ctx.server.secret_key}\n")
        opts = [f"url={ctx.server.endpoint}", "use_path_request_style", f"passwd_file={pw}",
                f"endpoint={REGION}", "dbglevel=warn"]
        return [self.exe, BUCKET, str(mnt), "-f", "-o", ",".join(opts)]

    def env(self, ctx) -> dict[str, str]:
        # credentials from the passwd file only
        return {k: v for k, v in ctx.server.env().items() if not k.startswith("AWS_")}


# ---------------------------------------------------------------------- rclone mount


@dataclass
class Rclone(MountTool):
    cache_mode: str = "off"

    def env(self, ctx) -> dict[str, str]:
        return ctx.server.env({
            "RCLONE_CONFIG_BENCH_TYPE": "s3",
            "RCLONE_CONFIG_BENCH_PROVIDER": "SeaweedFS",
            "RCLONE_CONFIG_BENCH_ENV_AUTH": "false",
            "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": ctx.server.access_key,
            "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": ctx.server.secret_key,
            "RCLONE_CONFIG_BENCH_ENDPOINT": ctx.server.endpoint,
            "RCLONE_CONFIG_BENCH_REGION": REGION,
            "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true",
        })

    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        conf = ctx.work / "rclone.conf"
        conf.touch()
        return [self.exe, "mount", f"bench:{BUCKET}", str(mnt), "--config", str(conf),
                "--vfs-cache-mode", self.cache_mode, "--cache-dir", str(cache), "--log-level", "NOTICE"]


# ---------------------------------------------------------------------- JuiceFS


@dataclass
class JuiceFS(MountTool):
    durable: str = "close"
    note: str = ("JuiceFS keeps its own chunk format in the bucket (prefix jfs/) and SQLite metadata: "
                 "the data set is imported through it first; writes are durable when close() returns.")

    def meta(self, ctx) -> str:
        return f"sqlite3://{ctx.work / 'juicefs-meta.db'}"

    def env(self, ctx) -> dict[str, str]:
        return ctx.server.env({"ACCESS_KEY": ctx.server.access_key, "SECRET_KEY": ctx.server.secret_key})

    def format(self, ctx) -> None:
        r = util.run([self.exe, "format", "--storage", "s3", "--bucket", f"{ctx.server.endpoint}/{BUCKET}",
                      "--trash-days", "0", "--no-update", self.meta(ctx), "jfs"],
                     env=self.env(ctx), timeout=120, secrets_=ctx.server.secrets)
        if r.returncode != 0:
            raise MountError(f"juicefs format failed: {r.stderr.strip()[-800:]}")

    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        return [self.exe, "mount", self.meta(ctx), str(mnt), "--cache-dir", str(cache), "--no-usage-report",
                "--backup-meta", "0", "--no-bgjob", "--log", str(log.with_name("juicefs.log"))]


# ---------------------------------------------------------------------- geesefs / mountpoint-s3


@dataclass
class Geesefs(MountTool):
    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        return [self.exe, "-f", "--endpoint", ctx.server.endpoint, "--region", REGION, BUCKET, str(mnt)]


@dataclass
class MountpointS3(MountTool):
    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        return [self.exe, BUCKET, str(mnt), "--foreground", "--endpoint-url", ctx.server.endpoint,
                "--force-path-style", "--region", REGION, "--allow-delete", "--allow-overwrite"]


# ---------------------------------------------------------------------- ratarmount (tar only)


@dataclass
class Ratarmount(MountTool):
    writable: bool = False
    key: str = "b2/many.tar"
    # B2: the index in memory (built by every mount). B11: kept in the mount's cache dir
    # (CACHE/ratarmount.index.sqlite), where a remount on that cache dir finds it.
    keep_index: bool = False
    note: str = ("B2 and B11: mounts the tar (B11: also the tar.gz, through rapidgzip, which its wheel "
                 "brings) object itself (via fsspec/s3fs); wall time includes building its index.")

    def __post_init__(self):
        self.workloads = {"B2"} | ARCHIVE_WORKLOADS

    def of_archive(self, key: str) -> "Ratarmount":
        return dataclasses.replace(self, key=key, keep_index=True)

    def env(self, ctx) -> dict[str, str]:
        return ctx.server.env({"FSSPEC_S3_ENDPOINT_URL": ctx.server.endpoint})

    def command(self, ctx, mnt: Path, cache: Path, log: Path) -> list[str]:
        index = str(cache / "ratarmount.index.sqlite") if self.keep_index else ":memory:"
        return [self.exe, "-f", "--index-file", index, f"s3://{BUCKET}/{self.key}", str(mnt)]


# ---------------------------------------------------------------------- local disk (B7, B5)


@dataclass
class LocalDisk(Tool):
    """No object storage at all: B7's baseline, the pipeline's work dir on local disk."""
    kind: str = "local"
    note: str = ("B7: inputs and work dir on local disk, the baseline of B7; B5: the same files written "
                 "into a local directory (the write phase's baseline), durable at `sync -f`")

    def __post_init__(self):
        self.workloads = set(WORKFLOW_WORKLOADS) | {"B5"}


# ====================================================================== registry

# Mount options of the flowfs variants: (extra arguments, note).
FLOWFS_VARIANTS = {
    "flowfs-nopt": (("--passthrough", "off"), "flowfs with --passthrough off"),
    "flowfs-durable": (("--durability", "local"), "flowfs with --durability local"),
    "flowfs-c64": (("--max-concurrency", "64"), "flowfs with --max-concurrency 64 (s5cmd's 64 workers)"),
    "flowfs-reuse": (("--cache-admit", "reuse"), "flowfs with --cache-admit reuse"),
    "flowfs-always": (("--cache-admit", "always"), "flowfs with --cache-admit always"),
}

TOOL_ORDER = ["local", "s5cmd", "aws", "aws-mc8", "flowfs", "flowfs-nopt", "flowfs-durable", "flowfs-c64", "flowfs-reuse", "flowfs-always", "flowfs-base", "s3fs", "rclone", "rclone-full", "juicefs", "ratarmount",
              "geesefs", "mountpoint-s3"]


def make_tools(names: list[str], flowfs_bin: str) -> list[Tool]:
    out: list[Tool] = []
    for n in names:
        if n == "local":
            out.append(LocalDisk("local"))
        elif n == "s5cmd":
            out.append(S5cmd("s5cmd", install="s5cmd"))
        elif n == "aws":
            out.append(Aws("aws", install="awscli", note="aws cli v1, default settings"))
        elif n == "aws-mc8":
            out.append(Aws("aws-mc8", install="awscli", max_concurrent=8,
                           note="aws cli v1, s3.max_concurrent_requests = 8"))
        elif n == "flowfs":
            t = FlowFS("flowfs", exe=flowfs_bin)
            if not os.access(flowfs_bin, os.X_OK):
                t.unavailable = f"flowfs binary not found at {flowfs_bin} (cargo build --release)"
            out.append(t)
        elif n in FLOWFS_VARIANTS:
            # The same build with other mount options, in the same run: what an option
            # changes (flowfs-nopt: passthrough off; flowfs-durable: --durability local).
            extra, note = FLOWFS_VARIANTS[n]
            t = FlowFS(n, exe=flowfs_bin, extra=extra, note=note)
            if not os.access(flowfs_bin, os.X_OK):
                t.unavailable = f"flowfs binary not found at {flowfs_bin} (cargo build --release)"
            out.append(t)
        elif n == "flowfs-base":
            # The build before a change, in the same run (FLOWFS_BASE_BIN): a change is
            # measured against it, never against figures from another day.
            base = os.environ.get("FLOWFS_BASE_BIN", "")
            t = FlowFS("flowfs-base", exe=base, note="the build before the change (FLOWFS_BASE_BIN)")
            if not base or not os.access(base, os.X_OK):
                t.unavailable = "set FLOWFS_BASE_BIN to the flowfs binary of the build before"
            out.append(t)
        elif n == "s3fs":
            out.append(S3fs("s3fs", install="s3fs"))
        elif n == "rclone":
            out.append(Rclone("rclone", install="rclone", cache_mode="off", note="--vfs-cache-mode off"))
        elif n == "rclone-full":
            out.append(Rclone("rclone-full", install="rclone", cache_mode="full",
                              note="--vfs-cache-mode full (default 5 s write-back)"))
        elif n == "juicefs":
            out.append(JuiceFS("juicefs", install="juicefs"))
        elif n == "ratarmount":
            out.append(Ratarmount("ratarmount", install="ratarmount"))
        elif n == "geesefs":
            out.append(Geesefs("geesefs", install="geesefs"))
        elif n == "mountpoint-s3":
            out.append(MountpointS3("mountpoint-s3", install="mount-s3",
                                    note="mount-s3 writes new files sequentially only"))
        else:
            raise SystemExit(f"unknown tool {n!r}; known: {', '.join(TOOL_ORDER)}")
    return out
