"""A two-node Slurm cluster on this one machine, from Debian's packages (issue 32).

    python3 tests/integration/slurm_cluster.py start DIR   # prints the SLURM_CONF to export
    python3 tests/integration/slurm_cluster.py stop DIR

Everything lives under DIR: the munge key and socket, slurm.conf, state, spool, logs and pid
files. Nothing is written to /etc (every command is pointed at DIR/etc/slurm.conf by
SLURM_CONF, munged at its own socket by AuthInfo), every port is explicit and on 127.0.0.1,
and `stop` ends every daemon by the pid it recorded, so a second `start` finds nothing
left. Debian's Slurm 22.05 is built with MULTIPLE_SLURMD: two slurmd daemons, n1 and n2,
run on this host, each with its own port, spool and log.

Each node's slurmd runs in a mount namespace of its own (`unshare -m --propagation
private`), started by a shell that first runs that node's `setup` commands there (the tests
mount flowfs at the same path on every node, with a cache dir of the node's own): the
node's jobs inherit the namespace and see its mounts, as jobs on another machine see that
machine's. A node's processes are reached with `nsenter -t PID -m` (`Node.run`).

Job records: there is no slurmdbd here (it needs a MariaDB server), so `sacct` has nothing;
the cluster writes one line per finished job to DIR/jobcomp.txt (jobcomp/filetxt), which
names the node each job ran on (`jobs()`).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from flowfs_mount import _pid_alive as _alive
from helpers import until
from seaweed import free_port

NODES = ("n1", "n2")
CPUS = 2  # per node: slurmd refuses a node configured with more than the host has


def _wait(cond, timeout: float, what: str, log: Path | None = None):
    got = until(cond, timeout, interval=0.05)
    if not got:
        tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
        raise TimeoutError(f"{what} (not within {timeout:.0f} s)\n{tail}")
    return got


def _ours(pid: int) -> bool:
    """Whether `pid` (from a pid file) is still one of the cluster's daemons, not a process
    that got its number since (pids wrap at 32,768 here, and a test suite forks a lot)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() in ("slurmctld", "slurmd", "munged")
    except OSError:
        return False


@dataclass
class Node:
    name: str
    port: int
    pid: int = 0  # the namespace's first process (the shell that becomes slurmd)

    def run(self, cmd: list[str], env: dict[str, str] | None = None, timeout: float = 120,
            check: bool = False) -> subprocess.CompletedProcess:
        """Runs cmd inside this node's mount namespace."""
        return subprocess.run(["nsenter", "-t", str(self.pid), "-m", "--", *cmd], env=env, capture_output=True,
                              text=True, timeout=timeout, check=check, stdin=subprocess.DEVNULL)


