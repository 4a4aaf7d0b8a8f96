"""Multi-host test harness: a Drover server and its agents, each on a "host"
of its own (a Linux network namespace), wired to one switch.

    switch namespace <prefix>-sw:  bridge br0, one port p-<host> per host
    host namespaces  <prefix>-<host>: eth0 (veth into br0) + lo
        server  10.<k>.0.1     drover server (TLS, gRPC :7070, HTTPS :8080); the CLI runs here
        n1..nN  10.<k>.0.11..  drover agent --devices simulated, own --data-dir

Every process is started with `nsenter --net=/run/netns/<ns>`: only the
network is private, so all hosts share the file system (a job writes its
own timestamps to a file the test reads) and the machine's cgroups.

Agents get --gossip-listen <their address>:7946 when the binary has that
flag (SWIM among agents), so the harness runs on drovers before and after it.

Faults: cut_link (the node's eth0 down: a full partition), drop_between
(nftables drops in the node's namespace, both directions, to one peer),
power_off (link down and SIGKILL of every process in the namespace: agent,
supervisors, jobs), stop_agent / cont_agent (SIGSTOP / SIGCONT).

Needs root, iproute2, nftables (scripts/install-deps.sh) and python3 (stdlib
only). Names carry the owner's pid and a random tag, so parallel runs do not
collide; a run killed before its cleanup leaves namespaces that the next
Cluster removes (their owner pid is dead). When namespaces cannot be made,
Cluster raises NetnsUnavailable: the tests fail, they do not skip.

Not thread-safe: one Cluster belongs to the thread that made it.

Environment: DROVER_BINARY (the drover under test), DROVER_NETNS_KEEP=1
(keep the temp dir with every log), DROVER_NETNS_SERVER_FLAGS and
DROVER_NETNS_AGENT_FLAGS (extra flags, shell words; "{ip}" and "{server_ip}"
are replaced by the host's and the server's address).
"""

import atexit
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

GRPC_PORT = 7070
HTTP_PORT = 8080
GOSSIP_PORT = 7946  # UDP, each agent on its own address (when the agent has --gossip-listen)
NS_PREFIX = "drvt"
NFT_TABLE = "drover_netns"

# ---------------------------------------------------------------------------
# The JSON the helpers read. Everything the tests know about the API's field
# names is in the functions below: adapt them when the API changes.
# ---------------------------------------------------------------------------


def node_state(node):
    """A node's state from one entry of `drover nodes -o json` (.nodes[]):
    "Ready", "Suspect", "Lost", "NotReady" (from "NODE_STATE_NOT_READY")."""
    return _enum_word(node.get("state", ""), "NODE_STATE_")


def node_reason(node):
    """Why the node is in its state (.stateReason; "" when not reported)."""
    return str(node.get("stateReason", ""))


@dataclass
class JobView:
    state: str  # "Pending", "Running", "Failed", ... (from "JOB_STATE_RUNNING")
    nodes: list  # the nodes it holds now: each gang replica's, else .allocation's
    restarts: int  # .status.restarts
    attempt: int  # .status.attempt: the current binding's number (0: not reported)
    # .status.attempts[], oldest first: {"number", "nodes": [...], "outcome", ...}
    attempts: list
    raw: dict = field(repr=False)

    @property
    def attempt_count(self):
        """Bindings so far: the history's length, else the attempt number,
        else restarts + 1."""
        return len(self.attempts) or self.attempt or self.restarts + 1


def job_view(job):
    """The parts of `drover job ID -o json` (a Job) the tests read."""
    status = job.get("status", {})
    # A gang lists each replica's allocation; a single job only .allocation.
    allocs = status.get("replicas") or [status.get("allocation", {})]
    return JobView(state=_enum_word(status.get("state", ""), "JOB_STATE_"),
                   nodes=[a["node"] for a in allocs if a.get("node")],
                   restarts=int(status.get("restarts", 0)), attempt=int(status.get("attempt", 0)),
                   attempts=list(status.get("attempts", [])), raw=job)


def _enum_word(raw, prefix):
    """"NODE_STATE_NOT_READY" -> "NotReady"."""
    return "".join(w.capitalize() for w in str(raw).removeprefix(prefix).lower().split("_"))


