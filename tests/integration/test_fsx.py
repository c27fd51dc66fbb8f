"""fsx (asomers' fsx-rs 0.3.2, `cargo install fsx`) against a file on a real flowfs mount
(issue 13, item 3).

fsx applies a pseudo-random sequence of operations to one file and checks every read, and
the file size after every operation, against its own model of the file. The sequence is a
pure function of the seed and the config file, so the same seed and config on a local
tmpfs give the final image the file must have: fsx itself keeps none on success (its
`NAME.fsxgood` is written only by a failing run, holding its model of the file, `flen`
bytes, of which the first "expected" size bytes count). After fsx, the mount is unmounted
with `flowfs unmount` (which waits for every upload) and the object is compared, with
boto3, with that image.

Every run mounts with FUSE passthrough allowed (`--passthrough auto`, the default), but
fsx opens its file `O_RDWR`, and such opens are served through flowfs (docs/SEMANTICS.md,
*FUSE passthrough*: through passthrough a shared writable mapping escaped msync and close,
issue 26); each run checks in the mount's log that passthrough served nothing. Until that
rule the same seeds ran on passthrough files, and twice more with `--passthrough off`; the
writers passthrough still serves (`O_WRONLY`) cannot be driven by fsx, which reads back
what it writes, and are exercised by test_realworld.py and test_passthrough.py.

Operations: read, write, ftruncate, close/open, fsync, fdatasync, posix_fallocate (mode 0),
sendfile, posix_fadvise, copy_file_range; mmap reads/writes and msync(MS_INVALIDATE) in
the mmap run. Hole punching stays off: flowfs answers every fallocate mode other than 0
with EOPNOTSUPP (docs/SEMANTICS.md, *fallocate* and the FUSE adapter table: "`fallocate`
with a mode other than 0 | `EOPNOTSUPP`"). fsx-rs 0.3.2 has no zero-range, collapse-range
or insert-range operations at all (its only fallocate-mode operation is `punch_hole`).

On failure the assertion message holds the tail of fsx's log: fsx dumps its last 1,024
operations and the seed when a check fails; `fsx -S SEED -f CONFIG FILE` replays it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exerciser_helpers import ToolProcess, tail, tool
from helpers import MiB

KEY = "fsx.bin"

# The mix of the plain runs; each key is an fsx.toml `[weights]` entry (relative weights).
BASE_WEIGHTS = {
    "read": 10,
    "write": 10,
    "truncate": 3,
    "close_open": 2,
    "fsync": 1,
    "fdatasync": 1,
    "posix_fallocate": 2,
    "sendfile": 3,
    "posix_fadvise": 2,
    "copy_file_range": 3,
    # off: mmap is the mmap run's business; punch_hole is EOPNOTSUPP on flowfs (above)
    "mapread": 0,
    "mapwrite": 0,
    "invalidate": 0,
    "punch_hole": 0,
}


@dataclass
class FsxRun:
    name: str
    seed: int
    numops: int
    flen: int
    weights: dict[str, float] = field(default_factory=lambda: dict(BASE_WEIGHTS))
    opsize_max: int = 65536
    mount_extra: tuple[str, ...] = ()
    timeout: float = 120.0
    # passed as --passthrough; fsx's O_RDWR file is served by flowfs either way
    passthrough: str = "auto"

    def config(self) -> str:
        lines = [f"flen = {self.flen}", "", "[opsize]", f"max = {self.opsize_max}", "", "[weights]"]
        lines += [f"{k} = {float(v)}" for k, v in self.weights.items()]
        return "\n".join(lines) + "\n"


# Five seeds of 20,000 operations on a 1 MiB file: 100,000 operations per CI run, plus the
# mmap run and the 16 MiB file with 5 MiB parts (a 4-part multipart upload at every fsync).
SEED_RUNS = [FsxRun(f"seed{s}", s, 20_000, MiB) for s in (1, 2, 3, 4, 5)]
MMAP_RUN = FsxRun("mmap", 11, 10_000, MiB,
                  weights={**BASE_WEIGHTS, "mapread": 8, "mapwrite": 8, "invalidate": 1})
LARGE_RUN = FsxRun("large-5M-parts", 21, 3_000, 16 * MiB, opsize_max=MiB,
                   weights={**BASE_WEIGHTS, "fsync": 0.5, "fdatasync": 0.5},
                   mount_extra=("--part-size", "5M"), timeout=180.0)


def _scratch_dir() -> Path:
    """tmpfs for the reference runs when there is one (fsync there costs nothing)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="flowfs-fsx-ref-", dir=base))


def _first_difference(a: bytes, b: bytes) -> str:
    n = min(len(a), len(b))
    for off in range(0, n, 4096):
        if a[off:off + 4096] != b[off:off + 4096]:
            i = next(i for i in range(off, min(off + 4096, n)) if a[i] != b[i])
            return f"first difference at offset {i:#x}"
    return "equal up to the shorter length" if len(a) != len(b) else "equal"


