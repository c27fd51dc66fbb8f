"""A fault-injecting S3 reverse proxy on 127.0.0.1 (Python stdlib only), for issue 14.

`FaultProxy` is a `CountingProxy` (s3proxy.py: same forwarding, same counters) that, for
each request, may inject one fault chosen by a seeded `random.Random`, at rates set per S3
operation (s3proxy's operation names: HEAD, GET_RANGE, LIST, PUT, UPLOAD_PART, ...):

  slowdown        503 SlowDown with an S3 XML error body (the request is not forwarded)
  internal        500 InternalError with an S3 XML error body (not forwarded)
  reset           TCP reset before any response (not forwarded)
  reset_mid_body  object GETs and listings: the status, headers and part of the body, then
                  a TCP reset (a body too short to cut, or another operation, goes through)
  stall           the request waits `stall_seconds` (2 s by default), then goes through
  lost_response   forwarded (the server does it), then a TCP reset instead of the answer
  flip_request    a body sent with a Content-Length goes upstream with one byte flipped
                  (a PUT or part damaged on its way: a store that checks checksums refuses it)
  flip_response   an object GET's answer comes back with one byte of its body flipped

Before an injected error the request body is read fully, so the client never sees an
answer while it is still sending. A reset is SO_LINGER 0 then close(): an RST, no FIN.

`down()` makes the upstream unreachable until `up()` (or for N seconds): mode "reset"
resets every request (new and kept-alive connections); mode "refuse" also closes the
listening socket, so new connections are refused, and binds the same port again on `up()`.

Decisions are drawn under one lock in the order requests arrive: with the same seed and
the same request order, the same requests fail. Injected faults are counted per kind and
per (kind, operation), along with the sum of the rates that applied (`expected`), so a
test can check that faults were really injected.

Control endpoint ("__proxy__" can never be a bucket name):
  GET  /__proxy__/faults           the configuration, counters and `down` as JSON
  POST /__proxy__/faults           JSON {"rates": {OP: {KIND: p}}, "stall_seconds": s,
                                   "down": true | false | SECONDS, "mode": "reset"|"refuse"}
  POST /__proxy__/faults/reset     clears the counters
"""

from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

import s3proxy as P
from s3proxy import CountingProxy, Record, _Handler, _Server, classify

SLOWDOWN = "slowdown"
INTERNAL = "internal"
RESET = "reset"
RESET_MID_BODY = "reset_mid_body"
STALL = "stall"
LOST_RESPONSE = "lost_response"
FLIP_REQUEST = "flip_request"
FLIP_RESPONSE = "flip_response"
DOWN_RESET = "down_reset"  # a request reset while the upstream is down (not drawn)
KINDS = (SLOWDOWN, INTERNAL, RESET, RESET_MID_BODY, STALL, LOST_RESPONSE, FLIP_REQUEST, FLIP_RESPONSE)

# Every operation a mount sends (the ones rates are usually given for).
OBJECT_OPS = (P.HEAD, P.GET, P.GET_RANGE, P.LIST, P.PUT, P.COPY, P.CREATE_MULTIPART, P.UPLOAD_PART,
              P.COMPLETE_MULTIPART, P.ABORT_MULTIPART, P.LIST_PARTS, P.LIST_MULTIPART, P.DELETE,
              P.DELETE_OBJECTS, P.HEAD_BUCKET)

_ERRORS = {
    SLOWDOWN: (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    INTERNAL: (500, "Internal Server Error", "InternalError",
               "We encountered an internal error. Please try again."),
}


def mix(ops=OBJECT_OPS, **rates: float) -> dict[str, dict[str, float]]:
    """The same rates for every operation in `ops`: mix(slowdown=0.05, reset=0.01)."""
    unknown = set(rates) - set(KINDS)
    assert not unknown, f"unknown fault kinds {unknown}"
    return {op: dict(rates) for op in ops}


def error_body(code: str, message: str, resource: str, request_id: str) -> bytes:
    """An S3 error document, as AWS S3 sends it."""
    esc = resource.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f"<Resource>{esc}</Resource><RequestId>{request_id}</RequestId></Error>").encode()


