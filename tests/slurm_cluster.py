"""A throwaway one-node Slurm cluster on this host, for tests and benchmarks.

Debian's packages (``slurm-wlm``, ``munge``): ``munged`` with its own key and
socket, ``slurmctld`` and ``slurmd`` in the foreground as child processes,
configured by a ``slurm.conf`` written for this host alone (the node line is
``slurmd -C``'s, free ports, no accounting, no cgroups: process tracking
through /proc, no task plugin). The client commands (``sbatch``, ``squeue``,
``scancel``, also as dask-jobqueue runs them) reach it through ``SLURM_CONF``,
which the context sets in ``os.environ`` and restores. Whatever happens, the
context cancels the cluster's jobs and stops the three daemons by their pids.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from postgres_server import free_port
from processes import stop

#: The daemons live in /usr/sbin, which a user's PATH may lack.
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
START_TIMEOUT_S = 60.0


def tool(name: str) -> str:
    """The path of one of TOOLS (FileNotFoundError naming it when absent)."""
    path = shutil.which(name, path=SEARCH_PATH)
    if path is None:
        raise FileNotFoundError(f"{name} not found on PATH, /usr/sbin or /sbin")
    return path


def missing_requirement() -> str | None:
    """Why no cluster can be started here, or None when one can."""
    missing = [name for name in TOOLS if shutil.which(name, path=SEARCH_PATH) is None]
    if missing:
        return (f"{', '.join(missing)} not found: Debian's slurm-wlm and munge packages "
                "start the one-node Slurm cluster")
    if os.geteuid() != 0:
        return "slurmd starts jobs as their user and must run as root"
    return None


@dataclass(frozen=True)
class SlurmCluster:
    """A running one-node cluster: its configuration file, node and folder."""

    conf: Path
    node: str
    folder: Path

    def job_ids(self) -> list[str]:
        """The ids of the jobs ``squeue`` lists (any state), sorted."""
        out = subprocess.run([tool("squeue"), "-h", "-o", "%i"], check=True,
                             capture_output=True, text=True).stdout
        return sorted(out.split())

    def node_state(self) -> str:
        """The node's state as ``sinfo`` prints it (``idle``, ``mix``, ``alloc``...)."""
        return subprocess.run([tool("sinfo"), "-h", "-n", self.node, "-o", "%t"],
                              check=False, capture_output=True, text=True).stdout.strip()

    def wait_until(self, predicate, what: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll ``predicate()`` every 0.2 s; TimeoutError naming ``what`` and the logs."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {path.name}\n{path.read_text()[-2000:]}"
                                 for path in sorted(self.folder.glob("*.log")))
                raise TimeoutError(f"Slurm: not {what} after {timeout_s:g} s\n{logs}")
            time.sleep(0.2)


def _write_conf(folder: Path, node_line: str, node: str, munge_socket: Path) -> Path:
    user = getpass.getuser()
    conf = folder / "slurm.conf"
    conf.write_text(f"""\
ClusterName=joulehouse-test
SlurmctldHost={node}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={folder / "state"}
SlurmdSpoolDir={folder / "spool"}
SlurmctldPidFile={folder / "slurmctld.pid"}
SlurmdPidFile={folder / "slurmd.pid"}
PlugStackConfig={folder / "plugstack.conf"}
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
{node_line} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
""")
    (folder / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n")
    (folder / "plugstack.conf").write_text("")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    return conf


def _start(stack: ExitStack, folder: Path, name: str, cmd: list[str],
           env: dict[str, str]) -> subprocess.Popen:
    """Start a daemon in the foreground, output in ``folder/name.log``; stopped on exit."""
    with open(folder / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env)
    stack.callback(stop, proc)
    return proc



def _cancel_jobs(cluster: SlurmCluster) -> None:
    """Cancel every job the cluster still has and wait (bounded) for them to leave."""
    if cluster.job_ids():
        subprocess.run([tool("scancel"), "--full", *cluster.job_ids()], check=False,
                       capture_output=True)
        cluster.wait_until(lambda: not cluster.job_ids(), "rid of its jobs", 30)


@contextmanager
def one_node_slurm() -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd; yield the cluster once its node is idle."""
    reason = missing_requirement()
    if reason:
        raise RuntimeError(reason)
    with ExitStack() as stack:
        folder = Path(tempfile.mkdtemp(prefix="joulehouse-slurm-"))
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        folder.chmod(0o755)  # munged wants its socket's folder reachable by all
        key, socket_path = folder / "munge.key", folder / "munge.socket"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        _start(stack, folder, "munged", [
            tool("munged"), "--foreground", "--force", f"--socket={socket_path}",
            f"--key-file={key}", f"--pid-file={folder / 'munged.pid'}",
            f"--seed-file={folder / 'munged.seed'}", f"--log-file={folder / 'munged.out'}"],
            dict(os.environ))
        node_line = subprocess.run([tool("slurmd"), "-C"], check=True, capture_output=True,
                                   text=True).stdout.splitlines()[0]
        node = node_line.split()[0].removeprefix("NodeName=")
        conf = _write_conf(folder, node_line, node, socket_path)
        stack.enter_context(mock.patch.dict(os.environ, {"SLURM_CONF": str(conf)}))
        cluster = SlurmCluster(conf, node, folder)
        cluster.wait_until(socket_path.exists, "munged's socket", 10)
        env = dict(os.environ)
        _start(stack, folder, "slurmctld", [tool("slurmctld"), "-D", "-i", "-f", str(conf)], env)
        _start(stack, folder, "slurmd", [tool("slurmd"), "-D", "-N", node, "-f", str(conf)], env)
        # Registered last, run first: the jobs go before the daemons stop.
        stack.callback(_cancel_jobs, cluster)
        cluster.wait_until(lambda: cluster.node_state() == "idle", f"node {node} idle")
        yield cluster
