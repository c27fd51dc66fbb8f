"""pjdfstest (the Rust rewrite, 0.2.2, `cargo install pjdfstest`) on a local directory and
on a flowfs mount (issue 13, item 3).

pjdfstest runs ~400 POSIX conformance test cases (named like `chmod::ctime` or
`open::eacces_read`) in a fresh temporary directory under `-p PATH` and prints one line per
case: `NAME ok`, `NAME FAILED` (followed by tab-indented panic lines), `NAME skipped`
(followed by the reasons). Cases that switch users need root and two dummy users (here
`nobody`/`nogroup` and `daemon`/`daemon`, which Debian always has); the EROFS cases need a
remount and stay skipped (`allow_remount = false`).

Both runs use one config and run at the same time. Then:
- a case that passes on the local directory and fails on flowfs must be listed in
  pjdfstest_expected_failures.txt, with a reason that points at docs/SEMANTICS.md, or
  `bug: ...` for a genuine bug;
- a listed case that passes on flowfs fails this test: take it off the list (the list can
  only shrink);
- cases that fail on the local directory too are printed and otherwise ignored.
A per-group table (local vs flowfs passes) is printed.

PJDFSTEST_RESULTS=FILE writes both runs' results (JSON) for regenerating the list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from exerciser_helpers import ToolProcess, tail, tool
from flowfs_mount import SESSION_PID_FILE, TMP_PREFIX, proc_mounts

HERE = Path(__file__).resolve().parent
EXPECTED_FILE = HERE / "pjdfstest_expected_failures.txt"
TIMEOUT = 480.0  # each run; the local one takes ~90 s (naptime 1 s)

# naptime must exceed the file system's timestamp granularity: flowfs shows the server's
# LastModified, whole seconds (docs/SEMANTICS.md, "Attributes").
CONFIG = """\
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}

[settings]
naptime = 1.0
allow_remount = false

