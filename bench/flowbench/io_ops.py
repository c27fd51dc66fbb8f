"""The I/O a task does on a mount (or on a staged local copy), run as a child process.

A separate process, so a read stuck in a dead mount can be killed, and its CPU time is its
own. Each command times only the I/O itself (after interpreter start-up) and prints one JSON
line: {"elapsed": s, "cpu": s, ...} or {"error": "..."} with exit code 1.

    seqread PATH CHUNK SAMPLE_EVERY       read sequentially in CHUNK-byte reads; sha256 of
                                          every SAMPLE_EVERY-th chunk and of the last
    pread PATH OFFSETS_JSON SIZE          os.pread of SIZE bytes at each offset; sha256 of each
    smallwrite SRC_DIR DST_DIR            copy every file of SRC_DIR into DST_DIR (created)
    bigwrite SRC DST CHUNK                copy one file in CHUNK-byte writes (SRC read first,
                                          untimed, so it comes from the page cache)
    readfiles ROOT NAMES_JSON CHUNK       read each ROOT/NAME whole, in order, in CHUNK-byte
                                          reads; sha256 and size of each (B11's members)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time


def out(d: dict, rc: int = 0) -> None:
    print(json.dumps(d), flush=True)
    sys.exit(rc)


def read_full(fd: int, buf: memoryview) -> int:
    got = 0
    while got < len(buf):
        n = os.readv(fd, [buf[got:]])
        if n == 0:
            break
        got += n
    return got


def seqread(path: str, chunk: int, every: int) -> None:
    buf = bytearray(chunk)
    mv = memoryview(buf)
    samples = {}
    total = 0
    t0, c0 = time.monotonic(), time.process_time()
    fd = os.open(path, os.O_RDONLY)
    try:
        i = 0
        last = None
        while True:
            n = read_full(fd, mv)
            if n == 0:
                break
            total += n
            if i % every == 0:
                samples[i] = hashlib.sha256(mv[:n]).hexdigest()
            last = (i, n)
            i += 1
            if n < chunk:
                break
        if last is not None and last[0] not in samples:
            i, n = last
            samples[i] = hashlib.sha256(mv[:n]).hexdigest()
    finally:
        os.close(fd)
    out({"elapsed": time.monotonic() - t0, "cpu": time.process_time() - c0, "bytes": total,
         "samples": {str(k): v for k, v in samples.items()}})


def pread(path: str, offsets_json: str, size: int) -> None:
    with open(offsets_json) as f:
        offsets = json.load(f)
    hashes = []
    t0, c0 = time.monotonic(), time.process_time()
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in offsets:
            data = os.pread(fd, size, off)
            hashes.append(hashlib.sha256(data).hexdigest())
    finally:
        os.close(fd)
    out({"elapsed": time.monotonic() - t0, "cpu": time.process_time() - c0, "hashes": hashes})


def readfiles(root: str, names_json: str, chunk: int) -> None:
    with open(names_json) as f:
        names = json.load(f)
    buf = bytearray(chunk)
    mv = memoryview(buf)
    hashes, sizes = [], []
    t0, c0 = time.monotonic(), time.process_time()
    for n in names:
        h = hashlib.sha256()
        size = 0
        try:
            fd = os.open(os.path.join(root, n), os.O_RDONLY)
            try:
                while True:
                    got = read_full(fd, mv)
                    h.update(mv[:got])
                    size += got
                    if got < chunk:
                        break
            finally:
                os.close(fd)
        except OSError as e:
            out({"error": f"{n}: {e.strerror or e} (errno {e.errno})", "elapsed": time.monotonic() - t0}, 1)
        hashes.append(h.hexdigest())
        sizes.append(size)
    out({"elapsed": time.monotonic() - t0, "cpu": time.process_time() - c0, "bytes": sum(sizes),
         "hashes": hashes, "sizes": sizes})


def smallwrite(src_dir: str, dst_dir: str) -> None:
    names = sorted(os.listdir(src_dir))
    data = []
    for n in names:
        with open(os.path.join(src_dir, n), "rb") as f:
            data.append(f.read())
    t0, c0 = time.monotonic(), time.process_time()
    done = 0
    try:
        os.makedirs(dst_dir, exist_ok=True)
        for n, d in zip(names, data):
            fd = os.open(os.path.join(dst_dir, n), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, d)
            finally:
                os.close(fd)
            done += 1
    except OSError as e:
        out({"error": f"after {done} files: {e.strerror or e} (errno {e.errno})",
             "elapsed": time.monotonic() - t0}, 1)
    out({"elapsed": time.monotonic() - t0, "cpu": time.process_time() - c0, "files": done})


def bigwrite(src: str, dst: str, chunk: int) -> None:
    with open(src, "rb") as f:  # into the page cache, untimed
        while f.read(64 << 20):
            pass
    buf = bytearray(chunk)
    mv = memoryview(buf)
    total = 0
    t0, c0 = time.monotonic(), time.process_time()
    try:
        sfd = os.open(src, os.O_RDONLY)
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while True:
                n = read_full(sfd, mv)
                if n == 0:
                    break
                w = 0
                while w < n:
                    w += os.write(dfd, mv[w:n])
                total += n
        finally:
            os.close(sfd)
            os.close(dfd)  # close() is where several tools upload: timed
    except OSError as e:
        out({"error": f"after {total} bytes: {e.strerror or e} (errno {e.errno})",
             "elapsed": time.monotonic() - t0}, 1)
    out({"elapsed": time.monotonic() - t0, "cpu": time.process_time() - c0, "bytes": total})


def main() -> None:
    cmd, args = sys.argv[1], sys.argv[2:]
    try:
        if cmd == "seqread":
            seqread(args[0], int(args[1]), int(args[2]))
        elif cmd == "pread":
            pread(args[0], args[1], int(args[2]))
        elif cmd == "smallwrite":
            smallwrite(args[0], args[1])
        elif cmd == "bigwrite":
            bigwrite(args[0], args[1], int(args[2]))
        elif cmd == "readfiles":
            readfiles(args[0], args[1], int(args[2]))
        else:
            out({"error": f"unknown command {cmd}"}, 2)
    except OSError as e:
        out({"error": f"{e.strerror or e} (errno {e.errno})"}, 1)


if __name__ == "__main__":
    main()