def _fsx_log(stderr: str, ops: int = 60) -> str:
    """What fsx said before its LOG DUMP (the failed check, the seed), then the last `ops`
    operations of the dump (the failing one is the last)."""
    lines = stderr.rstrip("\n").splitlines()
    cut = next((i for i, line in enumerate(lines) if "LOG DUMP" in line), None)
    if cut is None:
        return tail(stderr, ops + 20)
    return "\n".join(lines[:cut + 1][-20:]) + "\n" + tail("\n".join(lines[cut + 1:]), ops)


def _fsx(run: FsxRun, fsx: str, config: Path, target: Path, artifacts: Path, label: str,
         timeout: float) -> ToolProcess:
    args = [fsx, "-f", str(config), "-N", str(run.numops), "-S", str(run.seed), "-P", str(artifacts),
            str(target)]
    return ToolProcess(args, artifacts / f"fsx-{run.name}-{label}", timeout=timeout, cwd=artifacts)


def _run(run: FsxRun, mount, bucket, s3, work_dir) -> None:
    fsx = tool("fsx")
    config = work_dir / f"fsx-{run.name}.toml"
    config.write_text(run.config())
    replay = f"fsx -S {run.seed} -N {run.numops} -f {config.name} FILE  # config:\n{run.config()}"

    # The reference: the same seed and config on local tmpfs, run alongside. It must pass,
    # and its file is the image the object must have at the end.
    ref_dir = _scratch_dir()
    try:
        ref_proc = _fsx(run, fsx, config, ref_dir / KEY, ref_dir, "local", timeout=120)
        try:
            m = mount(bucket, extra=[*run.mount_extra, "--passthrough", run.passthrough], log_level="info")
            got = _fsx(run, fsx, config, m / KEY, work_dir, "flowfs", timeout=run.timeout).wait()
            used = "FUSE passthrough in use" in m.log_text()
        finally:
            ref = ref_proc.wait()
        assert ref.returncode == 0, (f"fsx failed on local {ref_dir} (rc={ref.returncode}): the reference "
                                     f"is broken, not flowfs\n{tail(ref.stderr(), 60)}")
        want = (ref_dir / KEY).read_bytes()
    finally:
        shutil.rmtree(ref_dir, ignore_errors=True)
    print(f"\nfsx {run.name}: seed {run.seed}, {run.numops} ops, flen {run.flen}: rc={got.returncode} "
          f"in {got.seconds:.1f} s (local reference: {ref.seconds:.1f} s)")

    # Unmount in every case: `flowfs unmount` returns when every upload is done.
    um = m.unmount(timeout=120)
    m.close()
    if got.returncode != 0:
        detail = ("fsx timed out" if got.timed_out else f"fsx exited {got.returncode}") + \
                 f" after {got.seconds:.1f} s on flowfs"
        good = work_dir / f"{KEY}.fsxgood"
        try:
            obj = s3.get_object(Bucket=bucket, Key=KEY)["Body"].read()
            obj_note = f"object after unmount: {len(obj)} bytes"
            # .fsxgood is fsx's model, flen bytes; a size error names the size it should have
            size = re.search(r"Size error: expected (0x[0-9a-f]+)", got.stderr())
            if good.exists():
                image = good.read_bytes()
                if size:
                    image = image[:int(size.group(1), 16)]
                obj_note += (f"; vs {good.name}" + (f" cut to the expected {size.group(1)} bytes" if size else "")
                             + f": {_first_difference(obj, image)}")
        except s3.exceptions.NoSuchKey:
            obj_note = "no object after unmount"
        pytest.fail(f"{detail} (seed {run.seed}); unmount rc={um.returncode}; {obj_note}\n"
                    f"replay: {replay}\n--- fsx log (tail) ---\n{_fsx_log(got.stderr())}\n"
                    f"--- fsx stdout ---\n{tail(got.stdout(), 5)}", pytrace=False)

    assert um.returncode == 0, f"flowfs unmount exited {um.returncode}: {um.stderr.strip()}"
    assert not used, "fsx's O_RDWR file was served by passthrough"
    obj = s3.get_object(Bucket=bucket, Key=KEY)["Body"].read()
    assert len(obj) == len(want) and obj == want, (
        f"fsx passed, but the object after unmount ({len(obj)} bytes) is not fsx's final image "
        f"({len(want)} bytes): {_first_difference(obj, want)}\nreplay: {replay}")


@pytest.mark.parametrize("run", SEED_RUNS, ids=lambda r: r.name)
def test_fsx_seeds(run, mount, bucket, s3, work_dir):
    _run(run, mount, bucket, s3, work_dir)


def test_fsx_mmap(mount, bucket, s3, work_dir):
    _run(MMAP_RUN, mount, bucket, s3, work_dir)


def test_fsx_large_file_small_parts(mount, bucket, s3, work_dir):
    _run(LARGE_RUN, mount, bucket, s3, work_dir)