# ---------------------------------------------------------------------------
# The test job: it writes its own timestamps, so overlap is judged from what
# the processes did, not from what the server believes.
#   <node> <replica> <pid> start <unix time>
#   <node> <replica> <pid> beat <unix time>     every 100 ms
#   <node> <replica> <pid> end <unix time>      on SIGTERM / SIGINT
# ---------------------------------------------------------------------------

# A run is known by its start in nanoseconds, not its pid: every job has a
# PID namespace of its own, where each run's shell has the same pid.
JOB_SCRIPT = r'''run="$DROVER_NODE ${DROVER_REPLICA:-0} $(date +%s%N)"
echo "$run start $(date +%s.%N)" >> "$OUT"
trap 'echo "$run end $(date +%s.%N)" >> "$OUT"; exit 143' TERM INT
while :; do echo "$run beat $(date +%s.%N)" >> "$OUT"; sleep 0.1; done'''


def job_command():
    """argv of the test job; it needs OUT=<file> in its environment (-e)."""
    return ["sh", "-c", JOB_SCRIPT]


@dataclass
class Run:
    """One process of a job, as its own lines tell it."""
    node: str
    replica: int
    pid: int
    start: float
    last: float  # its last line (beat or end): it was alive until at least then
    ended: bool = False

    def __str__(self):
        return (f"{self.node} replica {self.replica} pid {self.pid}: {self.start:.3f} .. "
                f"{self.last:.3f}{' (end)' if self.ended else ''}")


def read_runs(path):
    """Runs of the job writing to `path`, by start time."""
    runs = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue  # a line being written
        node, replica, pid, kind, t = parts
        key = (node, int(replica), int(pid))
        t = float(t)
        if key not in runs:
            runs[key] = Run(node, int(replica), int(pid), t, t)
        r = runs[key]
        if kind == "start":
            r.start = t
        r.last = max(r.last, t)
        r.ended = r.ended or kind == "end"
    return sorted(runs.values(), key=lambda r: r.start)


def overlaps(runs):
    """Pairs of runs of the same replica whose lifetimes overlap: (a, b) with
    a.start <= b.start and b starting before a's last line."""
    out = []
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            if a.replica == b.replica and b.start < a.last:
                out.append((a, b))
    return out


def format_runs(runs):
    return "\n".join(f"  {r}" for r in runs) or "  (no runs)"


# ---------------------------------------------------------------------------


class NetnsUnavailable(RuntimeError):
    """Network namespaces (or the tools to make them) are not available."""


def wait_until(pred, timeout, interval=0.05, what="condition"):
    """Polls `pred` until it returns a truthy value, which it returns; raises
    TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def _sh(cmd, check=True, input=None, timeout=30):
    r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def drover_binary():
    b = os.environ.get("DROVER_BINARY")
    if not b:
        default = Path(__file__).resolve().parents[2] / "build/apps/drover/drover"
        b = str(default)
    if not os.access(b, os.X_OK):
        raise RuntimeError(f"drover binary '{b}' is not executable: set DROVER_BINARY")
    return b


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _ns_pids(ns):
    r = _sh(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in r.stdout.split()]


def _kill_ns(ns, timeout=10.0):
    """SIGKILLs every process in `ns` until none is left (a dying parent may
    fork once more)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _ns_pids(ns)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} in namespace '{ns}' survive SIGKILL")
        time.sleep(0.02)


def sweep_stale():
    """Removes namespaces of earlier runs whose owner process is gone."""
    r = _sh(["ip", "netns", "list"], check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"^{NS_PREFIX}-(\d+)-([0-9a-f]+)-", name)
        if m and not _alive(int(m.group(1))):
            _kill_ns(name)
            _sh(["ip", "netns", "del", name], check=False)
            for d in Path(tempfile.gettempdir()).glob(f"drover-netns-{m.group(2)}-*"):
                shutil.rmtree(d, ignore_errors=True)


_live = set()  # Clusters not yet closed, for the signal handlers and atexit


def _close_all(*_):
    for c in list(_live):
        c.close()


def _on_signal(signum, _frame):
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(_close_all)


@dataclass
class Host:
    name: str  # "server", "n1", ...
    ns: str
    ip: str
    dir: Path  # its data dir and logs
    proc: subprocess.Popen = None  # its drover server or agent


