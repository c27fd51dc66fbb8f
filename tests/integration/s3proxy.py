"""A counting reverse proxy for S3 on 127.0.0.1 (Python stdlib only).

Clients (flowfs, boto3) sign their requests for the proxy's address; the proxy forwards
every request header unchanged, Host and Authorization included, so the SigV4 signature
the upstream checks is the one the client made. Bodies stream both ways; keep-alive on
both sides. Requests are counted by S3 operation, and the body bytes of object GETs are
counted as they are sent to the client.

GET /__proxy__/stats returns the counters as JSON and /__proxy__/reset clears them
("__proxy__" can never be a bucket name).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

# Operation names used in the counters.
GET = "GET"  # GetObject without Range
GET_RANGE = "GET_RANGE"  # GetObject with Range
HEAD = "HEAD"  # HeadObject
HEAD_BUCKET = "HEAD_BUCKET"
LIST = "LIST"  # ListObjects(V1/V2)
LIST_BUCKETS = "LIST_BUCKETS"
PUT = "PUT"  # PutObject
COPY = "COPY"  # CopyObject / UploadPartCopy
CREATE_MULTIPART = "CREATE_MULTIPART"
UPLOAD_PART = "UPLOAD_PART"
COMPLETE_MULTIPART = "COMPLETE_MULTIPART"
ABORT_MULTIPART = "ABORT_MULTIPART"
LIST_PARTS = "LIST_PARTS"
LIST_MULTIPART = "LIST_MULTIPART"
DELETE = "DELETE"
DELETE_OBJECTS = "DELETE_OBJECTS"
CREATE_BUCKET = "CREATE_BUCKET"
DELETE_BUCKET = "DELETE_BUCKET"
BUCKET_OTHER = "BUCKET_OTHER"  # ?location, ?versioning, ...
OBJECT_OTHER = "OBJECT_OTHER"  # ?tagging, ?acl, ...

OBJECT_GETS = (GET, GET_RANGE)

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
              "te", "trailer", "upgrade"}
CHUNK = 256 * 1024


def classify_azure(method: str, path: str, headers) -> tuple[str, str, str]:
    """(operation, container, key) of an Azure Blob request to an emulator-style URL
    (/ACCOUNT/CONTAINER/BLOB), named by the S3 operation it stands for in flowfs's client
    (crates/flowfs-client/src/azure): Put Block is an UPLOAD_PART, Put Block List a
    COMPLETE_MULTIPART, Get Block List a LIST_MULTIPART, Set Blob Metadata and Copy Blob
    a COPY."""
    parts = urlsplit(path)
    q = parse_qs(parts.query, keep_blank_values=True)
    _account, _, rest = parts.path.lstrip("/").partition("/")
    container, _, key = rest.partition("/")
    container, key = unquote(container), unquote(key)
    comp = (q.get("comp") or [""])[0]
    if not key:
        if method == "GET" and comp == "list":
            return LIST, container, ""
        if method == "PUT" and not comp:
            return CREATE_BUCKET, container, ""
        return BUCKET_OTHER, container, ""
    if method == "GET":
        if comp == "blocklist":
            return LIST_MULTIPART, container, key
        return (GET_RANGE if headers.get("x-ms-range") else GET), container, key
    if method == "HEAD":
        return HEAD, container, key
    if method == "DELETE":
        return DELETE, container, key
    if method == "PUT":
        if comp == "block":
            return UPLOAD_PART, container, key
        if comp == "blocklist":
            return COMPLETE_MULTIPART, container, key
        if comp == "metadata" or headers.get("x-ms-copy-source"):
            return COPY, container, key
        if not comp:
            return PUT, container, key
    return OBJECT_OTHER, container, key


def classify_gcs(method: str, path: str, headers) -> tuple[str, str, str]:
    """(operation, bucket, key) of a GCS JSON API request, named by the S3 operation it
    stands for in flowfs's client (crates/flowfs-client/src/gcs): an object of
    `.flowfs-parts/H/ID/` sent is an UPLOAD_PART (its `open` marker the
    CREATE_MULTIPART), a compose the COMPLETE_MULTIPART, a rewrite or an update of the
    metadata a COPY, a GET of the resource a HEAD."""
    parts = urlsplit(path)
    q = parse_qs(parts.query, keep_blank_values=True)
    upload = parts.path.startswith("/upload/")
    segs = parts.path.split("/")
    # /[upload/]storage/v1/b/BUCKET/o[/KEY[/compose | /rewriteTo/b/B/o/KEY]]
    at = segs.index("b") if "b" in segs else len(segs)
    bucket = unquote(segs[at + 1]) if len(segs) > at + 1 else ""
    rest = segs[at + 3:] if len(segs) > at + 2 and segs[at + 2] == "o" else []
    if not bucket:
        return (CREATE_BUCKET if method == "POST" else LIST_BUCKETS), "", ""
    if upload:
        name = (q.get("name") or [""])[0]
        if name.startswith(".flowfs-parts/"):
            return (CREATE_MULTIPART if name.endswith("/open") else UPLOAD_PART), bucket, name
        return PUT, bucket, name
    if not rest:
        return (LIST if method == "GET" else BUCKET_OTHER), bucket, ""
    key = unquote(rest[0])
    if method == "POST" and len(rest) > 1:
        return (COMPLETE_MULTIPART if rest[1] == "compose" else COPY), bucket, key
    if method == "GET":
        if "alt" not in q:
            return HEAD, bucket, key
        return (GET_RANGE if headers.get("Range") else GET), bucket, key
    if method == "DELETE":
        return DELETE, bucket, key
    if method in ("PUT", "PATCH"):
        return COPY, bucket, key
    return OBJECT_OTHER, bucket, key


def classify(method: str, path: str, headers) -> tuple[str, str, str]:
    """(operation, bucket, key) of a path-style S3 request (an Azure one: classify_azure;
    a GCS one: classify_gcs)."""
    if headers.get("x-ms-version"):
        return classify_azure(method, path, headers)
    if path.startswith(("/storage/v1/", "/upload/storage/v1/")):
        return classify_gcs(method, path, headers)
    parts = urlsplit(path)
    q = parse_qs(parts.query, keep_blank_values=True)
    raw = parts.path.lstrip("/")
    bucket, _, key = raw.partition("/")
    bucket, key = unquote(bucket), unquote(key)
    if not bucket:
        return (LIST_BUCKETS if method == "GET" else BUCKET_OTHER), "", ""
    if not key:
        if method == "GET":
            if "uploads" in q:
                return LIST_MULTIPART, bucket, ""
            if q.keys() - {"list-type", "prefix", "delimiter", "max-keys", "continuation-token",
                           "start-after", "marker", "encoding-type", "fetch-owner", "x-id"}:
                return BUCKET_OTHER, bucket, ""
            return LIST, bucket, ""
        if method == "HEAD":
            return HEAD_BUCKET, bucket, ""
        if method == "PUT":
            return (CREATE_BUCKET if not q else BUCKET_OTHER), bucket, ""
        if method == "DELETE":
            return (DELETE_BUCKET if not q else BUCKET_OTHER), bucket, ""
        if method == "POST" and "delete" in q:
            return DELETE_OBJECTS, bucket, ""
        return BUCKET_OTHER, bucket, ""
    sub = q.keys() - {"x-id", "versionId", "partNumber", "uploadId", "uploads",
                      "response-content-type", "response-content-disposition"}
    if method == "GET":
        if "uploadId" in q:
            return LIST_PARTS, bucket, key
        if sub:
            return OBJECT_OTHER, bucket, key
        return (GET_RANGE if headers.get("Range") else GET), bucket, key
    if method == "HEAD":
        return HEAD, bucket, key
    if method == "PUT":
        if sub:
            return OBJECT_OTHER, bucket, key
        if headers.get("x-amz-copy-source"):
            return COPY, bucket, key
        if "uploadId" in q and "partNumber" in q:
            return UPLOAD_PART, bucket, key
        return PUT, bucket, key
    if method == "POST":
        if "uploads" in q:
            return CREATE_MULTIPART, bucket, key
        if "uploadId" in q:
            return COMPLETE_MULTIPART, bucket, key
        return OBJECT_OTHER, bucket, key
    if method == "DELETE":
        return (ABORT_MULTIPART if "uploadId" in q else DELETE), bucket, key
    return OBJECT_OTHER, bucket, key


@dataclass
class Record:
    op: str
    method: str
    bucket: str
    key: str
    range: str | None
    status: int
    resp_bytes: int
    req_bytes: int


class Stats:
    """Thread-safe counters. `snapshot()` gives a plain dict, usable across processes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.ops: Counter[str] = Counter()
            self.get_bytes = 0  # body bytes of object GETs sent to the client
            self.put_bytes = 0  # body bytes of PUT / UPLOAD_PART sent upstream
            self.records: list[Record] = []
            self.connections = 0  # client connections accepted

    def add(self, rec: Record) -> None:
        with self._lock:
            self.ops[rec.op] += 1
            self.records.append(rec)

    def add_connection(self) -> None:
        with self._lock:
            self.connections += 1

    def add_get_bytes(self, n: int) -> None:
        with self._lock:
            self.get_bytes += n

    def add_put_bytes(self, n: int) -> None:
        with self._lock:
            self.put_bytes += n

    def count(self, *ops: str) -> int:
        with self._lock:
            return sum(self.ops[o] for o in ops)

    def snapshot(self) -> dict:
        with self._lock:
            return {"ops": dict(self.ops), "get_bytes": self.get_bytes, "put_bytes": self.put_bytes,
                    "requests": len(self.records), "connections": self.connections}

    def summary(self, last: int = 30) -> str:
        """For assertion messages: counts plus the last requests (never headers)."""
        with self._lock:
            recs = self.records[-last:]
            head = f"ops={dict(self.ops)} get_bytes={self.get_bytes} put_bytes={self.put_bytes}"
        lines = [f"  {r.op:<16} {r.status} {r.bucket}/{r.key} range={r.range} resp={r.resp_bytes}" for r in recs]
        return head + "\n" + "\n".join(lines)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature; keep quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._up: http.client.HTTPConnection | None = None
        self._up_used = 0.0
        self.server.stats.add_connection()

    def finish(self) -> None:
        self._close_upstream()
        super().finish()

    def _close_upstream(self) -> None:
        if self._up is not None:
            try:
                self._up.close()
            except OSError:
                pass
            self._up = None

    def _upstream(self) -> http.client.HTTPConnection:
        # Reconnect when idle for long: the server may have closed its end meanwhile.
        if self._up is not None and time.monotonic() - self._up_used > 20:
            self._close_upstream()
        if self._up is None:
            host, port = self.server.upstream
            self._up = http.client.HTTPConnection(host, port, timeout=300)
        return self._up

    # every method goes the same way
    def do_GET(self):
        self._proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def _control(self) -> bool:
        if not self.path.startswith("/__proxy__/"):
            return False
        stats = self.server.stats
        if self.path.startswith("/__proxy__/reset"):
            stats.reset()
        if self.path.startswith("/__proxy__/latency"):
            # /__proxy__/latency?ms=N: every request from now on waits N ms before it is
            # forwarded (the benchmark's S3-like first-byte latency).
            q = parse_qs(urlsplit(self.path).query)
            self.server.latency_s = max(0.0, float(q.get("ms", ["0"])[0]) / 1000)
        snap = stats.snapshot()
        snap["latency_ms"] = self.server.latency_s * 1000
        body = json.dumps(snap).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return True

    def _send_request_head(self, up: http.client.HTTPConnection) -> None:
        up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in self.headers.items():
            if name.lower() in HOP_BY_HOP:
                continue
            up.putheader(name, value)
        up.endheaders()

    def _relay_request_body(self, up: http.client.HTTPConnection) -> int:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        sent = 0
        if "chunked" in te:
            # Relay the chunked framing verbatim (sizes, extensions, trailers).
            while True:
                line = self.rfile.readline(65537)
                up.send(line)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers, then the empty line
                        t = self.rfile.readline(65537)
                        up.send(t)
                        if t in (b"\r\n", b"\n", b""):
                            return sent
                remaining = size
                while remaining:
                    data = self.rfile.read(min(CHUNK, remaining))
                    if not data:
                        raise ConnectionError("client closed mid-body")
                    up.send(data)
                    remaining -= len(data)
                    sent += len(data)
                up.send(self.rfile.readline(65537))  # CRLF after the chunk
        remaining = int(self.headers.get("Content-Length") or 0)
        while remaining:
            data = self.rfile.read(min(CHUNK, remaining))
            if not data:
                raise ConnectionError("client closed mid-body")
            up.send(data)
            remaining -= len(data)
            sent += len(data)
        return sent

    def _proxy(self) -> None:
        if self._control():
            return
        if self.server.latency_s:
            # Before the request goes upstream, as a distant server's first byte comes late;
            # a sleeping thread costs no CPU, so the proxy adds no work for it.
            time.sleep(self.server.latency_s)
        op, bucket, key = classify(self.command, self.path, self.headers)
        has_body = bool(self.headers.get("Content-Length") not in (None, "0")
                        or "chunked" in (self.headers.get("Transfer-Encoding") or "").lower())
        req_bytes = 0
        resp = None
        for attempt in range(2):
            up = self._upstream()
            try:
                self._send_request_head(up)
                req_bytes = self._relay_request_body(up)
                resp = up.getresponse()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._close_upstream()
                if has_body or attempt == 1:  # a streamed body cannot be replayed
                    self._bad_gateway(op, bucket, key, e)
                    return
            except (OSError, http.client.HTTPException, ValueError) as e:
                self._close_upstream()
                self._bad_gateway(op, bucket, key, e)
                return
        if op in (PUT, UPLOAD_PART):
            self.server.stats.add_put_bytes(req_bytes)

        counting = op in OBJECT_GETS and 200 <= resp.status < 300
        # Counted before the response goes out: a client that has its answer sees it counted.
        rec = Record(op, self.command, bucket, key, self.headers.get("Range"), resp.status, 0, req_bytes)
        self.server.stats.add(rec)
        try:
            self.send_response_only(resp.status, resp.reason)
            chunked_out = False
            has_length = resp.getheader("Content-Length") is not None
            for name, value in resp.getheaders():
                ln = name.lower()
                if ln in HOP_BY_HOP or ln == "transfer-encoding":
                    continue
                self.send_header(name, value)
            no_body = self.command == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
            if not no_body and not has_length:
                chunked_out = True
                self.send_header("Transfer-Encoding", "chunked")
            if resp.will_close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if not no_body:
                while True:
                    data = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
                    if not data:
                        break
                    if counting:
                        self.server.stats.add_get_bytes(len(data))
                    rec.resp_bytes += len(data)
                    if chunked_out:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    else:
                        self.wfile.write(data)
                if chunked_out:
                    self.wfile.write(b"0\r\n\r\n")
            resp.read()  # marks the response done so the upstream connection can be reused
            self.wfile.flush()
            if resp.will_close:
                self._close_upstream()
            else:
                self._up_used = time.monotonic()
        except (BrokenPipeError, ConnectionResetError, OSError):
            # The client went away mid-response (e.g. a cancelled read-ahead): drop both ends.
            self._close_upstream()
            self.close_connection = True

    def _bad_gateway(self, op: str, bucket: str, key: str, err: Exception) -> None:
        self.server.stats.add(Record(op, self.command, bucket, key, self.headers.get("Range"), 502, 0, 0))
        self.close_connection = True
        body = f"proxy: upstream error: {type(err).__name__}".encode()
        try:
            self.send_response_only(502, "Bad Gateway")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, upstream: tuple[str, int], stats: Stats):
        self.upstream = upstream
        self.stats = stats
        self.latency_s = 0.0
        super().__init__(addr, _Handler)


class CountingProxy:
    """`tls`: a server context, to be spoken to over HTTPS (it forwards plain http)."""

    def __init__(self, upstream_endpoint: str, host: str = "127.0.0.1", port: int = 0, tls=None):
        u = urlsplit(upstream_endpoint)
        assert u.scheme == "http", "the proxy forwards plain http only"
        self.stats = Stats()
        self._server = _Server((host, port), (u.hostname, u.port or 80), self.stats)
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}"

    def start(self) -> "CountingProxy":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="s3proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread:
            self._thread.join(timeout=10)

    # shortcuts for tests
    def reset(self) -> None:
        self.stats.reset()

    def count(self, *ops: str) -> int:
        return self.stats.count(*ops)

    @property
    def get_bytes(self) -> int:
        return self.stats.get_bytes

    def __enter__(self) -> "CountingProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
