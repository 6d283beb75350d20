"""A real Slurm cluster for tests: munged, slurmctld, and N slurmd nodes on this machine.

Each node is `slurmd -N nodeN` in its own network namespace, with its own address on a veth pair
in a per-run 10.232.S.0/24 (made as tests/sshhosts.py makes its hosts), so `srun -N2` really
spreads a job over two "hosts". slurmctld runs in the root namespace at the first veth's outer
address; every namespace routes to it by default. Each node declares `Gres=gpu:<n>` backed by
device files that are /dev/null (no GPUs), and there is no accounting storage: job states come
from squeue and scontrol.

Everything lives in a private directory (config, munge key and socket, spool, logs); ports are
chosen free; `stop()` kills every daemon and job and deletes the namespaces. Needs root, iproute2
and Debian's `slurmctld slurmd slurm-client munge` (scripts/test.sh installs them as root):
`missing_reason()` says what is missing, for a clear skip.

No pytest import here, like sshhosts.py.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from netns import collect_stale_namespaces, kill_namespace, pick_subnet
from netns import run as _run

NETNS_PREFIX = "orchs"  # namespaces are `orchs-<creator pid>-<random>-<index>`
SUBNET_PREFIX = "10.232"  # one free 10.232.S.0/24 per run; sshhosts takes 10.231
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("munge", "unmunge", "srun", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
PARTITION = "debug"


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (f"{d}/{name}" for d in ("/usr/sbin", "/sbin") if os.access(f"{d}/{name}", os.X_OK)),
        None,
    )


def missing_reason() -> str | None:
    """Why a test Slurm cannot start here (not root, packages or namespaces missing), or None."""
    if os.geteuid() != 0:
        return "a test Slurm needs root (slurmd, network namespaces)"
    missing = [name for name in (*DAEMONS, *CLIENTS, "ip") if _which(name) is None]
    if missing:
        return f"missing {', '.join(missing)}: install slurmctld slurmd slurm-client munge"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no `munge` user (install the munge package)"
    probe = f"{NETNS_PREFIX}-{os.getpid()}-sprobe{secrets.token_hex(2)}"
    try:
        if _run(["ip", "netns", "add", probe], check=False).returncode != 0:
            return "cannot create network namespaces here"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def _host_cgroups() -> list[tuple[str, str]]:
    """The host's cgroup v1 hierarchies: (mount point under /sys/fs/cgroup, mount options)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(tail) < 3 or tail[0] != "cgroup" or not fields[4].startswith("/sys/fs/cgroup/"):
            continue
        wanted = [o for o in tail[2].split(",") if o.startswith("name=") or o in _CONTROLLERS]
        out.append((fields[4], ",".join(wanted) or "none"))
    return out


_CONTROLLERS = {"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids",
                "net_cls", "net_prio", "perf_event", "hugetlb", "rdma", "misc"}  # fmt: skip


def _mount_cgroup(hierarchy: tuple[str, str]) -> str:
    """The shell that mounts one v1 hierarchy at its place (`none,name=X` for a named one)."""
    where, options = hierarchy
    if options.startswith("name="):
        options = "none," + options
    return f"mkdir -p {where} && mount -t cgroup -o {options} cgroup {where}"


def _fake_device(path: Path) -> None:
    """A character device with /dev/null's numbers: Slurm's gpu plugin sets
    CUDA_VISIBLE_DEVICES and SLURM_*_GPUS only for gres files that are devices. A plain file
    where mknod is not allowed: the GPUs are still counted and granted, without those variables.
    """
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:
        path.touch()


def _cable(a: SlurmTestNode, b: SlurmTestNode, name: str) -> None:
    """A veth between two nodes' namespaces, so each reaches the other's address directly, as
    the nodes of a cluster do (the root side does not forward between them)."""
    peer = f"{name}p"
    _run(["ip", "-n", a.namespace, "link", "add", name, "type", "veth", "peer", "name", peer])
    _run(["ip", "-n", a.namespace, "link", "set", peer, "netns", b.namespace])
    _run(["ip", "-n", a.namespace, "link", "set", name, "up"])
    _run(["ip", "-n", b.namespace, "link", "set", peer, "up"])
    _run(["ip", "-n", a.namespace, "route", "add", f"{b.address}/32", "dev", name])
    _run(["ip", "-n", b.namespace, "route", "add", f"{a.address}/32", "dev", peer])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class SlurmTestNode:
    """One slurmd: its NodeName, its address (NodeAddr) and its network namespace."""

    name: str
    address: str
    namespace: str