class Cluster:
    """A switch, a server host and `nodes` node hosts, made by __init__ and
    removed by close() (also at exit and on SIGINT / SIGTERM). Start the
    processes with start_server() and start_agent(); start() does both."""

    def __init__(self, nodes=3, gpus_per_node=1):
        for tool in ("ip", "nsenter"):
            if shutil.which(tool) is None:
                raise NetnsUnavailable(f"'{tool}' is missing: run scripts/install-deps.sh")
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN)")
        self.binary = drover_binary()
        self.gpus_per_node = gpus_per_node
        self.closed = False
        self.tag = f"{random.getrandbits(24):06x}"
        self.prefix = f"{NS_PREFIX}-{os.getpid()}-{self.tag}"
        self.subnet = f"10.{random.randint(1, 254)}.0"
        self.dir = Path(tempfile.mkdtemp(prefix=f"drover-netns-{self.tag}-"))
        os.chmod(self.dir, 0o755)
        self.switch = f"{self.prefix}-sw"
        self.server = Host("server", f"{self.prefix}-server", f"{self.subnet}.1", self.dir / "server")
        self.nodes = {}
        for i in range(1, nodes + 1):
            n = f"n{i}"
            self.nodes[n] = Host(n, f"{self.prefix}-{n}", f"{self.subnet}.{10 + i}", self.dir / n)
        self._made = []  # namespaces made, for close()
        self._nft_ready = set()
        self.token = None
        self._agent_help = None
        _live.add(self)
        if not getattr(Cluster, "_handlers", False):
            for s in (signal.SIGINT, signal.SIGTERM):
                signal.signal(s, _on_signal)
            Cluster._handlers = True
        try:
            sweep_stale()
            self._make_network()
        except Exception:
            self.close()
            raise

    # -- network --------------------------------------------------------

    def _add_ns(self, ns):
        r = _sh(["ip", "netns", "add", ns], check=False)
        if r.returncode != 0:
            raise NetnsUnavailable(f"cannot create network namespace '{ns}' (these tests need root "
                                   f"and a kernel with network namespaces): {r.stderr.strip()}")
        self._made.append(ns)
        _sh(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _make_network(self):
        self._add_ns(self.switch)
        _sh(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
        _sh(["ip", "-n", self.switch, "link", "set", "br0", "up"])
        for h in self.hosts():
            h.dir.mkdir(parents=True, exist_ok=True)
            self._add_ns(h.ns)
            port = f"p-{h.name}"
            try:
                _sh(["ip", "link", "add", "eth0", "netns", h.ns, "type", "veth",
                     "peer", "name", port, "netns", self.switch])
            except RuntimeError as e:
                raise NetnsUnavailable(f"cannot create a veth pair for '{h.name}': {e}") from e
            _sh(["ip", "-n", self.switch, "link", "set", port, "master", "br0", "up"])
            _sh(["ip", "-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0"])
            _sh(["ip", "-n", h.ns, "link", "set", "eth0", "up"])

    def hosts(self):
        return [self.server, *self.nodes.values()]

    def host(self, name):
        return self.server if name == "server" else self.nodes[name]

    def cut_link(self, node):
        """Takes the node's only link down: a full partition."""
        _sh(["ip", "-n", self.host(node).ns, "link", "set", "eth0", "down"])

    def restore_link(self, node):
        _sh(["ip", "-n", self.host(node).ns, "link", "set", "eth0", "up"])

    def _nft(self, ns, script):
        if shutil.which("nft") is None:
            raise RuntimeError("'nft' is missing: run scripts/install-deps.sh (nftables)")
        _sh(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script)

    def drop_between(self, node, peer):
        """Drops every packet between `node` and `peer` (a node name or
        "server"), both directions, with nftables in the node's namespace."""
        h = self.host(node)
        if h.ns not in self._nft_ready:
            self._nft(h.ns, f"""table inet {NFT_TABLE} {{
  set blocked {{ type ipv4_addr; }}
  chain input {{ type filter hook input priority 0; policy accept; ip saddr @blocked drop; }}
  chain output {{ type filter hook output priority 0; policy accept; ip daddr @blocked drop; }}
}}
""")
            self._nft_ready.add(h.ns)
        self._nft(h.ns, f"add element inet {NFT_TABLE} blocked {{ {self.host(peer).ip} }}\n")

    def undrop_between(self, node, peer):
        self._nft(self.host(node).ns, f"delete element inet {NFT_TABLE} blocked {{ {self.host(peer).ip} }}\n")

    def can_reach(self, src, dst, timeout=1.0):
        """Whether a TCP SYN from `src` to `dst` is answered (accepted or
        refused); False when it times out or has no route."""
        probe = ("import socket,sys\n"
                 "try:\n"
                 f"  socket.create_connection(('{self.host(dst).ip}', {GRPC_PORT}), {timeout}).close()\n"
                 "except ConnectionRefusedError: pass\n"
                 "except OSError: sys.exit(1)\n")
        r = _sh(["nsenter", f"--net=/run/netns/{self.host(src).ns}", "python3", "-c", probe],
                check=False, timeout=timeout + 10)
        return r.returncode == 0

    # -- processes ------------------------------------------------------

    def _spawn(self, h, args, log):
        cmd = ["nsenter", f"--net=/run/netns/{h.ns}", self.binary, *args]
        with open(h.dir / f"{log}.out", "ab") as out, open(h.dir / f"{log}.err", "ab") as err:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)

    def _env_flags(self, var, h):
        words = shlex.split(os.environ.get(var, ""))
        return [w.replace("{ip}", h.ip).replace("{server_ip}", self.server.ip) for w in words]

    @property
    def addr(self):
        return f"{self.server.ip}:{GRPC_PORT}"

    @property
    def ca_file(self):
        return str(self.server.dir / "tls/ca.crt")

    def start_server(self, extra_flags=()):
        """`drover certs init` for the server's address, then the server on
        it with TLS; waits until the CLI gets an answer."""
        s = self.server
        _sh([self.binary, "certs", "init", "--data-dir", str(s.dir), "--san", s.ip])
        (s.dir / "endpoints.json").unlink(missing_ok=True)
        tls = s.dir / "tls"
        s.proc = self._spawn(s, ["server", "--data-dir", str(s.dir),
                                 "--grpc-listen", self.addr, "--listen", f"{s.ip}:{HTTP_PORT}",
                                 "--tls-cert", str(tls / "server.crt"), "--tls-key", str(tls / "server.key"),
                                 "--tls-ca", str(tls / "ca.crt"), "--tls-ca-key", str(tls / "ca.key"),
                                 *self._env_flags("DROVER_NETNS_SERVER_FLAGS", s), *extra_flags], "server")

        def up():
            if s.proc.poll() is not None:
                raise RuntimeError(f"drover server exited {s.proc.returncode}: {self.log_tail('server')}")
            return (s.dir / "endpoints.json").exists() and (s.dir / "admin.token").exists()

        wait_until(up, 30, what="the server's endpoints.json")
        self.token = (s.dir / "admin.token").read_text().strip()
        wait_until(lambda: self.cli("nodes", check=False) is not None, 30, what="the server to answer the CLI")

    def cli(self, *args, json_out=True, check=True, timeout=10):
        """`drover ARGS... [-o json]` from the server's host with the admin
        token; parsed JSON (or text). With check=False, None on failure."""
        # Flags go right after the verb: everything after `--` is a job's command.
        cmd = ["nsenter", f"--net=/run/netns/{self.server.ns}", self.binary, args[0],
               "--addr", self.addr, "--ca-file", self.ca_file, "--timeout", "5"]
        if json_out:
            cmd += ["-o", "json"]
        cmd += args[1:]
        env = dict(os.environ, DROVER_TOKEN=self.token or "")
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            if check:
                raise
            return None
        if r.returncode != 0:
            if check:
                raise RuntimeError(f"{shlex.join(cmd[3:])} exited {r.returncode}: {r.stderr.strip()}")
            return None
        return json.loads(r.stdout) if json_out else r.stdout.strip()

    def join_token(self, node):
        return self.cli("join-token", "--node", node, "--ttl", "10m", json_out=False)

    def start_agent(self, node, extra_flags=()):
        """The node's agent in its namespace: simulated GPUs, its own data
        dir; joins with a join token the first time, then uses node.token."""
        h = self.nodes[node]
        args = ["agent", "--server", self.addr, "--ca-file", self.ca_file, "--node-name", node,
                "--data-dir", str(h.dir), "--devices", "simulated",
                "--simulate-gpus", str(self.gpus_per_node)]
        if not (h.dir / "node.token").exists():
            args += ["--join-token", self.join_token(node)]
        if self._agent_has("--gossip-listen"):
            args += ["--gossip-listen", f"{h.ip}:{GOSSIP_PORT}"]  # the address its peers reach it on
        args += [*self._env_flags("DROVER_NETNS_AGENT_FLAGS", h), *extra_flags]
        h.proc = self._spawn(h, args, "agent")

    def _agent_has(self, flag):
        """Whether this drover's agent takes `flag` (so that the harness
        runs both before and after a feature's flags exist)."""
        if self._agent_help is None:
            self._agent_help = _sh([self.binary, "agent", "--help"]).stdout
        return re.search(rf"(^|[\s,]){re.escape(flag)}(?=[\s=,]|$)", self._agent_help, re.M) is not None

    def start(self, server_flags=(), agent_flags=(), timeout=30):
        """The server, every agent, and a wait until all nodes are Ready."""
        self.start_server(server_flags)
        for n in self.nodes:
            self.start_agent(n, agent_flags)
        self.wait_ready(list(self.nodes), timeout)

    def wait_ready(self, names, timeout=30):
        def ready():
            st = self.node_states()
            return all(st.get(n) == "Ready" for n in names)
        wait_until(ready, timeout, interval=0.1, what=f"nodes {names} to be Ready")

    def power_off(self, node):
        """Power loss: the link goes down and every process in the node's
        namespace gets SIGKILL. Returns the time of the fault (time.time())."""
        h = self.nodes[node]
        t = time.time()
        self.cut_link(node)
        _kill_ns(h.ns)
        if h.proc is not None:
            h.proc.wait()
            h.proc = None
        return t

    def power_on(self, node, extra_flags=()):
        """Link up, and the agent again (its data dir and node.token kept)."""
        self.restore_link(node)
        self.start_agent(node, extra_flags)

    def stop_agent(self, node):
        os.kill(self.nodes[node].proc.pid, signal.SIGSTOP)

    def cont_agent(self, node):
        os.kill(self.nodes[node].proc.pid, signal.SIGCONT)

    def pids(self, host):
        return _ns_pids(self.host(host).ns)

    # -- API ------------------------------------------------------------

    def nodes_json(self):
        return self.cli("nodes").get("nodes", [])

    def node_states(self, reasons=False):
        """{node name: node_state(...)} ("State (reason)" with reasons); {}
        when the server does not answer."""
        j = self.cli("nodes", check=False)
        out = {}
        for n in (j or {}).get("nodes", []):
            out[n.get("name")] = node_state(n) + (f" ({node_reason(n)})" if reasons and node_reason(n) else "")
        return out

    def submit(self, *flags, out_file, command=None):
        """Submits the test job (or `command`) writing to `out_file`; returns
        its id."""
        job = self.cli("submit", *flags, "-e", f"OUT={out_file}", "--", *(command or job_command()))
        return job["id"]

    def job(self, job_id):
        return job_view(self.cli("job", job_id))

    def jobs(self):
        """[(id, JobView)] of every job; [] when the server does not answer."""
        j = self.cli("jobs", check=False)
        return [(x.get("id"), job_view(x)) for x in (j or {}).get("jobs", [])]

    # -- logs and cleanup -----------------------------------------------

    def log_tail(self, host, lines=20):
        h = self.host(host)
        log = "server" if host == "server" else "agent"
        try:
            text = (h.dir / f"{log}.err").read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def close(self):
        """Kills every process in the cluster's namespaces, removes them and
        (unless DROVER_NETNS_KEEP=1) the temp dir. Idempotent."""
        if self.closed:
            return
        self.closed = True
        _live.discard(self)
        for ns in reversed(self._made):
            try:
                _kill_ns(ns)
            finally:
                _sh(["ip", "netns", "del", ns], check=False)
        for h in self.hosts():
            if h.proc is not None:
                try:
                    h.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        if os.environ.get("DROVER_NETNS_KEEP") == "1":
            print(f"netns: kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()
