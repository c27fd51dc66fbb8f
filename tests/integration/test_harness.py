"""The harness itself: SeaweedFS answers signed S3 requests, and the counting proxy
forwards them faithfully (signatures, streaming, keep-alive) and counts correctly.
These tests need no flowfs binary."""

from __future__ import annotations

import http.client
import socket
from urllib.parse import quote, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from botocore.exceptions import ClientError

import s3proxy as P
from helpers import MiB, payload, sha256, upload_large
from seaweed import Credentials, make_client


def test_server_answers_signed_requests(seaweed, s3, bucket):
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert bucket in names
    s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello\n")
    assert s3.get_object(Bucket=bucket, Key="hello.txt")["Body"].read() == b"hello\n"


def test_server_rejects_wrong_secret(seaweed, bucket):
    bad = make_client(seaweed.endpoint, Credentials(seaweed.creds.access_key, "not-the-secret"), retries=0)
    with pytest.raises(ClientError) as ei:
        bad.list_objects_v2(Bucket=bucket)
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_server_rejects_unknown_access_key(seaweed, bucket):
    bad = make_client(seaweed.endpoint, Credentials("AKIANOSUCHKEY0000000", "x" * 40), retries=0)
    with pytest.raises(ClientError) as ei:
        bad.head_bucket(Bucket=bucket)
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_proxy_round_trip_and_counts(seaweed, proxy, bucket):
    c = seaweed.client(proxy.endpoint)
    data = payload(3 * MiB + 17, "rt")
    c.put_object(Bucket=bucket, Key="dir/obj one+&=.bin", Body=data)
    assert proxy.count(P.PUT) == 1 and proxy.stats.put_bytes == len(data)

    proxy.reset()
    got = c.get_object(Bucket=bucket, Key="dir/obj one+&=.bin")["Body"].read()
    assert sha256(got) == sha256(data)
    assert proxy.count(P.GET) == 1 and proxy.count(P.GET_RANGE) == 0
    assert proxy.get_bytes == len(data)

    proxy.reset()
    part = c.get_object(Bucket=bucket, Key="dir/obj one+&=.bin", Range="bytes=1000-5095")["Body"].read()
    assert part == data[1000:5096]
    assert proxy.count(P.GET_RANGE) == 1 and proxy.get_bytes == 4096

    proxy.reset()
    assert c.head_object(Bucket=bucket, Key="dir/obj one+&=.bin")["ContentLength"] == len(data)
    assert proxy.count(P.HEAD) == 1 and proxy.get_bytes == 0

    rec = proxy.stats.records[-1]
    assert (rec.bucket, rec.key, rec.status) == (bucket, "dir/obj one+&=.bin", 200)


def test_proxy_latency_delays_every_request_until_set_back(seaweed, proxy, bucket):
    """bench/run.py --latency: every request waits the set time in the proxy, then goes on."""
    import json
    import time
    import urllib.request

    def control(ms: float) -> dict:
        with urllib.request.urlopen(f"{proxy.endpoint}/__proxy__/latency?ms={ms}", timeout=10) as r:
            return json.loads(r.read())

    c = seaweed.client(proxy.endpoint)
    c.put_object(Bucket=bucket, Key="lat.txt", Body=b"x")
    assert control(150)["latency_ms"] == 150
    try:
        t0 = time.monotonic()
        for _ in range(3):
            assert c.get_object(Bucket=bucket, Key="lat.txt")["Body"].read() == b"x"
        assert time.monotonic() - t0 >= 0.45
    finally:
        assert control(0)["latency_ms"] == 0
    t0 = time.monotonic()
    c.head_object(Bucket=bucket, Key="lat.txt")
    assert time.monotonic() - t0 < 0.15


def test_proxy_counts_list_pages(seaweed, proxy, bucket):
    c = seaweed.client(proxy.endpoint)
    for i in range(5):
        c.put_object(Bucket=bucket, Key=f"p/{i}", Body=b"x")
    proxy.reset()
    keys = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="p/", PaginationConfig={"PageSize": 2}):
        keys += [o["Key"] for o in page.get("Contents", [])]
    assert keys == [f"p/{i}" for i in range(5)]
    assert proxy.count(P.LIST) == 3
    assert proxy.get_bytes == 0  # listing bodies are not object bytes


def test_proxy_multipart(seaweed, proxy, bucket):
    c = seaweed.client(proxy.endpoint)
    data = payload(20 * MiB + 3, "mp")
    upload_large(c, bucket, "mp.bin", data, part_size=8 * MiB)
    assert proxy.count(P.CREATE_MULTIPART) == 1
    assert proxy.count(P.UPLOAD_PART) == 3
    assert proxy.count(P.COMPLETE_MULTIPART) == 1
    assert proxy.stats.put_bytes == len(data)
    direct = seaweed.client().get_object(Bucket=bucket, Key="mp.bin")["Body"].read()
    assert sha256(direct) == sha256(data)


