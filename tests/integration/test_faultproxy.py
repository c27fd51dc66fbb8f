"""The fault proxy itself (faultproxy.py), with boto3 whose retries are set to a known
number: every injected fault is seen by the client as that fault, and counted. No flowfs."""

from __future__ import annotations

import errno
import http.client
import json
import socket
import time
import urllib.request
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ResponseStreamingError

import faultproxy as F
import s3proxy as P
from helpers import MiB, payload, sha256
from seaweed import REGION

RETRIES = 2
# seaweed.make_client(retries=N) sets botocore's `max_attempts` to N + 1, and botocore reads
# `max_attempts` (unlike `total_max_attempts`) as the number of RETRIES: N + 2 attempts.
ATTEMPTS = RETRIES + 2


@pytest.fixture
def fp(seaweed):
    p = F.FaultProxy(seaweed.endpoint, seed=7, stall_seconds=0.5).start()
    yield p
    p.stop()


def _client(seaweed, fp, retries=RETRIES):
    return seaweed.client(fp.endpoint, retries=retries, connect_timeout=2, read_timeout=10)


def _one_shot_client(seaweed, endpoint):
    """boto3 with exactly one attempt per call (total_max_attempts=1)."""
    import boto3
    from botocore.config import Config

    cfg = Config(region_name=REGION, signature_version="s3v4", s3={"addressing_style": "path"},
                 retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=2, read_timeout=10,
                 proxies={})
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=cfg,
                                          aws_access_key_id=seaweed.creds.access_key,
                                          aws_secret_access_key=seaweed.creds.secret_key)


def test_slowdown_is_an_s3_503_and_every_attempt_is_counted(seaweed, s3, bucket, fp):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    c = _client(seaweed, fp)
    fp.set_faults({P.HEAD: {F.SLOWDOWN: 1.0}, P.GET: {F.SLOWDOWN: 1.0}})
    with pytest.raises(ClientError) as ei:
        c.get_object(Bucket=bucket, Key="k")
    err = ei.value.response
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert err["Error"]["Code"] == "SlowDown" and "reduce your request rate" in err["Error"]["Message"]
    assert err["ResponseMetadata"]["RequestId"].startswith("FAULTPROXY")
    with pytest.raises(ClientError) as ei:
        c.head_object(Bucket=bucket, Key="k")  # a HEAD error has no body: the status says it
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert fp.injected(F.SLOWDOWN, op=P.GET) == ATTEMPTS
    assert fp.injected(F.SLOWDOWN, op=P.HEAD) == ATTEMPTS
    assert fp.count(P.GET) == ATTEMPTS, "every attempt is a request the proxy saw"
    fp.clear_faults()
    assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"x"


def test_internal_error_is_not_forwarded_and_the_body_was_read(seaweed, s3, bucket, fp):
    c = _client(seaweed, fp)
    fp.set_faults({P.PUT: {F.INTERNAL: 1.0}})
    body = payload(3 * MiB, "internal")
    with pytest.raises(ClientError) as ei:
        c.put_object(Bucket=bucket, Key="never", Body=body)
    assert ei.value.response["Error"]["Code"] == "InternalError"
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert fp.injected(F.INTERNAL) == ATTEMPTS
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket), "an injected error must not reach the server"
    fp.clear_faults()
    c.put_object(Bucket=bucket, Key="after", Body=body)  # the same pooled connections still work
    assert sha256(s3.get_object(Bucket=bucket, Key="after")["Body"].read()) == sha256(body)


def test_reset_before_the_response(seaweed, bucket, fp):
    c = _client(seaweed, fp)
    fp.set_faults({P.LIST: {F.RESET: 1.0}})
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        c.list_objects_v2(Bucket=bucket)
    assert fp.injected(F.RESET) == ATTEMPTS
    fp.clear_faults()
    c.list_objects_v2(Bucket=bucket)


def _raw_get(seaweed, fp, bucket, key):
    """A signed GetObject over http.client (UNSIGNED-PAYLOAD, as flowfs sends)."""
    path = f"/{bucket}/{key}"
    headers = {"Host": urlsplit(fp.endpoint).netloc, "x-amz-content-sha256": "UNSIGNED-PAYLOAD"}
    req = AWSRequest(method="GET", url=fp.endpoint + path, headers=headers)
    req.context["payload_signing_enabled"] = False
    SigV4Auth(BotoCredentials(seaweed.creds.access_key, seaweed.creds.secret_key), "s3", REGION).add_auth(req)
    u = urlsplit(fp.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", path, headers=dict(req.headers.items()))
    return conn, conn.getresponse()


def test_reset_mid_body_sends_headers_and_part_of_the_body_then_rst(seaweed, s3, bucket, fp):
    data = payload(4 * MiB, "midbody")
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    fp.set_faults({P.GET: {F.RESET_MID_BODY: 1.0}})
    conn, resp = _raw_get(seaweed, fp, bucket, "big")
    assert resp.status == 200 and int(resp.getheader("Content-Length")) == len(data)
    got = bytearray()
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)) as ei:
        while chunk := resp.read1(65536):
            got += chunk
        raise AssertionError(f"the body ended cleanly after {len(got)} bytes")
    conn.close()
    assert len(got) < len(data) and got == data[:len(got)], "what arrived must be a prefix"
    assert fp.injected(F.RESET_MID_BODY) == 1
    # boto3 sees the headers succeed and the body fail (not retried: the SDKs do not)
    c = _client(seaweed, fp)
    obj = c.get_object(Bucket=bucket, Key="big")
    with pytest.raises((ResponseStreamingError, ConnectionResetError)):
        obj["Body"].read()
    assert fp.injected(F.RESET_MID_BODY) == 2
    print(f"first cut after {len(got)} of {len(data)} bytes; {ei.typename}")


def test_reset_mid_body_passes_bodies_too_short_to_cut(seaweed, s3, bucket, fp):
    s3.put_object(Bucket=bucket, Key="one", Body=b"1")
    fp.set_faults({P.GET: {F.RESET_MID_BODY: 1.0}, P.HEAD: {F.RESET_MID_BODY: 1.0}})
    c = _client(seaweed, fp)
    assert c.get_object(Bucket=bucket, Key="one")["Body"].read() == b"1"
    assert c.head_object(Bucket=bucket, Key="one")["ContentLength"] == 1
    assert fp.injected() == 0


def test_stall_delays_then_answers(seaweed, s3, bucket, fp):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    c = _one_shot_client(seaweed, fp.endpoint)
    c.head_object(Bucket=bucket, Key="k")  # connection set up outside the timing
    fp.set_faults({P.HEAD: {F.STALL: 1.0}})
    t0 = time.monotonic()
    assert c.head_object(Bucket=bucket, Key="k")["ContentLength"] == 1
    took = time.monotonic() - t0
    assert 0.5 <= took < 3, took
    assert fp.injected(F.STALL) == 1


def test_lost_response_means_the_server_did_it(seaweed, s3, bucket, fp):
    c = _one_shot_client(seaweed, fp.endpoint)
    fp.set_faults({P.PUT: {F.LOST_RESPONSE: 1.0}})
    with pytest.raises(ConnectionClosedError):
        c.put_object(Bucket=bucket, Key="done-anyway", Body=b"applied")
    assert s3.get_object(Bucket=bucket, Key="done-anyway")["Body"].read() == b"applied"
    assert fp.injected(F.LOST_RESPONSE) == 1


def _outcomes(seaweed, bucket, seed: int) -> list[str]:
    p = F.FaultProxy(seaweed.endpoint, seed=seed, stall_seconds=0.01).start()
    try:
        p.set_faults(F.mix(slowdown=0.2, internal=0.1, reset=0.1, stall=0.1))
        c = _one_shot_client(seaweed, p.endpoint)
        out = []
        for i in range(40):  # one at a time: the request order is fixed
            try:
                c.head_object(Bucket=bucket, Key="k")
                out.append("ok")
            except ClientError as e:
                out.append(str(e.response["ResponseMetadata"]["HTTPStatusCode"]))
            except (ConnectionClosedError, EndpointConnectionError):
                out.append("reset")
        return out + [json.dumps(p.faults.snapshot()["injected"], sort_keys=True)]
    finally:
        p.stop()


def test_the_same_seed_fails_the_same_requests(seaweed, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    a, b, other = _outcomes(seaweed, bucket, 1), _outcomes(seaweed, bucket, 1), _outcomes(seaweed, bucket, 2)
    assert a == b
    assert a != other
    assert {"503", "500", "reset", "ok"} <= set(a), a


def test_boto3_with_retries_gets_every_byte_through_a_fault_mix(seaweed, s3, bucket, fp):
    c = seaweed.client(fp.endpoint, retries=8, connect_timeout=2, read_timeout=10)
    fp.set_faults(F.mix(slowdown=0.1, internal=0.05, reset=0.05, stall=0.02))
    objs = {f"m/{i}": payload(1000 * i, f"mix{i}") for i in range(20)}
    for k, v in objs.items():
        c.put_object(Bucket=bucket, Key=k, Body=v)
    for k, v in objs.items():
        assert c.get_object(Bucket=bucket, Key=k)["Body"].read() == v
        assert s3.get_object(Bucket=bucket, Key=k)["Body"].read() == v  # straight from the server
    inj = fp.faults.snapshot()["injected"]
    print(fp.fault_summary())
    assert inj.get(F.SLOWDOWN, 0) > 0 and inj.get(F.INTERNAL, 0) > 0 and inj.get(F.RESET, 0) > 0, inj


def _connect_errno(fp) -> int | None:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", int(urlsplit(fp.endpoint).port)))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return None if s.recv(1) else 0
    except OSError as e:
        return e.errno
    finally:
        s.close()


def test_down_resets_or_refuses_until_up(seaweed, bucket, fp):
    c = _one_shot_client(seaweed, fp.endpoint)
    c.list_objects_v2(Bucket=bucket)  # a kept-alive connection from before the outage
    fp.down(mode="reset")
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        c.list_objects_v2(Bucket=bucket)
    assert _connect_errno(fp) == errno.ECONNRESET
    fp.up()
    c.list_objects_v2(Bucket=bucket)
    fp.down(mode="refuse")
    assert _connect_errno(fp) == errno.ECONNREFUSED
    fp.up()
    c.list_objects_v2(Bucket=bucket)
    fp.down(seconds=0.5, mode="refuse")
    assert fp.is_down
    assert fp.wait_up(10)
    c.list_objects_v2(Bucket=bucket)
    assert fp.injected(F.DOWN_RESET) >= 2


def test_control_endpoint(seaweed, s3, bucket, fp):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(path, cfg=None):
        req = urllib.request.Request(fp.endpoint + path, data=json.dumps(cfg or {}).encode(), method="POST")
        with opener.open(req, timeout=10) as r:
            return json.loads(r.read())

    snap = post("/__proxy__/faults", {"rates": {"HEAD": {"slowdown": 1.0}}})
    assert snap["rates"] == {"HEAD": {"slowdown": 1.0}} and snap["seed"] == 7
    with pytest.raises(ClientError):
        _one_shot_client(seaweed, fp.endpoint).head_object(Bucket=bucket, Key="k")
    with opener.open(fp.endpoint + "/__proxy__/faults", timeout=10) as r:
        assert json.loads(r.read())["injected"] == {"slowdown": 1}
    assert post("/__proxy__/faults/reset")["injected"] == {}
    assert post("/__proxy__/faults", {"rates": {}, "down": 0.2})["down"] is True
    assert fp.wait_up(10)