class FaultState:
    """The seeded decisions, the rates, the down switch and the counters; thread-safe."""

    def __init__(self, seed: int, stall_seconds: float = 2.0):
        self.seed = seed
        self.stall_seconds = stall_seconds
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._rates: dict[str, dict[str, float]] = {}
        self._up = threading.Event()
        self._up.set()
        self.stopping = threading.Event()  # wakes stalls when the proxy stops
        self.reset_counters()

    # ---- configuration
    def set_rates(self, rates: dict[str, dict[str, float]]) -> None:
        for op, kinds in rates.items():
            bad = set(kinds) - set(KINDS)
            assert not bad, f"unknown fault kinds {bad} for {op}"
            assert sum(kinds.values()) <= 1.0, f"rates for {op} add up to more than 1"
        with self._lock:
            self._rates = {op: dict(k) for op, k in rates.items()}

    def rates(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {op: dict(k) for op, k in self._rates.items()}

    def reset_counters(self) -> None:
        with self._lock:
            self.injected: Counter[str] = Counter()
            self.injected_by_op: Counter[tuple[str, str]] = Counter()
            self.expected: Counter[str] = Counter()  # sum of the rates that applied
            self.log: list[tuple[float, str, str, str]] = []  # (time, kind, op, key), last 200

    # ---- decisions
    def decide(self, op: str) -> tuple[str | None, float]:
        """(kind or None, a uniform number for the cut point). Always two draws."""
        with self._lock:
            u, frac = self._rng.random(), self._rng.random()
            kinds = self._rates.get(op, {})
            acc = 0.0
            chosen = None
            for kind in KINDS:  # a fixed order: the same draw picks the same kind
                p = kinds.get(kind, 0.0)
                self.expected[kind] += p
                if chosen is None and u < acc + p:
                    chosen = kind
                acc += p
            return chosen, frac

    def count(self, kind: str, op: str, key: str = "") -> None:
        with self._lock:
            self.injected[kind] += 1
            self.injected_by_op[(kind, op)] += 1
            self.log.append((time.monotonic(), kind, op, key))
            del self.log[:-200]

    def snapshot(self) -> dict:
        with self._lock:
            return {"seed": self.seed, "stall_seconds": self.stall_seconds,
                    "rates": {op: dict(k) for op, k in self._rates.items()},
                    "injected": dict(self.injected),
                    "injected_by_op": {f"{k}/{op}": n for (k, op), n in sorted(self.injected_by_op.items())},
                    "expected": {k: round(v, 2) for k, v in self.expected.items() if v},
                    "down": not self._up.is_set()}

    # ---- the down switch
    @property
    def is_down(self) -> bool:
        return not self._up.is_set()

    def set_down(self) -> None:
        self._up.clear()

    def set_up(self) -> None:
        self._up.set()

    def wait_up(self, timeout: float | None = None) -> bool:
        return self._up.wait(timeout)


class _Drain:
    """Stands in for the upstream connection while a request body is read and dropped."""

    def send(self, data: bytes) -> None:
        pass


class _CutWriter:
    """Passes `limit` bytes through, then raises: a body cut mid-way."""

    def __init__(self, inner, limit: int):
        self.inner, self.limit, self.sent, self.cut = inner, limit, 0, False
        self.closed = False

    def write(self, data) -> int:
        room = self.limit - self.sent
        if len(data) < room:
            self.sent += len(data)
            return self.inner.write(data)
        self.inner.write(bytes(data[:room]))
        self.inner.flush()
        self.sent, self.cut = self.limit, True
        raise ConnectionResetError("faultproxy: body cut mid-way")

    def flush(self) -> None:
        self.inner.flush()


class _FlipOnce:
    """Passes bytes through with the middle byte of the first non-empty write flipped."""

    closed = False

    def __init__(self, inner, method: str = "write"):
        self.inner, self.method, self.flipped = inner, method, False

    def _pass(self, data):
        if not self.flipped and len(data) > 0:
            b = bytearray(data)
            b[len(b) // 2] ^= 0x01
            data, self.flipped = bytes(b), True
        return getattr(self.inner, self.method)(data)

    def write(self, data):
        return self._pass(data)

    def send(self, data):
        return self._pass(data)

    def flush(self) -> None:
        self.inner.flush()


class _Swallow:
    """Takes nothing: the answer is lost (raises at its first byte)."""

    closed = False

    def write(self, data) -> int:
        raise ConnectionResetError("faultproxy: response dropped")

    def flush(self) -> None:
        pass


class _Dead:
    """The files of a connection that was reset: the stdlib's handler may still flush them."""

    closed = True

    def write(self, data) -> int:
        raise ConnectionResetError("faultproxy: connection reset")

    def readline(self, *_a) -> bytes:
        return b""

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _FaultHandler(_Handler):
    server: "_FaultServer"

    # ---- plumbing shared by the faults
    def setup(self) -> None:
        super().setup()
        self._real_wfile = self.wfile
        self._cut_limit_frac: float | None = None
        self._cutter: _CutWriter | None = None
        self._flip_request = False
        self._flip_response: _FlipOnce | None = None
        self._status = 0
        self._length = -1

    def handle(self) -> None:
        if self.server.faults.is_down:  # a connection accepted while down: reset at once
            self.server.faults.count(DOWN_RESET, "CONNECT")
            self._rst()
            return
        super().handle()

    def _rst(self) -> None:
        """Reset the client connection: SO_LINGER 0, then close every reference."""
        self.close_connection = True
        self._close_upstream()
        sock = self.connection
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.wfile = self._real_wfile
        for f in (self.rfile, self.wfile):
            try:
                f.close()
            except OSError:
                pass
        try:
            sock.close()  # the last reference: the kernel sends RST
        except OSError:
            pass
        self.rfile = self.wfile = self._real_wfile = _Dead()

    def _record(self, op: str, bucket: str, key: str, status: int) -> None:
        self.server.stats.add(Record(op, self.command, bucket, key, self.headers.get("Range"), status, 0, 0))

    def _drain_body(self) -> bool:
        try:
            self._relay_request_body(_Drain())
            return True
        except (OSError, ValueError):
            return False

    # ---- hooks into the parent's response path (for reset_mid_body)
    def send_response_only(self, code, message=None):
        self._status = code
        super().send_response_only(code, message)

    def send_header(self, keyword, value):
        if keyword.lower() == "content-length":
            self._length = int(value)
        super().send_header(keyword, value)

    def _relay_request_body(self, up) -> int:
        if self._flip_request:
            self._flip_request = False
            up = _FlipOnce(up, "send")
        return super()._relay_request_body(up)

    def end_headers(self):
        super().end_headers()
        if self._flip_response is not None and self.command != "HEAD" and self._status in (200, 206):
            self._flip_response.inner = self.wfile
            self.wfile = self._flip_response
        frac, self._cut_limit_frac = self._cut_limit_frac, None
        if frac is None or self.command == "HEAD" or self._status not in (200, 206) or self._length < 2:
            return
        self._cutter = _CutWriter(self.wfile, 1 + int(frac * (self._length - 1)))
        self.wfile = self._cutter

    # ---- dispatch
    def _control(self) -> bool:
        if self.path.split("?")[0].startswith("/__proxy__/faults"):
            self._faults_control()
            return True
        return super()._control()

    def _proxy(self) -> None:
        self._real_wfile = self.wfile
        if self._control():
            return
        op, bucket, key = classify(self.command, self.path, self.headers)
        faults = self.server.faults
        if faults.is_down:
            faults.count(DOWN_RESET, op, key)
            self._record(op, bucket, key, 0)
            self._rst()
            return
        kind, frac = faults.decide(op)
        if kind is None:
            super()._proxy()
            return
        getattr(self, f"_fault_{kind}")(op, bucket, key, frac)

    # ---- one method per fault kind
    def _fault_slowdown(self, op, bucket, key, _frac) -> None:
        self._send_error(SLOWDOWN, op, bucket, key)

    def _fault_internal(self, op, bucket, key, _frac) -> None:
        self._send_error(INTERNAL, op, bucket, key)

    def _fault_reset(self, op, bucket, key, _frac) -> None:
        self._drain_body()
        self.server.faults.count(RESET, op, key)
        self._record(op, bucket, key, 0)
        self._rst()

    def _fault_stall(self, op, bucket, key, _frac) -> None:
        faults = self.server.faults
        faults.count(STALL, op, key)
        faults.stopping.wait(faults.stall_seconds)
        super()._proxy()

    def _fault_reset_mid_body(self, op, bucket, key, frac) -> None:
        if op not in P.OBJECT_GETS and op != P.LIST:
            super()._proxy()
            return
        self._cut_limit_frac = frac
        super()._proxy()  # the parent catches the cut (ConnectionResetError) and stops
        if self._cutter is not None and self._cutter.cut:
            self.server.faults.count(RESET_MID_BODY, op, key)
            self._rst()
        self.wfile, self._cutter, self._cut_limit_frac = self._real_wfile, None, None

    def _fault_flip_request(self, op, bucket, key, _frac) -> None:
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        if chunked or int(self.headers.get("Content-Length") or 0) == 0:
            super()._proxy()  # nothing to flip without breaking the framing
            return
        self._flip_request = True
        self.server.faults.count(FLIP_REQUEST, op, key)
        super()._proxy()

    def _fault_flip_response(self, op, bucket, key, _frac) -> None:
        if op not in P.OBJECT_GETS:
            super()._proxy()
            return
        self._flip_response = flip = _FlipOnce(None)
        super()._proxy()
        self._flip_response = None
        if flip.flipped:
            self.server.faults.count(FLIP_RESPONSE, op, key)
        self.wfile = self._real_wfile

    def _fault_lost_response(self, op, bucket, key, _frac) -> None:
        self.wfile = _Swallow()
        super()._proxy()  # forwarded; the answer goes nowhere
        self.server.faults.count(LOST_RESPONSE, op, key)
        self._rst()

    def _send_error(self, kind: str, op: str, bucket: str, key: str) -> None:
        status, reason, code, message = _ERRORS[kind]
        if not self._drain_body():
            self._rst()
            return
        faults = self.server.faults
        faults.count(kind, op, key)
        self._record(op, bucket, key, status)
        rid = f"FAULTPROXY{sum(faults.injected.values()):08d}"
        body = error_body(code, message, urlsplit(self.path).path, rid)
        head = self.command == "HEAD"
        try:
            self.send_response_only(status, reason)
            self.send_header("Date", self.date_time_string())
            self.send_header("x-amz-request-id", rid)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", "0" if head else str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    # ---- the control endpoint
    def _faults_control(self) -> None:
        owner: FaultProxy = self.server.owner
        path = self.path.split("?")[0]
        try:
            if self.command == "POST" and path == "/__proxy__/faults/reset":
                self._drain_body()
                owner.faults.reset_counters()
            elif self.command in ("POST", "PUT"):
                n = int(self.headers.get("Content-Length") or 0)
                owner.configure(json.loads(self.rfile.read(n) or b"{}"))
            status, body = 200, json.dumps(owner.faults.snapshot()).encode()
        except (ValueError, AssertionError, KeyError) as e:
            status, body = 400, json.dumps({"error": str(e)}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _FaultServer(_Server):
    def __init__(self, addr, upstream, stats, faults: FaultState, owner: "FaultProxy"):
        self.faults = faults
        self.owner = owner
        super().__init__(addr, upstream, stats)
        self.RequestHandlerClass = _FaultHandler


class FaultProxy(CountingProxy):
    """A CountingProxy that injects faults. Loopback only, both ends."""

    def __init__(self, upstream_endpoint: str, seed: int = 0, stall_seconds: float = 2.0,
                 host: str = "127.0.0.1", port: int = 0):
        u = urlsplit(upstream_endpoint)
        assert host == "127.0.0.1", "the fault proxy listens on 127.0.0.1 only"
        assert u.hostname in ("127.0.0.1", "localhost"), "the fault proxy forwards to 127.0.0.1 only"
        self.faults = FaultState(seed, stall_seconds)
        self.stats = P.Stats()
        self._upstream_addr = (u.hostname, u.port or 80)
        self._timer: threading.Timer | None = None
        self._refusing = False
        self._mode_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._server = self._new_server((host, port))
        self._port = self._server.server_address[1]

    def _new_server(self, addr) -> _FaultServer:
        return _FaultServer(addr, self._upstream_addr, self.stats, self.faults, self)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def stop(self) -> None:
        self.faults.stopping.set()
        if self._timer is not None:
            self._timer.cancel()
        self.faults.set_up()
        with self._mode_lock:
            if not self._refusing:
                super().stop()
            self._refusing = False

    # ---- faults
    def set_faults(self, rates: dict[str, dict[str, float]]) -> None:
        """Replace the rates: {OP: {KIND: probability}} (see `mix`). {} turns faults off."""
        self.faults.set_rates(rates)

    def clear_faults(self) -> None:
        self.faults.set_rates({})

    def configure(self, cfg: dict) -> None:
        """What the control endpoint accepts (see the module docstring)."""
        if "rates" in cfg:
            self.set_faults(cfg["rates"])
        if "stall_seconds" in cfg:
            self.faults.stall_seconds = float(cfg["stall_seconds"])
        if "down" in cfg:
            d = cfg["down"]
            if d is False:
                self.up()
            else:
                self.down(None if d is True else float(d), cfg.get("mode", "reset"))

    def injected(self, *kinds: str, op: str | None = None) -> int:
        """Faults injected so far, of these kinds (all when none given), optionally of one op."""
        snap = self.faults.snapshot()
        kinds = kinds or tuple(snap["injected"])
        if op is None:
            return sum(snap["injected"].get(k, 0) for k in kinds)
        return sum(snap["injected_by_op"].get(f"{k}/{op}", 0) for k in kinds)

    def fault_summary(self) -> str:
        s = self.faults.snapshot()
        return (f"seed={s['seed']} injected={s['injected']} expected={s['expected']} down={s['down']}\n"
                f"by op: {s['injected_by_op']}")

    # ---- the upstream down / up
    def down(self, seconds: float | None = None, mode: str = "reset") -> None:
        """Reset every request (mode "reset"), and refuse new connections too (mode
        "refuse"), for `seconds` or until `up()`."""
        assert mode in ("reset", "refuse"), mode
        self.faults.set_down()
        if mode == "refuse":
            with self._mode_lock:
                if not self._refusing:
                    self._refusing = True
                    CountingProxy.stop(self)  # closes the listening socket: connections refused
        if seconds is not None:
            self._timer = threading.Timer(seconds, self.up)
            self._timer.daemon = True
            self._timer.start()

    def up(self) -> None:
        with self._mode_lock:
            if self._refusing and not self.faults.stopping.is_set():
                self._server = self._new_server(("127.0.0.1", self._port))
                self._refusing = False
                CountingProxy.start(self)
        self.faults.set_up()

    @property
    def is_down(self) -> bool:
        return self.faults.is_down

    def wait_up(self, timeout: float | None = None) -> bool:
        return self.faults.wait_up(timeout)
