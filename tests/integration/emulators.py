"""Azure and GCS emulators on 127.0.0.1 for the tests of issue 30 (other stores).

Installed by scripts/setup.sh under ~/.cache/flowfs-emul (FLOWFS_EMUL_DIR), pinned:
  * Azurite 3.35.0 (npm), the blob service only: `azurite-blob` with --blobHost/--blobPort
    explicit and --disableTelemetry (it phones home without it). Its account is the
    well-known development account (`devstoreaccount1`, Shared Key), the one
    AZURE_STORAGE_CONNECTION_STRING names for it. --skipApiVersionCheck: the reference
    client (azure-storage-blob 12.31) sends an API version newer than 3.35 knows.
  * fake-gcs-server v1.54.0 (Go module): one HTTP port (-scheme http -port), no
    authentication; clients find it by STORAGE_EMULATOR_HOST. It serves the JSON API
    (media, multipart and resumable uploads, compose, rewrite, PATCH of metadata); an XML
    API PUT is answered 400 (its issues #331, #852), so flowfs speaks JSON to GCS.
Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from seaweed import HOST, _set_pdeathsig, clean_env, free_port, register_group, stop_group

EMUL_DIR = Path(os.environ.get("FLOWFS_EMUL_DIR", Path.home() / ".cache" / "flowfs-emul"))
AZURITE = EMUL_DIR / "azurite" / "node_modules" / ".bin" / "azurite-blob"
FAKE_GCS = EMUL_DIR / "bin" / "fake-gcs-server"

# Azurite's documented development account: public by design, the same on every machine.
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _missing(path: Path, what: str) -> RuntimeError:
    return RuntimeError(f"{what} not found at {path}: run `bash scripts/setup.sh` (installs it pinned)")


@dataclass
class _Emulator:
    base_dir: Path
    proc: subprocess.Popen | None = None
    port: int = 0
    log_path: Path | None = None

    name = "emulator"

    def command(self) -> list[str]:
        raise NotImplementedError

    def answers(self) -> bool:
        """One request that proves the service is up."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 60.0):
        self.base_dir.mkdir(parents=True, exist_ok=True)
        last = ""
        for attempt in range(3):
            self.port = free_port()
            self.log_path = self.base_dir / f"{self.name}-{attempt}.log"
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    cwd=self.base_dir, env=clean_env(), start_new_session=True, preexec_fn=_set_pdeathsig)
            register_group(self.proc.pid, self.name)
            try:
                self._wait_ready(timeout)
                return self
            except Exception as e:  # noqa: BLE001 - retried on another port, then raised
                last = f"{e}\n--- log tail ---\n{self.log_tail()}"
                self.stop()
        raise RuntimeError(f"{self.name} did not start: {last}")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early with code {self.proc.returncode}")
            try:
                if self.answers():
                    return
            except (OSError, urllib.error.URLError) as e:
                last = e
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not answering on {self.url} after {timeout}s: {last!r}")

    def log_tail(self, n: int = 30) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, timeout=10)
            self.proc = None


class Azurite(_Emulator):
    name = "azurite"

    def command(self) -> list[str]:
        if not AZURITE.exists():
            raise _missing(AZURITE, "Azurite")
        return [str(AZURITE), "--blobHost", HOST, "--blobPort", str(self.port),
                "--location", str(self.base_dir / "data"), "--disableTelemetry",
                "--skipApiVersionCheck", "--silent"]

    @property
    def blob_endpoint(self) -> str:
        return f"{self.url}/{AZURE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
                f"BlobEndpoint={self.blob_endpoint};")

    def answers(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.blob_endpoint}?comp=list", timeout=2)
        except urllib.error.HTTPError as e:
            return e.code == 403  # unsigned: refused, so the service is up
        return True

    def service(self):
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)


class FakeGcs(_Emulator):
    name = "fake-gcs-server"

    def command(self) -> list[str]:
        if not FAKE_GCS.exists():
            raise _missing(FAKE_GCS, "fake-gcs-server")
        return [str(FAKE_GCS), "-scheme", "http", "-host", HOST, "-port", str(self.port),
                # memory: the filesystem backend drops a key ending in / (a directory
                # marker) from listings, as a file tree cannot hold `dir/` beside `dir/a`
                "-backend", "memory",
                "-public-host", f"{HOST}:{self.port}", "-external-url", self.url, "-log-level", "warn"]

    def answers(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/storage/v1/b?project=test", timeout=2) as r:
            return r.status == 200

    def create_bucket(self, name: str) -> None:
        st, body, _ = request(f"{self.url}/storage/v1/b?project=test", "POST", json.dumps({"name": name}).encode(),
                              {"content-type": "application/json"})
        if st != 200:
            raise RuntimeError(f"bucket {name}: HTTP {st}: {body[:200]!r}")


def request(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None,
            timeout: float = 30):
    """One HTTP request: (status, body, headers), an error status returned, not raised."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers
