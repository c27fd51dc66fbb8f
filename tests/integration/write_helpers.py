"""Helpers of the write-path tests: tree snapshots and comparisons (a mount against a local
directory, and against the plain objects of a bucket), and a dedicated SeaweedFS that can be
stopped and started again on the same ports and data dir."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import unquote

from helpers import sha256, sha256_file
from seaweed import SeaweedServer, _set_pdeathsig, clean_env, register_group

SYMLINK_META = "flowfs-symlink"  # x-amz-meta-flowfs-symlink, as boto3 shows it


# ------------------------------------------------------------------ tree snapshots


def snapshot(root: str | os.PathLike) -> dict[str, tuple]:
    """relpath -> ("dir",) | ("file", size, sha256) | ("link", target) for everything under
    root (symlinks are not followed)."""
    root = os.fspath(root)
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_size, sha256_file(p))
            else:
                out[rel] = ("other", oct(st.st_mode))
    return out


def diff_snapshots(want: dict[str, tuple], got: dict[str, tuple], limit: int = 25) -> list[str]:
    """Human-readable differences; empty when equal."""
    out = []
    for k in sorted(set(want) - set(got)):
        out.append(f"missing: {k} {want[k][:2]}")
    for k in sorted(set(got) - set(want)):
        out.append(f"unexpected: {k} {got[k][:2]}")
    for k in sorted(set(want) & set(got)):
        if want[k] != got[k]:
            out.append(f"differs: {k}: want {want[k]} got {got[k]}")
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


# ------------------------------------------------------------------ objects


def list_keys(s3, bucket: str, prefix: str = "") -> dict[str, int]:
    """key -> size of every object under prefix (all pages)."""
    keys: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            keys[o["Key"]] = o["Size"]
    return keys


def check_objects(s3, bucket: str, prefix: str, want: dict[str, tuple]) -> list[str]:
    """Compares the objects under `prefix` (`""` or ending in `/`) with a snapshot of a local
    directory: every file is an object with the same bytes, every symlink an object whose
    content is the target and whose metadata names it, every empty directory has a `dir/`
    marker, and nothing else is there (a marker of an existing directory is allowed)."""
    problems = []
    keys = list_keys(s3, bucket, prefix)
    dirs = {rel for rel, v in want.items() if v[0] == "dir"}
    for rel, v in sorted(want.items()):
        key = prefix + rel
        if v[0] == "file":
            if key not in keys:
                problems.append(f"file {rel}: no object {key}")
                continue
            if keys[key] != v[1]:
                problems.append(f"file {rel}: object size {keys[key]}, want {v[1]}")
                continue
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            if sha256(body) != v[2]:
                problems.append(f"file {rel}: object content differs (size {len(body)})")
        elif v[0] == "link":
            if key not in keys:
                problems.append(f"symlink {rel}: no object {key}")
                continue
            obj = s3.get_object(Bucket=bucket, Key=key)
            body = obj["Body"].read()
            if body != v[1].encode():
                problems.append(f"symlink {rel}: object content {body[:100]!r}, want the target {v[1]!r}")
            meta = obj.get("Metadata", {})
            if SYMLINK_META not in meta:
                problems.append(f"symlink {rel}: no x-amz-meta-{SYMLINK_META} (metadata {meta})")
            elif unquote(meta[SYMLINK_META]) != v[1]:
                problems.append(f"symlink {rel}: metadata names {meta[SYMLINK_META]!r}, want {v[1]!r}")
        elif v[0] == "dir":
            if not any(k.startswith(key + "/") for k in keys):
                problems.append(f"directory {rel}: no marker {key}/ and no object below it")
            elif not any(w.startswith(rel + "/") for w in want) and key + "/" not in keys:
                problems.append(f"empty directory {rel}: no marker object {key}/")
    expected_keys = {prefix + rel for rel, v in want.items() if v[0] in ("file", "link")}
    markers_ok = {prefix + rel + "/" for rel in dirs}
    for k in sorted(keys):
        if k in expected_keys or k in markers_ok:
            continue
        if prefix and k == prefix:  # a marker of the mounted prefix itself
            continue
        problems.append(f"stale object {k} ({keys[k]} bytes): nothing at that path in the reference tree")
    return problems


def journal_records(cache_dir: Path) -> list[str]:
    """The journal records (`*.rec`) and multipart-upload notes (`*.mpu`) under
    CACHE_DIR/staging/, as `<staging dir>/<name>`."""
    root = Path(cache_dir) / "staging"
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for pat in ("*/*.rec", "*/*.mpu") for p in root.glob(pat))


def wait_settled(s3, bucket: str, prefix: str, want: dict[str, tuple], timeout: float = 120.0) -> bool:
    """Waits until the objects under `prefix` hold exactly the files and symlinks of the
    snapshot `want` (by key and size): every upload has landed and every removal is done."""
    expected = {prefix + rel: (v[1] if v[0] == "file" else len(v[1].encode()))
                for rel, v in want.items() if v[0] in ("file", "link")}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = {k: n for k, n in list_keys(s3, bucket, prefix).items() if not k.endswith("/")}
        if got == expected:
            return True
        time.sleep(0.25)
    return False


def wait_object(s3, bucket: str, key: str, timeout: float = 60.0) -> dict | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return s3.head_object(Bucket=bucket, Key=key)
        except s3.exceptions.ClientError:
            time.sleep(0.1)
    return None


def object_bytes(s3, bucket: str, key: str) -> bytes | None:
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


# ------------------------------------------------------------------ a dedicated server


def restart_same_ports(server: SeaweedServer, timeout: float = 90.0) -> None:
    """Starts a stopped SeaweedServer again with the same ports, data dir and credentials
    (SeaweedServer.start() would choose new ports, and a mount's endpoint must not change)."""
    assert server.proc is None, "stop() it first"
    n = len(list(server.base_dir.glob("weed-*.log")))
    server.log_path = server.base_dir / f"weed-{n}.log"
    last = None
    for _ in range(3):  # a port in TIME_WAIT or still held by the old process: retry
        log = open(server.log_path, "ab")
        server.proc = subprocess.Popen(server.command(), stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, cwd=server.base_dir, env=clean_env(),
                                       start_new_session=True, preexec_fn=_set_pdeathsig)
        log.close()
        register_group(server.proc.pid, "weed mini")
        try:
            server._wait_ready(timeout)
            return
        except Exception as e:  # noqa: BLE001
            last = e
            server.stop()
            time.sleep(2)
    raise RuntimeError(f"weed mini did not restart on the same ports: {last}\n{server.log_tail()}")



# ------------------------------------------------------------------ a proxy that delays requests


def delaying_proxy(upstream_endpoint: str):
    """A CountingProxy whose requests can be held back: `p.delay(op, key, seconds)` makes
    every request of operation `op` (s3proxy.PUT, s3proxy.DELETE, ...) on exactly `key` wait
    that long before it is forwarded; `p.delay_answer(op, key, seconds)` holds the answer
    back instead (the server has done the request; the client learns it late). A LIST has
    the key "". Widens real-world latency windows deterministically. `p.wait_held(op, key,
    timeout)` waits until a delayed request of `op` on `key` has reached the proxy.
    `p.refuse(op, key)` answers those requests 400 InvalidRequest without forwarding them, as
    a store refuses a request for good (SeaweedFS for a key with a `..` segment);
    `p.refused(op, key)` counts them."""
    from faultproxy import error_body
    from s3proxy import CountingProxy, _Handler, classify

    class _DelayHandler(_Handler):
        def _proxy(self) -> None:
            op, _bucket, key = classify(self.command, self.path, self.headers)
            if (op, key) in self.server.refusals:
                with self.server.refused_lock:
                    self.server.refused[(op, key)] = self.server.refused.get((op, key), 0) + 1
                self._refuse(key)
                return
            self._answer_wait = self.server.answer_delays.get((op, key), 0)
            wait = self.server.delays.get((op, key))
            if wait:
                self.server.arrived.setdefault((op, key), threading.Event()).set()
                time.sleep(wait)
            super()._proxy()

        def _refuse(self, key: str) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = error_body("InvalidRequest", "Invalid Request", key, "refused-by-test")
            self.send_response_only(400, "Bad Request")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_response_only(self, code, message=None):
            wait, self._answer_wait = getattr(self, "_answer_wait", 0), 0
            if wait:
                time.sleep(wait)
            super().send_response_only(code, message)

    class DelayingProxy(CountingProxy):
        def __init__(self, upstream: str):
            super().__init__(upstream)
            self._server.delays = {}
            self._server.answer_delays = {}
            self._server.arrived = {}
            self._server.refusals = set()
            self._server.refused = {}
            self._server.refused_lock = threading.Lock()
            self._server.RequestHandlerClass = _DelayHandler

        def refuse(self, op: str, key: str) -> None:
            self._server.refusals.add((op, key))

        def refused(self, op: str, key: str) -> int:
            """How many requests of `op` on `key` were refused."""
            with self._server.refused_lock:
                return self._server.refused.get((op, key), 0)

        def delay(self, op: str, key: str, seconds: float) -> None:
            self._server.arrived.setdefault((op, key), threading.Event())
            self._server.delays[(op, key)] = seconds

        def wait_held(self, op: str, key: str, timeout: float) -> bool:
            return self._server.arrived.setdefault((op, key), threading.Event()).wait(timeout)

        def delay_answer(self, op: str, key: str, seconds: float) -> None:
            self._server.answer_delays[(op, key)] = seconds

    return DelayingProxy(upstream_endpoint)