@dataclass
class SlurmCluster:
    base: Path
    nodes: list[Node] = field(default_factory=list)
    ctld_port: int = 0
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.base / "etc" / "slurm.conf"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a Slurm client (sbatch, squeue, scontrol) of this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra or {})
        return env

    # ------------------------------------------------------------------ start

    def start(self, setup: dict[str, str] | None = None, epilog: str | None = None,
              node_env: dict[str, dict[str, str]] | None = None) -> "SlurmCluster":
        """Starts munged, slurmctld and one slurmd per node (each after its node's `setup`
        shell commands, in its own mount namespace, with `node_env` added to its
        environment: secrets go there, never into a command line); returns once both nodes
        are idle."""
        self.stop()  # idempotent: whatever a killed earlier run left under base
        for d in ("etc", "munge", "state", "spool", "log", "run"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.base / "munge", 0o700)
        self._start_munge()
        self.ctld_port = free_port()
        self.nodes = [Node(n, free_port()) for n in NODES]
        self._write_conf(epilog)
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], "slurmctld")
        _wait(self._ctld_up, 60, "slurmctld answering", self.base / "log" / "slurmctld.log")
        for node in self.nodes:
            pre = (setup or {}).get(node.name, "true")
            # A job's own Slurm commands (srun in Snakemake's job step, which drops SLURM_*
            # variables) read /etc/slurm/slurm.conf: in the node's namespace that directory is
            # the cluster's own (the host's /etc is not touched).
            etc = f"mount --bind {shlex.quote(str(self.base / 'etc'))} /etc/slurm" if Path("/etc/slurm").is_dir() else "true"
            script = f"set -e\n{etc}\n{pre}\nexec slurmd -D -N {node.name} -f {shlex.quote(str(self.conf))}\n"
            p = self._spawn(["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script],
                            f"slurmd-{node.name}", (node_env or {}).get(node.name))
            node.pid = p.pid
        for node in self.nodes:
            _wait(lambda n=node: self._idle(n.name), 120, f"node {node.name} idle",
                  self.base / "log" / f"slurmd-{node.name}.log")
        return self

    def _spawn(self, cmd: list[str], name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        out = open(self.base / "log" / f"{name}.out", "ab")
        p = subprocess.Popen(cmd, env=self.env(env), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        out.close()
        self.procs.append(p)
        (self.base / "run" / f"{name}.spawned").write_text(str(p.pid))
        return p

    def _start_munge(self) -> None:
        m = self.base / "munge"
        key = m / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = m / "munge.socket"
        subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={sock}", f"--pid-file={m / 'munged.pid'}",
                        f"--log-file={self.base / 'log' / 'munged.log'}", f"--seed-file={m / 'munged.seed'}"],
                       check=True, timeout=30, stdin=subprocess.DEVNULL, capture_output=True)
        _wait(lambda: sock.exists(), 30, "munged's socket", self.base / "log" / "munged.log")

    def _write_conf(self, epilog: str | None) -> None:
        b = self.base
        host = socket.gethostname()
        lines = [
            "ClusterName=flowfs",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={b / 'munge' / 'munge.socket'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={b / 'state'}",
            f"SlurmdSpoolDir={b / 'spool'}/%n",
            f"SlurmctldPidFile={b / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={b / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={b / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={b / 'log'}/slurmd-%n.log",
            f"PlugStackConfig={b / 'etc' / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={b / 'jobcomp.txt'}",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MinJobAge=300",
            "KillWait=5",
            "SlurmdTimeout=60",
            "InactiveLimit=0",
            "DefMemPerCPU=500",
        ]
        if epilog:
            lines.append(f"Epilog={epilog}")
        for n in self.nodes:
            lines.append(f"NodeName={n.name} NodeHostname={host} NodeAddr=127.0.0.1 Port={n.port} CPUs={CPUS} "
                         "RealMemory=2000 State=UNKNOWN")
        lines.append(f"PartitionName=main Nodes={','.join(n.name for n in self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        (b / "etc" / "plugstack.conf").write_text("")
        self.conf.write_text("\n".join(lines) + "\n")

    # ------------------------------------------------------------------ queries

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["scontrol", *args], env=self.env(), capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)

    def _ctld_up(self) -> bool:
        r = self.scontrol("ping")
        return r.returncode == 0 and "UP" in r.stdout

    def _idle(self, node: str) -> bool:
        r = self.scontrol("show", "node", node)
        return r.returncode == 0 and "State=IDLE" in r.stdout

    def node_states(self) -> dict[str, str]:
        out = {}
        for n in self.nodes:
            r = self.scontrol("show", "node", n.name)
            st = [w for w in r.stdout.split() if w.startswith("State=")]
            out[n.name] = st[0][6:] if st else f"? {r.stderr.strip()}"
        return out

    def drained_at(self, name: str) -> str:
        """When node `name` was drained, as Slurm stamps its reason (`[user@TIME]`), in the
        jobcomp records' time format (ISO, seconds), so that the two compare as strings."""
        r = self.scontrol("show", "node", name)
        m = re.search(r"Reason=.*\[[^@\]]*@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]", r.stdout)
        assert m, f"node {name} has no stamped drain reason: {r.stdout}"
        return m.group(1)

    def jobs(self) -> list[dict[str, str]]:
        """Finished jobs, one dict per jobcomp line (JobId, JobName, NodeList, ExitCode, ...)."""
        path = self.base / "jobcomp.txt"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            rec = {}
            for word in line.split():
                k, _, v = word.partition("=")
                rec[k] = v
            out.append(rec)
        return out

    # ------------------------------------------------------------------ stop

    def stop(self, before: dict[str, list[str]] | None = None) -> None:
        """Ends every daemon by pid: the nodes' slurmd (after running each node's `before`
        command in its namespace, e.g. unmounting its flowfs), slurmctld, munged; then any
        process left in a node's namespace. Safe to call when nothing runs."""
        for node in self.nodes:
            if node.pid and _alive(node.pid) and before and node.name in before:
                try:
                    node.run(before[node.name], timeout=300)
                except subprocess.TimeoutExpired:
                    pass
        pids = []
        run = self.base / "run"
        if run.exists():
            for f in sorted(run.glob("*.pid")) + sorted(run.glob("*.spawned")):
                try:
                    pids.append(int(f.read_text().split()[0]))
                except (OSError, ValueError, IndexError):
                    pass
                f.unlink(missing_ok=True)
        munge_pid = self.base / "munge" / "munged.pid"
        if munge_pid.exists():
            try:
                pids.append(int(munge_pid.read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        ns_members = self._namespace_members(pids)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in [p for p in pids if _ours(p)] + ns_members:
                if _alive(pid):
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            until(lambda: not any(_alive(p) for p in pids + ns_members), 10, interval=0.05)
        for p in self.procs:  # children of this process: their pids cannot have been reused
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()

    @staticmethod
    def _namespace_members(pids: list[int]) -> list[int]:
        """Every process in the mount namespace of one of `pids` other than this one's (a
        node's slurmd and whatever its namespace runs: its flowfs, jobs left over)."""
        mine = os.readlink("/proc/self/ns/mnt")
        spaces = set()
        for pid in pids:
            try:
                spaces.add(os.readlink(f"/proc/{pid}/ns/mnt"))
            except OSError:
                pass
        spaces.discard(mine)
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if os.readlink(f"/proc/{d}/ns/mnt") in spaces:
                        out.append(int(d))
                except OSError:
                    pass
        return out


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    c = SlurmCluster(Path(argv[2]).resolve())
    if argv[1] == "start":
        c.start()
        print(f"export SLURM_CONF={c.conf}")
        print("stop with: python3 tests/integration/slurm_cluster.py stop " + str(c.base))
    else:
        c.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