[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
"""

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RESULT = re.compile(r"^(\S+)\s+(ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)\s*$")


def parse(output: str) -> dict[str, tuple[str, str]]:
    """{case: (status, detail)}; status is ok, FAILED or skipped; detail is what pjdfstest
    printed below the case (the panic message with its `left:`/`right:` lines, or the skip
    reasons)."""
    results: dict[str, tuple[str, str]] = {}
    current = None
    for raw in output.splitlines():
        line = ANSI.sub("", raw)
        m = RESULT.match(line)
        if m:
            current = m.group(1)
            results[current] = (m.group(2), "")
        elif line.startswith("Summary"):
            current = None
        elif current and line.strip():
            status, detail = results[current]
            results[current] = (status, (detail + "\n" + line.strip()).strip())
    return results


def load_expected() -> dict[str, str]:
    """{case: reason} from the list; every entry needs a `CLASS: reason`."""
    expected: dict[str, str] = {}
    for n, line in enumerate(EXPECTED_FILE.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        assert len(parts) == 2 and ":" in parts[1], f"{EXPECTED_FILE.name}:{n}: want `CASE  CLASS: reason`: {line}"
        assert parts[0] not in expected, f"{EXPECTED_FILE.name}:{n}: {parts[0]} listed twice"
        expected[parts[0]] = parts[1]
    return expected


def reason_class(reason: str) -> str:
    return reason.split(":", 1)[0].strip()


def group_of(case: str) -> str:
    return case.split("::", 1)[0]


def summary_table(local: dict, flowfs: dict, expected: dict[str, str]) -> str:
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for case in sorted(set(local) | set(flowfs)):
        r = rows[group_of(case)]
        r[0] += 1
        r[1] += local.get(case, ("",))[0] == "ok"
        r[2] += flowfs.get(case, ("",))[0] == "ok"
        r[3] += case in expected
        r[4] += local.get(case, ("",))[0] == "skipped"
    out = [f"{'group':<18}{'cases':>6}{'local':>7}{'flowfs':>8}{'listed':>8}{'skipped':>9}  (skipped: on the local directory)"]
    total = [0] * 5
    for g, r in sorted(rows.items()):
        out.append(f"{g:<18}{r[0]:>6}{r[1]:>7}{r[2]:>8}{r[3]:>8}{r[4]:>9}")
        total = [a + b for a, b in zip(total, r)]
    out.append(f"{'total':<18}{total[0]:>6}{total[1]:>7}{total[2]:>8}{total[3]:>8}{total[4]:>9}")
    return "\n".join(out)


@pytest.fixture
def open_dir():
    """A short, world-traversable directory for the local run and the mountpoint: the dummy
    users must reach both (the session dir is 0700), and socket paths must stay within
    sun_path's 108 bytes. It is named and owned like a session dir (TMP_PREFIX, session.pid),
    so a later session sweeps it, and its mount, if this one dies."""
    d = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + "pjd-", dir=tempfile.gettempdir()))
    (d / SESSION_PID_FILE).write_text(str(os.getpid()))
    d.chmod(0o755)
    yield d
    # torn down after the mount fixture (requested first); never rmtree through a mount
    if not any(mp.startswith(str(d) + "/") for _s, mp, _t, _o in proc_mounts()):
        shutil.rmtree(d, ignore_errors=True)


def test_pjdfstest(open_dir, mount, bucket, work_dir):
    if os.geteuid() != 0:
        pytest.skip("pjdfstest's user-switching cases need root (CI runs as root)")
    pjd = tool("pjdfstest")
    config = work_dir / "pjdfstest.toml"
    config.write_text(CONFIG)
    local_dir = open_dir / "l"
    local_dir.mkdir(mode=0o755)
    mountpoint = open_dir / "m"
    mountpoint.mkdir(mode=0o755)
    # --allow-other: the cases switch to the dummy users, whom FUSE refuses otherwise
    m = mount(bucket, extra=["--allow-other"], mountpoint=mountpoint)

    procs = {}
    try:
        for label, path in (("local", local_dir), ("flowfs", m.path)):
            procs[label] = ToolProcess([pjd, "-c", str(config), "-p", str(path)],
                                       work_dir / f"pjdfstest-{label}", timeout=TIMEOUT, cwd=work_dir,
                                       env={"RUST_BACKTRACE": "0"})  # one panic line per failed case
        runs = {label: p.wait() for label, p in procs.items()}
    finally:
        for p in procs.values():
            p.stop()

    for label, run in runs.items():
        print(f"\npjdfstest on {label}: rc={run.returncode} in {run.seconds:.0f} s; "
              f"{tail(run.stdout(), 1)}")
        assert not run.timed_out, f"pjdfstest on {label} timed out after {TIMEOUT:.0f} s:\n{tail(run.stdout(), 40)}"
        assert "Summary" in run.stdout(), (f"pjdfstest on {label} did not finish (rc={run.returncode}):\n"
                                           f"{tail(run.stdout(), 20)}\n{tail(run.stderr(), 20)}")
    local, flowfs = parse(runs["local"].stdout()), parse(runs["flowfs"].stdout())
    expected = load_expected()

    if os.environ.get("PJDFSTEST_RESULTS"):
        Path(os.environ["PJDFSTEST_RESULTS"]).write_text(json.dumps({"local": local, "flowfs": flowfs}, indent=1))

    print(summary_table(local, flowfs, expected))
    local_failures = sorted(c for c, (s, _d) in local.items() if s == "FAILED")
    if local_failures:
        print(f"ignored: {len(local_failures)} case(s) that fail on the local directory too: "
              + ", ".join(local_failures))
    by_class: dict[str, int] = defaultdict(int)
    for case, reason in expected.items():
        if flowfs.get(case, ("",))[0] == "FAILED":
            by_class[reason_class(reason)] += 1
    print("listed flowfs failures by class: " + ", ".join(f"{k} {v}" for k, v in sorted(by_class.items())))

    problems = []
    for case, (status, detail) in sorted(flowfs.items()):
        if status == "FAILED" and local.get(case, ("",))[0] == "ok" and case not in expected:
            problems.append(f"NEW FAILURE {case}: passes locally, fails on flowfs and is not in "
                            f"{EXPECTED_FILE.name}:\n    " + detail.replace("\n", "\n    "))
    for case, reason in sorted(expected.items()):
        status = flowfs.get(case, ("missing",))[0]
        if status == "ok" and reason_class(reason) != "racy":
            problems.append(f"NOW PASSES {case}: remove it from {EXPECTED_FILE.name} ({reason})")
        elif status == "missing":
            problems.append(f"UNKNOWN {case}: listed in {EXPECTED_FILE.name} but pjdfstest ran no such case")
        elif status == "skipped":
            print(f"note: listed case {case} was skipped on flowfs")
        if local.get(case, ("",))[0] == "FAILED":
            print(f"note: listed case {case} fails on the local directory too")
    assert not problems, "\n".join(problems)
