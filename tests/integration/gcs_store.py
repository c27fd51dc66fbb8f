"""Google Cloud Storage in the shape the integration tests' S3 helpers use (issue 30):
`GcsS3` answers the few boto3 calls those helpers make (put_object, get_object,
head_object, the list_objects_v2 paginator, upload_fileobj, create_bucket) with the GCS
JSON API on fake-gcs-server, so that a test written against boto3 (test_write_mix, the
kill -9 recovery, the read set) runs unchanged on GCS through test_gcs.py's fixtures.

Big files go up as a resumable upload in 8 MiB chunks, as Google's tools send them; small
ones as one `uploadType=multipart` request with their metadata. Nothing here talks to
anything but 127.0.0.1 (the emulator needs no credentials).
"""

from __future__ import annotations

import io
import json
import urllib.parse

from emulators import request

CHUNK = 8 << 20


class _ClientError(Exception):
    """What boto3's `s3.exceptions.ClientError` and `NoSuchKey` stand for here."""


class _Exceptions:
    ClientError = _ClientError
    NoSuchKey = _ClientError


def _q(key: str) -> str:
    return urllib.parse.quote(key, safe="")


def multipart_upload(key: str, data: bytes, metadata: dict | None) -> tuple[bytes, dict]:
    """The body and headers of an `uploadType=multipart` request: the object's resource
    (with its metadata) and its bytes in one request, as a small file's PUT is on S3."""
    boundary = "gcs-store-7f3a9c"
    res = json.dumps({"name": key, "metadata": dict(metadata or {})}).encode()
    body = (f"--{boundary}\r\ncontent-type: application/json\r\n\r\n".encode() + res
            + f"\r\n--{boundary}\r\ncontent-type: application/octet-stream\r\n\r\n".encode()
            + data + f"\r\n--{boundary}--\r\n".encode())
    return body, {"content-type": f"multipart/related; boundary={boundary}"}


def _bytes(body) -> bytes:
    data = body.read() if hasattr(body, "read") else body
    return data.encode() if isinstance(data, str) else bytes(data)


class _Paginator:
    def __init__(self, gcs):
        self.gcs = gcs

    def paginate(self, Bucket: str, Prefix: str = ""):  # noqa: N803 - boto3's names
        token = None
        while True:
            page = self.gcs._list(Bucket, Prefix, token)
            yield {"Contents": [{"Key": o["name"], "Size": int(o["size"])} for o in page.get("items", [])]}
            token = page.get("nextPageToken")
            if not token:
                return


class GcsS3:
    """The boto3 calls of the test helpers, on GCS buckets."""

    exceptions = _Exceptions
    LIST_PAGE = 1000

    def __init__(self, url: str):
        self.url = url

    def _call(self, path: str, method: str = "GET", body: bytes | None = None, headers=None, timeout=30):
        st, got, h = request(f"{self.url}{path}", method, body, headers, timeout=timeout)
        if st == 404:
            raise _ClientError(f"{method} {path}: 404")
        if st >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {st}: {got[:300]!r}")
        return got, h

    def _list(self, bucket: str, prefix: str, token: str | None) -> dict:
        q = {"prefix": prefix} if prefix else {}
        if token:
            q["pageToken"] = token
        got, _ = self._call(f"/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(q)}")
        return json.loads(got)

    def create_bucket(self, Bucket: str):  # noqa: N803
        self._call("/storage/v1/b?project=flowfs", "POST", json.dumps({"name": Bucket}).encode(),
                   {"content-type": "application/json"})

    def put_object(self, Bucket: str, Key: str, Body=b"", Metadata=None, **_):  # noqa: N803
        body, headers = multipart_upload(Key, _bytes(Body), Metadata)
        self._call(f"/upload/storage/v1/b/{Bucket}/o?uploadType=multipart", "POST", body, headers)
        return {}

    def upload_fileobj(self, f, bucket: str, key: str, Config=None):  # noqa: N803, ARG002
        """A resumable upload, in chunks of CHUNK bytes (a multiple of 256 KiB)."""
        self.upload_chunks(bucket, key, iter(lambda: f.read(CHUNK), b""))

    def upload_chunks(self, bucket: str, key: str, chunks) -> None:
        """A resumable upload of `chunks` (each a multiple of 256 KiB but the last)."""
        _, h = self._call(f"/upload/storage/v1/b/{bucket}/o?uploadType=resumable&name={_q(key)}", "POST",
                          b"{}", {"content-type": "application/json"})
        session, sent = h["location"], 0
        chunks = iter(chunks)
        chunk = next(chunks, b"")
        while True:
            nxt = next(chunks, b"")
            end = sent + len(chunk)
            total = str(end) if not nxt else "*"
            rng = f"bytes {sent}-{end - 1}/{total}" if chunk else f"bytes */{end}"
            st, got, _ = request(session, "PUT", chunk, {"content-range": rng})
            if st not in (200, 201, 308):
                raise RuntimeError(f"resumable upload of {key}: HTTP {st}: {got[:300]!r}")
            sent, chunk = end, nxt
            if not chunk:
                return

    def compose(self, bucket: str, key: str, sources: list[str]) -> None:
        """`key` made of `sources` (at most 32), in order."""
        body = json.dumps({"sourceObjects": [{"name": n} for n in sources], "destination": {}}).encode()
        # fake-gcs-server reads and hashes every source in the one call: minutes for GiBs.
        self._call(f"/storage/v1/b/{bucket}/o/{_q(key)}/compose", "POST", body, {"content-type": "application/json"},
                   timeout=900)

    def delete_object(self, Bucket: str, Key: str):  # noqa: N803
        self._call(f"/storage/v1/b/{Bucket}/o/{_q(Key)}", "DELETE")

    def upload_file(self, path: str, bucket: str, key: str, Config=None):  # noqa: N803
        with open(path, "rb") as f:
            self.upload_fileobj(f, bucket, key, Config=Config)

    def head_object(self, Bucket: str, Key: str):  # noqa: N803
        got, _ = self._call(f"/storage/v1/b/{Bucket}/o/{_q(Key)}")
        o = json.loads(got)
        return {"ContentLength": int(o["size"]), "ETag": f'"{o["generation"]}"',
                "Metadata": o.get("metadata") or {}}

    def get_object(self, Bucket: str, Key: str):  # noqa: N803
        meta = self.head_object(Bucket=Bucket, Key=Key)
        got, _ = self._call(f"/storage/v1/b/{Bucket}/o/{_q(Key)}?alt=media")
        return {"Body": io.BytesIO(got), "ContentLength": len(got), "Metadata": meta["Metadata"]}

    def list_objects_v2(self, Bucket: str, Prefix: str = "", **_):  # noqa: N803
        contents = [c for page in self.get_paginator("list_objects_v2").paginate(Bucket=Bucket, Prefix=Prefix)
                    for c in page["Contents"]]
        return {"Contents": contents}

    def get_paginator(self, name: str):
        assert name == "list_objects_v2", name
        return _Paginator(self)

    def all_keys(self, bucket: str) -> list[str]:
        """Every key of the bucket, `.flowfs-parts/` included (what a listing of the
        bucket itself shows)."""
        return [c["Key"] for page in self.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for c in page["Contents"]]