class SlurmTestCluster:
    """Start munged, slurmctld and `nodes` slurmd; use as a context manager or start()/stop().

    Client commands run through `run()` (they find the cluster through `SLURM_CONF`, set in
    `env`). Every node has `gpus` fake GPUs and all this machine's CPUs, in partition `debug`.
    """

    def __init__(
        self,
        nodes: int = 2,
        *,
        gpus: int = 8,
        base_dir: Path | None = None,
        start_timeout: float = 15.0,
        side_partition: str | None = None,
    ) -> None:
        if not 1 <= nodes <= 60:
            raise ValueError("nodes must be between 1 and 60")
        # `side_partition`: one more node, alone in a partition of that name, so a long job there
        # never takes the default partition's nodes or GPUs.
        self.side_partition = side_partition
        self.node_count = nodes + (1 if side_partition else 0)
        self.gpus = gpus
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self.start_timeout = start_timeout
        self.nodes: list[SlurmTestNode] = []
        self.run_tag = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.controller_address = ""
        self._procs: list[subprocess.Popen[bytes]] = []
        self._namespaces: list[str] = []
        self._veths: list[str] = []
        self._tmp_base: Path | None = None
        self._stopped = True

    # -- what tests use -----------------------------------------------------------------------

    @property
    def main_nodes(self) -> list[SlurmTestNode]:
        """The nodes of the default partition (all but the side partition's)."""
        return self.nodes[:-1] if self.side_partition else list(self.nodes)

    @property
    def base(self) -> Path:
        """The private directory holding config, state and logs."""
        assert self.base_dir is not None, "not started"
        return self.base_dir

    @property
    def conf(self) -> Path:
        """slurm.conf (gres.conf and cgroup.conf sit beside it)."""
        return self.base / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment plus `SLURM_CONF` pointing at this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster; `check` raises on failure."""
        return _run(argv, check=check, env=self.env)

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Reason, NodeList, ...); {} when unknown."""
        shown = self.run("scontrol", "-o", "show", "job", job_id, check=False)
        fields: dict[str, str] = {}
        for word in shown.stdout.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
        return fields

    def job_id(self, name: str) -> str:
        """The id of the one job called `name` (running or recently ended)."""
        shown = self.run("squeue", "-h", "--states=all", f"--name={name}", "-o", "%i")
        (job_id,) = shown.stdout.split()
        return job_id

    def wait_for_job(self, job_id: str, states: Sequence[str], timeout: float = 30.0) -> str:
        """Poll until the job's JobState is one of `states`; return it (or raise)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.job(job_id).get("JobState", "")
            if state in states:
                return state
            time.sleep(0.1)
        raise TimeoutError(f"job {job_id} is {state or 'unknown'}, not {'/'.join(states)}")

    def log(self, name: str = "slurmctld") -> str:
        """A daemon's log: `slurmctld`, `munged` or a node name."""
        path = {"slurmctld": self.base / "slurmctld.log", "munged": self.base / "munged.log"}.get(
            name, self.base / name / "slurmd.log"
        )
        return path.read_text(errors="replace") if path.exists() else ""

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> SlurmTestCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> SlurmTestCluster:
        """Write config, start munged, slurmctld and every slurmd; wait until all nodes idle."""
        reason = missing_reason()
        if reason is not None:
            raise RuntimeError(reason)
        if self.base_dir is None:
            self._tmp_base = Path(tempfile.mkdtemp(prefix="orch-slurm-"))
            self.base_dir = self._tmp_base
        self.base.mkdir(parents=True, exist_ok=True)
        self.base.chmod(0o755)  # munged wants its socket's directories searchable by all
        self._stopped = False
        atexit.register(self.stop)
        try:
            collect_stale_namespaces(NETNS_PREFIX)
            self._make_nodes()
            self._start_munged()
            self._write_config()
            self._start_slurmctld()
            for node in self.nodes:
                self._start_slurmd(node)
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every daemon, job and step, delete namespaces and veths. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if self.nodes and self._procs:
            self._cancel_all_jobs()
        for namespace in self._namespaces:  # slurmd, slurmstepd and the jobs' processes
            kill_namespace(namespace)
        for proc in reversed(self._procs):  # TERM first: slurmctld then reaps slurmscriptd
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=3)
                    break
        for veth in self._veths:  # gone with their namespace, unless it never got the peer
            _run(["ip", "link", "del", veth], check=False)
        self._procs.clear()
        self._namespaces.clear()
        self._veths.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._tmp_base is not None:
            shutil.rmtree(self._tmp_base, ignore_errors=True)

    def _cancel_all_jobs(self, timeout: float = 5.0) -> None:
        """scancel every job and wait for them to end, so no step is killed mid-exit."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.run("scancel", f"--partition={PARTITION}", check=False)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if not self.run("squeue", "-h", "-o", "%i", check=False).stdout.strip():
                    return
                time.sleep(0.1)

    # -- pieces -------------------------------------------------------------------------------

    def _make_nodes(self) -> None:
        """One namespace per node: a veth pair, a /30, and a default route to the root side."""
        subnet = pick_subnet(SUBNET_PREFIX, "a test Slurm")
        for index in range(self.node_count):
            name = f"node{index + 1}"
            namespace = f"{NETNS_PREFIX}-{self.run_tag}-{index}"
            short = secrets.token_hex(3)
            outer, inner = f"os{short}o{index}", f"os{short}i{index}"  # <= 15 chars
            outer_ip, inner_ip = f"{subnet}{4 * index + 1}", f"{subnet}{4 * index + 2}"
            _run(["ip", "netns", "add", namespace])
            self._namespaces.append(namespace)
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
            self._veths.append(outer)
            _run(["ip", "link", "set", inner, "netns", namespace])
            _run(["ip", "addr", "add", f"{outer_ip}/30", "dev", outer])
            _run(["ip", "link", "set", outer, "up"])
            _run(["ip", "-n", namespace, "addr", "add", f"{inner_ip}/30", "dev", inner])
            _run(["ip", "-n", namespace, "link", "set", inner, "up"])
            _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
            # the controller and srun live on the root side, at any of its addresses
            _run(["ip", "-n", namespace, "route", "add", "default", "via", outer_ip])
            if index == 0:
                self.controller_address = outer_ip
            (self.base / name / "spool").mkdir(parents=True, exist_ok=True)
            self.nodes.append(SlurmTestNode(name, inner_ip, namespace))
        nodes = self.main_nodes
        for i, a in enumerate(nodes):
            for b in nodes[i + 1 :]:
                _cable(a, b, f"oc{i}{secrets.token_hex(2)}")

    def _spawn(
        self, argv: Sequence[str], log_name: str, *, user: str | None = None
    ) -> subprocess.Popen[bytes]:
        with (self.base / log_name).open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                env=self.env,
                user=user,
                group=user,
                extra_groups=[] if user else None,
            )
        self._procs.append(proc)
        return proc

    def _start_munged(self) -> None:
        """A private munged: own 1024-byte key (munge:munge, 0400), socket, pid and seed files."""
        munge_dir = self.base / "munge"
        munge_dir.mkdir(mode=0o755, exist_ok=True)
        key = munge_dir / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        user = pwd.getpwnam("munge")
        for path in (munge_dir, key):
            os.chown(path, user.pw_uid, user.pw_gid)
        self._spawn(
            ["munged", "--foreground",
             f"--key-file={key}", f"--socket={self.munge_socket}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={self.base / 'munged.log'}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            "munged.out",
            user="munge",
        )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.munge_socket.exists():
                cred = _run(["munge", "-n", "-S", str(self.munge_socket)], check=False)
                check = subprocess.run(
                    ["unmunge", "-S", str(self.munge_socket)],
                    input=cred.stdout,
                    capture_output=True,
                    text=True,
                    timeout=10,
                )
                if check.returncode == 0 and "Success" in check.stdout:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"munged did not start:\n{self.log('munged')}")

    @property
    def munge_socket(self) -> Path:
        """The private munged's socket (slurm.conf's AuthInfo points every daemon at it)."""
        return self.base / "munge" / "munge.socket"

    def _write_config(self) -> None:
        etc = self.base / "etc"
        etc.mkdir(exist_ok=True)
        gpu_dir = self.base / "fakegpu"
        gpu_dir.mkdir(exist_ok=True)
        for index in range(self.gpus):
            _fake_device(gpu_dir / f"fakegpu{index}")
        cpus = os.cpu_count() or 1
        hostname = socket.gethostname().split(".")[0]
        base = self.base
        lines = [
            "ClusterName=orchtest",
            f"SlurmctldHost={hostname}({self.controller_address})",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={base / 'ctld'}",
            f"SlurmdSpoolDir={base}/%n/spool",
            f"SlurmctldPidFile={base / 'slurmctld.pid'}",
            f"SlurmdPidFile={base}/%n/slurmd.pid",
            f"SlurmctldLogFile={base / 'slurmctld.log'}",
            f"SlurmdLogFile={base}/%n/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",  # the config's CPUs and GPUs win over probing
            "ReturnToService=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0",  # jobs start at once, not 3 s later
            "KillWait=2",  # scancel and time limits: TERM, then KILL 2 s later
            "OverTimeLimit=0",  # a job past its time limit ends at slurmctld's next check
            "InactiveLimit=0",
            "MinJobAge=600",  # keep ended jobs visible to `scontrol show job`
            "SlurmdTimeout=60",
            "GresTypes=gpu",
            *(
                f"NodeName={node.name} NodeAddr={node.address} CPUs={cpus} "
                f"Gres=gpu:{self.gpus} State=UNKNOWN"
                for node in self.nodes
            ),
            f"PartitionName={PARTITION} Nodes={','.join(n.name for n in self.main_nodes)} "
            "Default=YES MaxTime=INFINITE State=UP",
            *(
                f"PartitionName={self.side_partition} Nodes={self.nodes[-1].name} "
                "MaxTime=INFINITE State=UP"
                for _ in [1]
                if self.side_partition
            ),
        ]
        (base / "ctld").mkdir(exist_ok=True)
        self.conf.write_text("\n".join(lines) + "\n")
        gpu_files = f"{gpu_dir}/fakegpu[0-{self.gpus - 1}]"
        (etc / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={gpu_files}\n")
        # without these, slurmd stops at "No filesystem mounted on /sys/fs/cgroup"
        (etc / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")

    def _start_slurmctld(self) -> None:
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.run("scontrol", "ping", check=False).stdout.count("UP") >= 1:
                return
            time.sleep(0.1)
        raise RuntimeError(f"slurmctld did not answer:\n{self.log()}")

    def _start_slurmd(self, node: SlurmTestNode) -> None:
        # `ip netns exec` mounts a fresh /sys without the cgroup hierarchies a real node has
        # mounted; runc (podman in a job) needs them (docs/FACTS.md, "Containers").
        mounts = " && ".join(_mount_cgroup(c) for c in _host_cgroups())
        start = f"exec slurmd -D -N {node.name} -f {self.conf}"
        script = f"{{ mount -t tmpfs cgroup_root /sys/fs/cgroup && {mounts}; }} || true; {start}"
        argv = ["ip", "netns", "exec", node.namespace, "sh", "-c", script]
        self._spawn(argv, f"{node.name}/slurmd.out")

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            shown = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
            states = dict(line.split(None, 1) for line in shown.splitlines() if " " in line)
            if len(states) == len(self.nodes) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.1)
        logs = "\n".join(f"--- {n.name}\n{self.log(n.name)}" for n in self.nodes)
        raise RuntimeError(f"nodes not idle: {states}\n--- slurmctld\n{self.log()}\n{logs}")
