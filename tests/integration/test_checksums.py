"""Checksums end to end (issue 49, docs/SEMANTICS.md "Checksums"), on SeaweedFS, which checks
`x-amz-checksum-crc64nvme` like AWS S3: every upload carries the CRC-64/NVME of its bytes (a
multipart upload's parts each theirs, combined by the store into a FULL_OBJECT checksum), the
object's checksum is readable as `user.flowfs.crc64nvme` without reading the file, a PUT damaged
on its way is refused by the store and sent again, and a whole object damaged on its way back is
never handed over as data (the fault proxy flips one byte)."""

from __future__ import annotations

import base64
import errno
import os
import struct
import subprocess

import pytest

import faultproxy as F
import s3proxy as P
from helpers import MiB, payload
from write_helpers import object_bytes

PT = ["off", "auto"]
NAME = "user.flowfs.crc64nvme"

_POLY = 0x9A6C9329AC4BC9B5  # CRC-64/NVME, reflected
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc64nvme(data: bytes) -> str:
    """The S3 header value (base64 of the big-endian CRC) of `data`, computed here, not by
    any library flowfs uses; its check value is the catalogue's."""
    c = 0xFFFFFFFFFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return base64.b64encode(struct.pack(">Q", c ^ 0xFFFFFFFFFFFFFFFF)).decode()


def stored_checksum(s3, bucket: str, key: str) -> tuple[str | None, str | None]:
    h = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    return h.get("ChecksumCRC64NVME"), h.get("ChecksumType")


def test_the_reference_crc_is_the_catalogues():
    assert base64.b64decode(crc64nvme(b"123456789")) == struct.pack(">Q", 0xAE8B14860A799888)


@pytest.mark.parametrize("pt", PT)
def test_every_upload_carries_its_checksum_readable_as_an_xattr(mount, bucket, s3, work_dir, pt):
    small = payload(100_000, "crc-small")
    big = payload(20 * MiB + 5, "crc-big")  # several parts of a multipart upload
    m = mount(bucket, extra=["--passthrough", pt])
    (m / "small.bin").write_bytes(small)
    (m / "big.bin").write_bytes(big)
    # Closed but maybe still uploading: the attribute waits for the upload, as fsync would.
    got_small = os.getxattr(m / "small.bin", NAME).decode()
    got_big = os.getxattr(m / "big.bin", NAME).decode()
    assert got_small == crc64nvme(small)
    assert stored_checksum(s3, bucket, "small.bin")[0] == got_small
    assert stored_checksum(s3, bucket, "big.bin") == (got_big, "FULL_OBJECT")
    assert NAME not in os.listxattr(m / "small.bin"), "not listed: cp --preserve=xattr would copy it"
    with pytest.raises(OSError) as e:
        os.setxattr(m / "small.bin", NAME, b"x")
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        os.getxattr(m / "small.bin", "user.flowfs.sha256")
    assert e.value.errno == errno.ENODATA
    # getfattr, as a user runs it; then a remount with an empty cache reads the same.
    out = subprocess.run(["getfattr", "--only-values", "-n", NAME, str(m / "big.bin")],
                         capture_output=True, text=True, check=True).stdout
    assert out == got_big
    assert m.unmount().returncode == 0
    m2 = mount(bucket, extra=["--passthrough", pt], cache_dir=work_dir / "fresh-cache")
    assert os.getxattr(m2 / "big.bin", NAME).decode() == got_big
    assert (m2 / "big.bin").read_bytes() == big


def test_an_object_put_by_another_tool_shows_its_own_checksum(mount, bucket, s3):
    s3.put_object(Bucket=bucket, Key="other.txt", Body=b"hello", ChecksumCRC64NVME=crc64nvme(b"hello"))
    s3.put_object(Bucket=bucket, Key="plain.txt", Body=b"no checksum")
    m = mount(bucket)
    assert os.getxattr(m / "other.txt", NAME).decode() == crc64nvme(b"hello")
    with pytest.raises(OSError) as e:
        os.getxattr(m / "plain.txt", NAME)
    assert e.value.errno == errno.ENODATA, "SeaweedFS keeps none for an upload without one"


@pytest.mark.parametrize("pt", PT)
def test_an_upload_damaged_on_its_way_is_refused_and_sent_again(mount, bucket, s3, fault_proxy, pt):
    files = {f"f{i}.bin": payload(200_000 + i, f"flip-put-{i}") for i in range(6)}
    files["big.bin"] = payload(20 * MiB + 3, "flip-part")
    m = mount(bucket, proxy=fault_proxy, extra=["--passthrough", pt])
    fault_proxy.set_faults({P.PUT: {F.FLIP_REQUEST: 0.5}, P.UPLOAD_PART: {F.FLIP_REQUEST: 0.5}})
    for name, data in files.items():
        (m / name).write_bytes(data)
    assert m.unmount().returncode == 0
    flipped = fault_proxy.injected(F.FLIP_REQUEST)
    assert flipped >= 2, fault_proxy.fault_summary()
    for name, data in files.items():
        assert object_bytes(s3, bucket, name) == data, name
    assert "damaged in transfer" in m.log_text()


def test_a_whole_object_damaged_on_its_way_back_is_never_data(mount, bucket, s3, fault_proxy):
    files = {f"r{i}.bin": payload(300_000 + i, f"flip-get-{i}") for i in range(8)}
    for name, data in files.items():
        s3.put_object(Bucket=bucket, Key=name, Body=data, ChecksumCRC64NVME=crc64nvme(data))
    m = mount(bucket, proxy=fault_proxy)
    # A GET without a Range is a whole object's, the one S3 gives a checksum for.
    fault_proxy.set_faults({P.GET: {F.FLIP_RESPONSE: 0.5}})
    for name, data in files.items():
        assert (m / name).read_bytes() == data, name
    assert fault_proxy.injected(F.FLIP_RESPONSE) >= 2, fault_proxy.fault_summary()
    # Every whole GET damaged: once the retry budget is spent the read is EIO, or (a read
    # the kernel sends again) the bytes of ranged GETs, which S3 gives no checksum for and
    # the proxy leaves alone here; never the damaged bytes.
    m2 = mount(bucket, proxy=fault_proxy, extra=["--retry-budget", "2"])
    fault_proxy.set_faults({P.GET: {F.FLIP_RESPONSE: 1.0}})
    try:
        got = (m2 / "r0.bin").read_bytes()
    except OSError as e:
        assert e.errno == errno.EIO
    else:
        assert got == files["r0.bin"]
    assert fault_proxy.count(P.GET) >= 3, "the damaged GET was sent again"
    assert "damaged in transfer" in m2.log_text()