def test_proxy_keeps_signatures_valid_and_rejections(seaweed, proxy, bucket):
    bad = make_client(proxy.endpoint, Credentials(seaweed.creds.access_key, "wrong-secret"), retries=0)
    with pytest.raises(ClientError) as ei:
        bad.list_objects_v2(Bucket=bucket)
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert proxy.count(P.LIST) == 1
    assert proxy.stats.records[-1].status == 403


def test_proxy_keep_alive(seaweed, proxy, bucket):
    c = seaweed.client(proxy.endpoint)
    c.put_object(Bucket=bucket, Key="k", Body=b"abc")
    proxy.reset()
    for _ in range(20):
        assert c.get_object(Bucket=bucket, Key="k")["Body"].read() == b"abc"
    assert proxy.count(P.GET) == 20
    assert proxy.stats.connections <= 1, "sequential requests should reuse one connection"


def _signed_raw(seaweed, endpoint: str, method: str, path: str, headers: dict[str, str]) -> dict[str, str]:
    headers = {"Host": urlsplit(endpoint).netloc, **headers}
    req = AWSRequest(method=method, url=endpoint + path, headers=headers)
    req.context["payload_signing_enabled"] = False  # UNSIGNED-PAYLOAD
    SigV4Auth(BotoCredentials(seaweed.creds.access_key, seaweed.creds.secret_key), "s3", "us-east-1").add_auth(req)
    return dict(req.headers.items())


def test_proxy_streams_chunked_request_body(seaweed, proxy, bucket):
    """A Transfer-Encoding: chunked upload passes through the proxy byte for byte."""
    data = payload(5 * MiB + 99, "chunked")
    path = f"/{bucket}/{quote('chunked obj.bin')}"
    headers = _signed_raw(seaweed, proxy.endpoint, "PUT", path,
                          {"x-amz-content-sha256": "UNSIGNED-PAYLOAD", "Content-Type": "application/octet-stream"})
    u = urlsplit(proxy.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.putrequest("PUT", path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        for i in range(0, len(data), 1000003):
            piece = data[i:i + 1000003]
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200, body[:500]
    finally:
        conn.close()
    assert proxy.count(P.PUT) == 1 and proxy.stats.put_bytes == len(data)
    got = seaweed.client().get_object(Bucket=bucket, Key="chunked obj.bin")["Body"].read()
    assert sha256(got) == sha256(data)


def test_proxy_survives_client_abort_mid_get(seaweed, proxy, bucket):
    data = payload(16 * MiB, "abort")
    seaweed.client().put_object(Bucket=bucket, Key="big", Body=data)
    path = f"/{bucket}/big"
    headers = _signed_raw(seaweed, proxy.endpoint, "GET", path, {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    u = urlsplit(proxy.endpoint)
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    req = f"GET {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    s.sendall(req.encode())
    got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200")
    s.close()  # walk away after the first bytes
    c = seaweed.client(proxy.endpoint)
    assert c.get_object(Bucket=bucket, Key="big", Range="bytes=0-9")["Body"].read() == data[:10]
    assert proxy.get_bytes < len(data), "an aborted GET is counted only for what was sent"
    assert proxy.count(P.GET) == 1 and proxy.count(P.GET_RANGE) == 1


def test_classify():
    h = {}
    assert P.classify("GET", "/b/k", h)[0] == P.GET
    assert P.classify("GET", "/b/k", {"Range": "bytes=0-1"})[0] == P.GET_RANGE
    assert P.classify("GET", "/b?list-type=2&prefix=a%2F&delimiter=%2F", h) == (P.LIST, "b", "")
    assert P.classify("GET", "/b/", h)[0] == P.LIST
    assert P.classify("GET", "/", h)[0] == P.LIST_BUCKETS
    assert P.classify("HEAD", "/b/a%20b", h) == (P.HEAD, "b", "a b")
    assert P.classify("HEAD", "/b", h)[0] == P.HEAD_BUCKET
    assert P.classify("POST", "/b/k?uploads", h)[0] == P.CREATE_MULTIPART
    assert P.classify("PUT", "/b/k?partNumber=1&uploadId=x", h)[0] == P.UPLOAD_PART
    assert P.classify("POST", "/b/k?uploadId=x", h)[0] == P.COMPLETE_MULTIPART
    assert P.classify("DELETE", "/b/k?uploadId=x", h)[0] == P.ABORT_MULTIPART
    assert P.classify("PUT", "/b/k", {"x-amz-copy-source": "/b/j"})[0] == P.COPY
    assert P.classify("PUT", "/b/k", h)[0] == P.PUT
    assert P.classify("DELETE", "/b/k", h)[0] == P.DELETE
    assert P.classify("POST", "/b?delete", h)[0] == P.DELETE_OBJECTS
    assert P.classify("GET", "/b?location", h)[0] == P.BUCKET_OTHER
