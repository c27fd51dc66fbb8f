"""Data helpers shared by the tests (deterministic payloads, hashes, uploads), and the
kernel's caches dropped as memory pressure would."""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import random
import time

import pytest

MiB = 1024 * 1024


def drop_kernel_caches() -> None:
    """`echo 3 > drop_caches`: the kernel forgets its dentries and inodes (and clean pages),
    as under memory pressure; the test is skipped where that is not allowed."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        pytest.skip(f"cannot drop the kernel's caches here: {e}")


def forget_pages(path) -> None:
    """The kernel drops the file's clean pages, as memory pressure may at any time (a CI
    run lost 19 MiB of a reread this way): the next read reaches flowfs."""
    import os
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def payload(size: int, seed: int | str) -> bytes:
    """Deterministic pseudo-random bytes (randbytes is limited to < 256 MiB per call)."""
    rng = random.Random(seed)
    if size <= 16 * MiB:
        return rng.randbytes(size)
    return b"".join(rng.randbytes(min(16 * MiB, size - off)) for off in range(0, size, 16 * MiB))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path, bufsize: int = 4 * MiB) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def put_many(s3, bucket: str, objects: dict[str, bytes], threads: int = 16) -> None:
    """PUT many objects: sequentially and in key order first the objects that share a name
    with a directory (`x` before `x/...`: SeaweedFS stores objects in a filer tree, and
    creating `x` after `x/` exists takes a slow locked path) and the first object of every
    parent directory; then the rest in parallel."""
    ancestors = set()
    first: dict[str, str] = {}
    for k in sorted(objects):
        parts = k.rstrip("/").split("/")
        ancestors.update("/".join(parts[:i]) for i in range(1, len(parts)))
        first.setdefault("/".join(parts[:-1]), k)
    seq = set(first.values()) | {k for k in objects if not k.endswith("/") and k in ancestors}
    for k in sorted(seq):
        s3.put_object(Bucket=bucket, Key=k, Body=objects[k])
    rest = [k for k in objects if k not in seq]
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        futs = [ex.submit(s3.put_object, Bucket=bucket, Key=k, Body=objects[k]) for k in rest]
        for f in futs:
            f.result()


def upload_large(s3, bucket: str, key: str, data: bytes, part_size: int = 16 * MiB) -> None:
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size, max_concurrency=4)
    s3.upload_fileobj(io.BytesIO(data), bucket, key, Config=cfg)


def until(cond, timeout: float, interval: float = 0.01):
    """Calls cond() every `interval` s until it returns something true, which is returned;
    None once `timeout` s have passed."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def poll(cond, timeout: float, what: str):
    """Polls cond() every 10 ms until it returns something true; a hang fails the test."""
    got = until(cond, timeout)
    if not got:
        what = what() if callable(what) else what
        pytest.fail(f"HANG: {what} (not within {timeout:.0f} s)", pytrace=False)
    return got
