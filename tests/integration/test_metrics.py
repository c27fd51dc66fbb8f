"""Metrics and usage reports (issue 31): what a mount says it sent equals what a counting
proxy in front of the server saw.

- `/metrics` (`--metrics-addr`): `flowfs_requests_total` by op equals the proxy's count
  of each S3 operation, exactly, after a workload of small and multipart writes, reads,
  a listing, a rename and a delete; the bytes counters equal the proxy's body bytes;
- a real Prometheus server (Debian's package) scrapes the mount during the workload and
  its stored series end at the same counts;
- `flowfs unmount --report` and `flowfs run --report` write what the mount did, uploads
  at the unmount included, equal to the proxy's counts; `flowfs report` adds reports up
  and prices them at the built-in table or `--prices`, and the dollar figure is checked
  here from the table's numbers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from flowfs_mount import flowfs_bin, is_mounted, start_mount
from helpers import payload, poll, sha256
from metrics_helpers import MiB, S3_GROUPS, check_read, proxy_counts, report_matches_proxy, workload
from seaweed import free_port

ROOT = Path(__file__).resolve().parents[2]

def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def requests_of(text: str) -> dict[str, int]:
    """flowfs_requests_total summed over outcomes, by op, from the text format."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("flowfs_requests_total{"):
            continue
        labels, value = line[len("flowfs_requests_total{"):].split("} ")
        fields = dict(kv.split("=", 1) for kv in labels.split(","))
        op = fields["op"].strip('"')
        out[op] = out.get(op, 0) + int(float(value))
    return out


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the metrics:\n{text[:3000]}")


def status_durable(m, timeout: float = 60.0) -> None:
    """Waits until `flowfs status` says everything is in the bucket (exit 0)."""
    deadline = time.monotonic() + timeout
    while True:
        r = subprocess.run([flowfs_bin(), "status", str(m.path)], capture_output=True, text=True,
                           timeout=30, env=m.env, check=False)
        if r.returncode == 0:
            return
        assert time.monotonic() < deadline, f"not durable after {timeout} s: {r.stdout}{r.stderr}"
        time.sleep(0.2)


@pytest.fixture
def metrics_port():
    return free_port()


def test_metrics_equal_the_proxys_counts(mount, bucket, proxy, metrics_port):
    m = mount(bucket, proxy=proxy, extra=["--metrics-addr", f"127.0.0.1:{metrics_port}",
                                          "--part-size", "5M"])
    want = workload(m.path)
    status_durable(m)
    # Read back from a second mount: the first one's node cache would answer.
    text = scrape(metrics_port)
    assert requests_of(text) == proxy_counts(proxy), proxy.stats.summary()
    snap = proxy.stats.snapshot()
    assert metric(text, "flowfs_store_written_bytes_total") == snap["put_bytes"]
    assert metric(text, "flowfs_store_read_bytes_total") == snap["get_bytes"]
    assert 'flowfs_requests_total{op="PutObject",outcome="ok"}' in text
    assert "flowfs_request_first_byte_seconds_bucket" in text
    assert metric(text, "flowfs_writeback_files") == 0
    live = subprocess.run([flowfs_bin(), "report", "--mount", str(m.path), "--json"], capture_output=True,
                          text=True, timeout=30, env=m.env, check=False)
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["requests"] == proxy_counts(proxy)
    # A read that fetches, then one that the node cache answers.
    cold = mount(bucket, proxy=proxy, extra=["--metrics-addr", f"127.0.0.1:{free_port()}"])
    check_read(cold.path, want)
    check_read(cold.path, want)
    m.unmount()
    assert not is_mounted(m.path)


def test_a_bad_metrics_address_is_refused_before_mounting(mount, bucket):
    with pytest.raises(Exception) as e:
        mount(bucket, extra=["--metrics-addr", "localhost:x"])
    assert "--metrics-addr must be PORT or IP:PORT" in str(e.value)


def test_unmount_report_counts_every_request_the_proxy_saw(mount, bucket, proxy, work_dir):
    m = mount(bucket, proxy=proxy, extra=["--part-size", "5M"])
    u = report_matches_proxy(m, proxy, work_dir, S3_GROUPS)
    assert not is_mounted(m.path)
    assert ((work_dir / "flowfs-report.json").stat().st_mode & 0o777) == 0o600
    assert u["requests"] == proxy_counts(proxy), proxy.stats.summary()
    snap = proxy.stats.snapshot()
    assert (u["bytes_down"], u["bytes_up"]) == (snap["get_bytes"], snap["put_bytes"])
    assert u["bytes_up"] >= sum(3000 + i for i in range(2, 12)) + 12 * MiB + 5
    assert sum(u["outcomes"].values()) == snap["requests"]
    prices = json.loads((ROOT / "docs/prices/default.json").read_text())["per_1000_requests"]
    expect = sum(prices[op] * n / 1000 for op, n in u["requests"].items())
    assert u["cost_usd"] == pytest.approx(expect, rel=1e-9)
    assert u["sources"] == [m.source]


def _run(m_env, bucket, proxy, work_dir, name, script, *extra) -> subprocess.CompletedProcess:
    mp = work_dir / f"run-{name}"
    return subprocess.run(
        [flowfs_bin(), "run", "--mount", f"s3://{bucket}/{name}={mp}", "--endpoint-url", proxy.endpoint,
         "--cache-dir", str(work_dir / f"cache-{name}"), "--log-file", str(work_dir / f"{name}.log"),
         *extra, "--", "sh", "-c", script.replace("MNT", str(mp))],
        capture_output=True, text=True, timeout=180, env=m_env, check=False)


def test_run_reports_add_up_to_the_proxys_counts_and_their_cost(mount, seaweed, bucket, proxy, work_dir):
    env = mount.env(proxy.endpoint)
    reports = work_dir / "reports"
    (reports / "t1").mkdir(parents=True)
    (reports / "t2").mkdir(parents=True)
    a = _run(env, bucket, proxy, work_dir, "t1", "head -c 100000 /dev/urandom > MNT/a && cat MNT/a > MNT/b",
             "--report", str(reports / "t1" / "flowfs-report.json"))
    assert a.returncode == 0, a.stderr
    b = _run(env, bucket, proxy, work_dir, "t2", "for i in 1 2 3; do echo $i > MNT/x$i; done; ls MNT",
             "--report", str(reports / "t2" / "flowfs-report-t2.json"))
    assert b.returncode == 0, b.stderr
    r = subprocess.run([flowfs_bin(), "report", str(reports), "--json"], capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    total = json.loads(r.stdout)
    assert total["requests"] == proxy_counts(proxy), proxy.stats.summary()
    # b is `cat a > b`: coreutils' cat calls copy_file_range, so b is a copy of a on the
    # server (issue 49), and a, x1, x2, x3 are the four PUTs.
    assert (total["requests"]["PutObject"], total["requests"].get("CopyObject")) == (4, 1), total["requests"]
    assert len(total["sources"]) == 2
    # The dollar figure, from the price table's own numbers.
    prices = json.loads((ROOT / "docs/prices/default.json").read_text())["per_1000_requests"]
    assert total["cost_usd"] == pytest.approx(sum(prices[o] * n / 1000 for o, n in total["requests"].items()))
    # Another table: egress priced by the GB, a request kind left out is named.
    own = work_dir / "prices.json"
    own.write_text(json.dumps({"name": "test", "per_1000_requests": {"PutObject": 1000.0},
                               "egress_per_gb": 1e9}))
    r = subprocess.run([flowfs_bin(), "report", str(reports), "--json", "--prices", str(own)],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    assert t["cost_usd"] == pytest.approx(4 * 1.0 + t["bytes_down"])
    assert set(t["cost"]["unpriced"]) == set(t["requests"]) - {"PutObject"}
    assert all(f"no price for {op}" in r.stderr for op in t["cost"]["unpriced"]), r.stderr
    # The table for a terminal says the same total.
    r = subprocess.run([flowfs_bin(), "report", str(reports)], capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 0 and "2 reports, 2 mounts" in r.stdout, r.stdout + r.stderr
    assert f"{total['cost_usd']:.6f} USD" in r.stdout


def test_report_errors_are_named(work_dir):
    empty = work_dir / "none"
    empty.mkdir()
    r = subprocess.run([flowfs_bin(), "report", str(empty)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "no flowfs-report*.json found" in r.stderr
    bad = work_dir / "flowfs-report-bad.json"
    bad.write_text("{")
    r = subprocess.run([flowfs_bin(), "report", str(bad)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "is not a flowfs usage report" in r.stderr
    r = subprocess.run([flowfs_bin(), "report", str(bad), "--prices", str(work_dir / "missing.json")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot read the price table" in r.stderr


PROMETHEUS = shutil.which("prometheus")


def _prom_query(port: int, q: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package is not installed (make setup)")
def test_prometheus_scrapes_the_counts_the_proxy_saw(mount, bucket, proxy, metrics_port, work_dir):
    m = mount(bucket, proxy=proxy, extra=["--metrics-addr", f"127.0.0.1:{metrics_port}", "--part-size", "5M"])
    prom_port = free_port()
    data = Path(tempfile.mkdtemp(dir=work_dir, prefix="prom-"))
    (data / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: flowfs\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
    log = open(data / "prometheus.log", "wb")
    prom = subprocess.Popen([PROMETHEUS, f"--config.file={data / 'prometheus.yml'}",
                             f"--storage.tsdb.path={data / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        workload(m.path)
        status_durable(m)
        want = proxy_counts(proxy)
        # Prometheus scrapes every second: wait (bounded) until its newest samples say
        # what the proxy saw.
        deadline = time.monotonic() + 60
        got: dict[str, int] = {}
        while time.monotonic() < deadline:
            try:
                res = _prom_query(prom_port, "sum by (op) (flowfs_requests_total)")
                got = {r["metric"]["op"]: int(float(r["value"][1])) for r in res}
            except OSError:
                got = {}
            if got == want:
                break
            time.sleep(0.5)
        assert got == want, f"Prometheus has {got}; the proxy saw {want}\n" + \
            (data / "prometheus.log").read_text(errors="replace")[-2000:]
        up = _prom_query(prom_port, 'up{job="flowfs"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(timeout=10)
        log.close()


def test_json_logs_are_one_object_per_line_with_the_operation_and_errno(mount, bucket, work_dir):
    env = mount.env()
    env.update({"FLOWFS_LOG": "debug", "FLOWFS_LOG_FORMAT": "json"})
    m = start_mount(f"s3://{bucket}", mount.new_mountpoint(), work_dir=work_dir / "json", env=env,
                    endpoint=mount.seaweed.endpoint)
    try:
        assert not (m.path / "no-such-file").exists()
        (m.path / "f.txt").write_bytes(b"x")
    finally:
        m.close()
    lines = [ln for ln in m.log_file.read_text().splitlines() if ln.strip()]
    objs = [json.loads(ln) for ln in lines]  # every line is one JSON object
    failed = [o for o in objs if o.get("fields", {}).get("message") == "failed"]
    assert any(o["fields"].get("errno") == 2 and o.get("span", {}).get("op") == "lookup"
               and "no-such-file" in o["span"].get("about", "") for o in failed), lines[-20:]
    secret = env["AWS_SECRET_ACCESS_KEY"]
    assert secret not in m.log_file.read_text()


@pytest.mark.parametrize("var,value,says", [
    ("FLOWFS_LOG_FORMAT", "yaml", "FLOWFS_LOG_FORMAT must be text or json"),
    ("FLOWFS_LOG", "info,flowfs_fs=loud", 'FLOWFS_LOG "info,flowfs_fs=loud"'),
], ids=["format", "filter"])
def test_an_unknown_log_setting_is_refused_before_mounting(mount, bucket, work_dir, var, value, says):
    env = mount.env()
    env[var] = value
    with pytest.raises(Exception) as e:
        start_mount(f"s3://{bucket}", mount.new_mountpoint(), work_dir=work_dir / "bad-log", env=env,
                    endpoint=mount.seaweed.endpoint)
    assert says in str(e.value)


def test_fuse_requests_are_counted_by_operation_with_their_latency(mount, bucket, metrics_port):
    # Without passthrough, so that the writes are FUSE requests (with it, the kernel writes
    # the staged file itself).
    m = mount(bucket, extra=["--metrics-addr", str(metrics_port), "--passthrough", "off"])
    for i in range(5):
        (m.path / f"f{i}").write_bytes(b"abc")
    for i in range(5):
        assert (m.path / f"f{i}").read_bytes() == b"abc"
    os.listdir(m.path)

    def fuse_counts():
        text = scrape(metrics_port)
        counts = {}
        for line in text.splitlines():
            if line.startswith("flowfs_fuse_request_seconds_count{"):
                op = line.split('op="')[1].split('"')[0]
                counts[op] = int(line.split()[-1])
        return text, counts

    # The kernel sends RELEASE after close() has returned, so the last one may still be on
    # its way when the scrape comes: wait for the counter, never longer than 10 s.
    poll(lambda: fuse_counts()[1].get("release", 0) >= 10, 10,
         lambda: f"10 releases counted: {fuse_counts()[1]}")
    text, counts = fuse_counts()
    assert counts.get("create", 0) >= 5 and counts.get("write", 0) >= 5, counts
    assert counts.get("open", 0) >= 5 and counts.get("release", 0) >= 10, counts
    assert 'flowfs_fuse_request_seconds_bucket{le="+Inf",op="create"}' in text or \
        'flowfs_fuse_request_seconds_bucket{op="create",le="+Inf"}' in text, text[:2000]


def test_top_prints_a_line_per_interval_with_the_rates(mount, bucket):
    m = mount(bucket)
    top = subprocess.Popen([flowfs_bin(), "top", str(m.path), "--interval", "0.5", "--count", "4"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=m.env)
    # Work while it watches: puts and reads.
    for i in range(30):
        (m.path / f"t{i}").write_bytes(payload(20000, f"t{i}"))
    out, err = top.communicate(timeout=60)
    assert top.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["time", "req/s", "get/s"], out
    rows = [ln.split() for ln in lines[1:]]
    assert len(rows) == 4 and all(len(r) == 12 for r in rows), out
    assert sum(float(r[3]) for r in rows) > 0, out  # PUTs per second were seen
    r = subprocess.run([flowfs_bin(), "top", str(m.path / "nowhere")], capture_output=True, text=True,
                       timeout=30, env=m.env)
    assert r.returncode == 2 and "cannot ask the mount" in r.stderr


class _OtlpReceiver:
    """A small OTLP/HTTP receiver on loopback: keeps every ExportMetricsServiceRequest
    POSTed to /v1/metrics (protobuf bodies), and the headers it came with."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as svc

        self.requests: list = []
        self.headers: list[dict] = []
        self.arrived = threading.Condition()
        me = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.path == "/v1/metrics" and self.headers["Content-Type"] == "application/x-protobuf"
                if ok:
                    req = svc.ExportMetricsServiceRequest()
                    req.ParseFromString(body)
                    with me.arrived:
                        me.requests.append(req)
                        me.headers.append(dict(self.headers))
                        me.arrived.notify_all()
                out = svc.ExportMetricsServiceResponse().SerializeToString() if ok else b""
                self.send_response(200 if ok else 400)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, n: int, timeout: float) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= n, timeout)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _otlp_requests(req) -> dict[str, int]:
    """flowfs.requests summed by op, from one export request."""
    out: dict[str, int] = {}
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "flowfs.requests":
                    assert m.sum.is_monotonic and m.sum.aggregation_temporality == 2  # cumulative
                    for p in m.sum.data_points:
                        op = next(a.value.string_value for a in p.attributes if a.key == "op")
                        out[op] = out.get(op, 0) + p.as_int
    return out


def test_otlp_push_reaches_a_collector_with_the_proxys_counts(mount, bucket, proxy, work_dir):
    pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
    rx = _OtlpReceiver()
    try:
        env = mount.env(proxy.endpoint)
        env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rx.port}",
                    "OTEL_METRIC_EXPORT_INTERVAL": "300", "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=s3cr%3Dt"})
        m = start_mount(f"s3://{bucket}", mount.new_mountpoint(), work_dir=work_dir / "otlp", env=env,
                        endpoint=proxy.endpoint, extra=["--part-size", "5M"], foreground=True)
        workload(m.path)
        assert rx.wait(1, 30), "no push arrived"
        r = m.unmount(timeout=120)
        assert r.returncode == 0, r.stderr + m.log_text()[-3000:] + "\n".join(
            p.read_text() for p in (work_dir / "otlp").glob("*.stderr"))
        # The push at the end of the mount carries every request, the unmount's uploads too.
        last = rx.requests[-1]
        assert _otlp_requests(last) == proxy_counts(proxy), proxy.stats.summary()
        attrs = {a.key: a.value.string_value for a in last.resource_metrics[0].resource.attributes}
        assert attrs["service.name"] == "flowfs" and attrs["flowfs.source"] == f"s3://{bucket}"
        names = {x.name for x in last.resource_metrics[0].scope_metrics[0].metrics}
        assert {"flowfs.fuse_request", "flowfs.request_first_byte", "flowfs.store_written"} <= names
        assert rx.headers[-1].get("x-api-key") == "s3cr=t"
        assert "s3cr" not in m.log_text()
    finally:
        rx.stop()


def test_an_otlp_grpc_endpoint_is_refused_before_mounting(mount, bucket, work_dir):
    env = mount.env()
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(Exception) as e:
        start_mount(f"s3://{bucket}", mount.new_mountpoint(), work_dir=work_dir / "grpc", env=env,
                    endpoint=mount.seaweed.endpoint)
    assert "http/protobuf" in str(e.value)


def _outcomes(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("flowfs_requests_total{"):
            o = line.split('outcome="')[1].split('"')[0]
            out[o] = out.get(o, 0) + int(float(line.split()[-1]))
    return out


def test_retries_and_their_backoff_are_counted_under_faults(mount, bucket, fault_proxy, metrics_port):
    """A server that answers 503 SlowDown and 500s now and then: the requests it failed are
    `throttled` and `retried`, as many as the proxy injected, and the time slept between
    attempts is counted; every file still lands."""
    import faultproxy
    m = mount(bucket, proxy=fault_proxy, extra=["--metrics-addr", str(metrics_port)])
    fault_proxy.set_faults(faultproxy.mix(slowdown=0.15, internal=0.1))
    want = {}
    for i in range(40):
        data = payload(2000 + i, f"fault{i}")
        (m.path / f"f{i}").write_bytes(data)
        want[f"f{i}"] = sha256(data)
    status_durable(m, timeout=120)
    fault_proxy.set_faults({})
    text = scrape(metrics_port)
    got = _outcomes(text)
    injected = fault_proxy.faults.snapshot()["injected"]
    # Each injected 503 is one throttled request, each 500 one retried (the mount's requests
    # only go through this proxy).
    assert got.get("throttled", 0) == injected.get("slowdown", 0) > 0, (got, injected)
    assert got.get("retried", 0) == injected.get("internal", 0) > 0, (got, injected)
    assert metric(text, "flowfs_retry_backoff_seconds_total") > 0
    assert metric(text, "flowfs_retries_total") >= got["throttled"] + got["retried"] - \
        metric(text, "flowfs_retry_give_ups_total")
    check_read(m.path, want)


def test_evictions_are_counted(mount, bucket, s3, metrics_port):
    from helpers import put_many
    big = payload(48 * MiB, "evict")
    put_many(s3, bucket, {"big.bin": big})
    # Every byte read kept (a first read keeps nothing under the default admission).
    m = mount(bucket, extra=["--metrics-addr", str(metrics_port), "--cache-size", "16M",
                             "--cache-admit", "always"])
    assert sha256((m.path / "big.bin").read_bytes()) == sha256(big)
    # All 48 MiB went through a 16 MiB cache: once the evictions that follow the fetches
    # are done (they run after a fetch ends, and a read may be answered before: CI scraped
    # 5 MiB right after the read), at least 32 MiB were evicted.
    deadline = time.monotonic() + 30
    while True:
        text = scrape(metrics_port)
        evicted = metric(text, "flowfs_cache_evicted_bytes_total")
        if evicted >= 32 * MiB or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert evicted >= 32 * MiB, f"{evicted / MiB:.1f} MiB evicted after 30 s\n{text[-3000:]}"
    blocks = metric(text, "flowfs_cache_evicted_blocks_total")
    assert blocks >= evicted / MiB, (blocks, evicted)  # blocks of 1 MiB at most


def test_journal_records_are_counted_while_files_are_not_durable(mount, bucket, metrics_port):
    """A file written and still open is in the journal (a recovery would upload it); once
    closed and uploaded its record is gone, and every record written was counted."""
    m = mount(bucket, extra=["--metrics-addr", str(metrics_port)])
    held = [open(m.path / f"open-{i}.txt", "wb") for i in range(3)]
    for i, f in enumerate(held):
        f.write(b"x" * (1000 + i))
        f.flush()
        os.fsync(f.fileno())
    text = scrape(metrics_port)
    assert metric(text, "flowfs_journal_records") == 3, text
    for f in held:
        f.close()
    for i in range(5):
        (m.path / f"closed-{i}.txt").write_bytes(b"y" * i)
    status_durable(m)
    text = scrape(metrics_port)
    assert metric(text, "flowfs_journal_records") == 0
    assert metric(text, "flowfs_journal_records_written_total") >= 3 + 5


def _write_locked(path: Path) -> bool:
    """Whether a process holds an OFD write lock (a fetch in flight) on the file at path."""
    ino = path.stat().st_ino
    with open("/proc/locks") as f:
        return any("OFDLCK" in l and "WRITE" in l and l.split()[5].endswith(f":{ino}") for l in f)


def test_a_read_that_waits_for_another_mounts_fetch_is_counted(mount, bucket, s3, proxy, metrics_port, work_dir):
    """Two mounts on one cache dir: the second reads a file while the first's GET of it is
    in flight (its fetch lock held, 500 ms of latency): it waits for those bytes instead
    of fetching them, and says so in flowfs_cache_other_process_waits_total."""
    import threading
    from helpers import put_many
    data = payload(4 * MiB, "shared")
    put_many(s3, bucket, {"shared.bin": data})
    cache = work_dir / "shared-cache"
    ports = [metrics_port, free_port()]
    a, b = (mount(bucket, proxy=proxy, cache_dir=cache, extra=["--metrics-addr", str(p)]) for p in ports)
    for m in (a, b):  # looked up before the latency: the reads then send only their GET
        assert (m.path / "shared.bin").stat().st_size == len(data)
    urllib.request.urlopen(f"{proxy.endpoint}/__proxy__/latency?ms=500", timeout=10).read()
    proxy.reset()
    got = {}
    first = threading.Thread(target=lambda: got.update(a=(a.path / "shared.bin").read_bytes()))
    first.start()
    deadline = time.monotonic() + 30
    while not any(_write_locked(p) for p in (cache / "objects").rglob("*.map")):
        assert time.monotonic() < deadline and first.is_alive(), "the first mount's fetch never began"
        time.sleep(0.005)
    got["b"] = (b.path / "shared.bin").read_bytes()
    first.join(30)
    assert got["a"] == data and got["b"] == data
    waits = [metric(scrape(p), "flowfs_cache_other_process_waits_total") for p in ports]
    assert waits[0] == 0 and waits[1] >= 1, (waits, proxy.stats.summary())
    # Every byte was fetched once, by the first, and nothing else was asked.
    assert proxy.stats.snapshot()["get_bytes"] == len(data), proxy.stats.summary()
    # An object no larger than a part comes whole on its first read: one GET without a
    # Range (its checksum checked), and nothing else.
    assert proxy.stats.snapshot()["ops"] == {"GET": 1}, proxy.stats.summary()
