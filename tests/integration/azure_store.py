"""Azure Blob in the shape the integration tests' S3 helpers use (issue 30): `AzureS3`
answers the few boto3 calls those helpers make (put_object, get_object, head_object, the
list_objects_v2 paginator, upload_fileobj, create_bucket) with azure-storage-blob on an
Azurite container, so that a test written against boto3 (test_write_mix, the kill -9
recovery, the read set) runs unchanged on Azure through test_azure.py's fixtures.

Metadata names come back as flowfs writes them: Azure names must be C# identifiers, so the
client writes `flowfs-symlink` as `flowfs__symlink` (crates/flowfs-client/src/azure); the
shim undoes that as the client does. Nothing here talks to anything but 127.0.0.1.
"""

from __future__ import annotations

import io


class _ClientError(Exception):
    """What boto3's `s3.exceptions.ClientError` and `NoSuchKey` stand for here."""


class _Exceptions:
    ClientError = _ClientError
    NoSuchKey = _ClientError


def _meta_in(meta: dict | None) -> dict[str, str]:
    return {k.lower().replace("__", "-"): v for k, v in (meta or {}).items()}


def _meta_out(meta: dict | None) -> dict[str, str]:
    return {k.replace("-", "__"): v for k, v in (meta or {}).items()}


class _Paginator:
    def __init__(self, service):
        self.service = service

    def paginate(self, Bucket: str, Prefix: str = ""):  # noqa: N803 - boto3's names
        c = self.service.get_container_client(Bucket)
        for page in c.list_blobs(name_starts_with=Prefix or None).by_page():
            yield {"Contents": [{"Key": b.name, "Size": b.size} for b in page]}


class AzureS3:
    """The boto3 calls of the test helpers, on Azure Blob containers."""

    exceptions = _Exceptions
    # List Blobs answers up to 5,000 entries a page (S3: 1,000).
    LIST_PAGE = 5000

    def __init__(self, service):
        self.service = service

    def _blob(self, bucket: str, key: str):
        return self.service.get_blob_client(bucket, key)

    def create_bucket(self, Bucket: str):  # noqa: N803
        self.service.create_container(Bucket)

    def put_object(self, Bucket: str, Key: str, Body=b"", Metadata=None, **_):  # noqa: N803
        data = Body.read() if hasattr(Body, "read") else Body
        if isinstance(data, str):
            data = data.encode()
        self._blob(Bucket, Key).upload_blob(data, overwrite=True, metadata=_meta_out(Metadata))
        return {}

    def upload_fileobj(self, f, bucket: str, key: str, Config=None):  # noqa: N803, ARG002
        # Staged blocks and a commit, as a big upload is on Azure.
        self._blob(bucket, key).upload_blob(f, overwrite=True, max_concurrency=4)

    def upload_file(self, path: str, bucket: str, key: str, Config=None):  # noqa: N803
        with open(path, "rb") as f:
            self.upload_fileobj(f, bucket, key, Config=Config)

    def head_object(self, Bucket: str, Key: str):  # noqa: N803
        from azure.core.exceptions import ResourceNotFoundError

        try:
            p = self._blob(Bucket, Key).get_blob_properties()
        except ResourceNotFoundError as e:
            raise _ClientError(str(e)) from e
        return {"ContentLength": p.size, "ETag": p.etag, "Metadata": _meta_in(p.metadata)}

    def get_object(self, Bucket: str, Key: str):  # noqa: N803
        from azure.core.exceptions import ResourceNotFoundError

        try:
            d = self._blob(Bucket, Key).download_blob()
            body = d.readall()
        except ResourceNotFoundError as e:
            raise _ClientError(str(e)) from e
        return {"Body": io.BytesIO(body), "ContentLength": len(body),
                "Metadata": _meta_in(d.properties.metadata)}

    def list_objects_v2(self, Bucket: str, Prefix: str = "", **_):  # noqa: N803
        c = self.service.get_container_client(Bucket)
        return {"Contents": [{"Key": b.name, "Size": b.size}
                             for b in c.list_blobs(name_starts_with=Prefix or None)]}

    def get_paginator(self, name: str):
        assert name == "list_objects_v2", name
        return _Paginator(self.service)

    def uncommitted_blocks(self, bucket: str, key: str) -> int:
        """How many staged blocks `key` still has (an upload's, never committed)."""
        from azure.core.exceptions import ResourceNotFoundError

        try:
            _committed, uncommitted = self._blob(bucket, key).get_block_list("uncommitted")
        except ResourceNotFoundError:
            return 0
        return len(uncommitted)
