"""An HA control plane on real multi-host networks: three (or more) server
hosts, each with an etcd member and a drover server (as docs/ha.md lays it
out across machines), a client host, and agent hosts, all on one switch.
Built on netns.Cluster (its namespaces, faults and cleanup).

    server hosts s1..sK  10.<k>.0.1..K    etcd member (:2379 clients, :2380 peers)
                                          + drover server (TLS, gRPC :7070, HTTPS :8080)
    client host          10.<k>.0.100     the CLI, and etcdctl for the checks
    node hosts  n1..nN   10.<k>.0.11..    drover agent --server s1:7070,...,sK:7070

Each server talks to its own etcd member first. One cluster CA (drover
certs init with every server's address as a name) serves all servers, so
agents and the CLI trust whichever leads.

Faults on top of netns.Cluster's: kill_server / stop_server / cont_server
(the drover server only; its etcd member stays), isolate_server (nftables
drops between a server host and the other server hosts: its etcd member is
cut from the majority, agents and clients still reach it).

Needs root, iproute2, nftables and etcd-server (scripts/install-deps.sh).
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import netns
from netns import GRPC_PORT, HTTP_PORT, Host, NetnsUnavailable, wait_until

ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
NAMESPACE = "drover/"  # the servers' key namespace in etcd
LEADER_KEY = NAMESPACE + "leader"
WRITER_KEY = NAMESPACE + "writer"


class HaCluster(netns.Cluster):
    def __init__(self, servers=3, nodes=3, gpus_per_node=1):
        for tool in ("etcd", "etcdctl"):
            if shutil.which(tool) is None:
                raise NetnsUnavailable(f"'{tool}' is missing: run scripts/install-deps.sh (etcd-server, etcd-client)")
        self.n_servers = servers
        self.server_procs = {}  # server host name -> Popen of its drover server
        self.etcd_procs = {}
        super().__init__(nodes=nodes, gpus_per_node=gpus_per_node)

    # -- network (netns.Cluster calls these) ----------------------------

    def _make_network(self):
        self.servers = {}
        for i in range(1, self.n_servers + 1):
            s = f"s{i}"
            self.servers[s] = Host(s, f"{self.prefix}-{s}", f"{self.subnet}.{i}", self.dir / s)
        self.client = Host("client", f"{self.prefix}-client", f"{self.subnet}.100", self.dir / "client")
        self.server = self.client  # netns.Cluster runs the CLI on self.server's host
        super()._make_network()

    def hosts(self):
        return [*self.servers.values(), self.client, *self.nodes.values()]

    def host(self, name):
        if name in self.servers:
            return self.servers[name]
        if name in ("client", "server"):
            return self.client
        return self.nodes[name]

    # -- addresses --------------------------------------------------------

    @property
    def addr(self):
        return ",".join(f"{h.ip}:{GRPC_PORT}" for h in self.servers.values())

    @property
    def ca_file(self):
        return str(self.dir / "tls/ca.crt")

    def etcd_endpoints(self, first=None):
        hosts = list(self.servers.values())
        if first is not None:
            hosts.sort(key=lambda h: h.name != first)
        return ",".join(f"{h.ip}:{ETCD_CLIENT_PORT}" for h in hosts)

    def server_of_ip(self, ip):
        return next((h.name for h in self.servers.values() if h.ip == ip), None)

    # -- processes --------------------------------------------------------

    def _spawn_cmd(self, h, cmd, log):
        with open(h.dir / f"{log}.out", "ab") as out, open(h.dir / f"{log}.err", "ab") as err:
            return subprocess.Popen(["nsenter", f"--net=/run/netns/{h.ns}", *cmd], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, start_new_session=True)

    def start_etcd(self, name):
        h = self.servers[name]
        initial = ",".join(f"{s.name}=http://{s.ip}:{ETCD_PEER_PORT}" for s in self.servers.values())
        client, peer = f"http://{h.ip}:{ETCD_CLIENT_PORT}", f"http://{h.ip}:{ETCD_PEER_PORT}"
        # docs/ha.md, "etcd settings": a 500 ms election timeout, room for
        # a control-loop batch of 1,000 jobs.
        self.etcd_procs[name] = self._spawn_cmd(h, [
            "etcd", "--name", name, "--data-dir", str(h.dir / "etcd"), "--listen-client-urls", client,
            "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", self.tag,
            "--heartbeat-interval", "100", "--election-timeout", "500", "--pre-vote", "--max-txn-ops", "4096",
            "--max-request-bytes", "8388608", "--logger", "zap", "--log-level", os.environ.get("DROVER_NETNS_ETCD_LOG", "warn")], "etcd")

    def server_args(self, name):
        h = self.servers[name]
        tls = self.dir / "tls"
        return ["server", "--data-dir", str(h.dir), "--grpc-listen", f"{h.ip}:{GRPC_PORT}",
                "--listen", f"{h.ip}:{HTTP_PORT}", "--store", f"etcd://{self.etcd_endpoints(first=name)}/drover",
                "--leader-ttl", "1s", "--lease-ttl", "6s", "--etcd-max-txn-ops", "4096",
                "--etcd-max-request-bytes", "8388608",
                "--tls-cert", str(tls / "server.crt"), "--tls-key", str(tls / "server.key"),
                "--tls-ca", str(tls / "ca.crt"), "--tls-ca-key", str(tls / "ca.key"),
                *self._env_flags("DROVER_NETNS_SERVER_FLAGS", h)]

    def start_drover_server(self, name):
        self.server_procs[name] = self._spawn_cmd(self.servers[name], [self.binary, *self.server_args(name)], "server")

    def start_servers(self, timeout=60):
        """etcd members and servers on every server host; waits until one
        leads and the CLI gets an answer."""
        sans = []
        for h in self.servers.values():
            sans += ["--san", h.ip]
        netns._sh([self.binary, "certs", "init", "--data-dir", str(self.dir), *sans])
        for s in self.servers:
            self.start_etcd(s)

        def etcd_up():
            try:
                return self.etcd_revision() > 0
            except (RuntimeError, subprocess.TimeoutExpired, ValueError):
                return False

        wait_until(etcd_up, timeout, interval=0.2, what="etcd to elect a leader")
        self.record_history()
        for s in self.servers:
            self.start_drover_server(s)

        def token():
            for s, p in self.server_procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"drover server on {s} exited {p.returncode}: {self.log_tail(s)}")
            for h in self.servers.values():
                t = h.dir / "admin.token"
                if t.exists() and t.read_text().strip():
                    return t.read_text().strip()
            return None

        self.token = wait_until(token, timeout, interval=0.1, what="a leader's admin.token")
        wait_until(lambda: self.cli("nodes", check=False) is not None, 30, what="the leader to answer the CLI")

    def start(self, server_flags=(), agent_flags=(), timeout=30):
        self.start_servers()
        for n in self.nodes:
            self.start_agent(n, agent_flags)
        self.wait_ready(list(self.nodes), timeout)

    def kill_server(self, name):
        """SIGKILL of the drover server (its etcd member stays); returns the
        time of the fault."""
        p = self.server_procs.pop(name)
        t = time.time()
        p.send_signal(signal.SIGKILL)
        p.wait()
        return t

    def stop_server(self, name):
        t = time.time()
        self.server_procs[name].send_signal(signal.SIGSTOP)
        return t

    def cont_server(self, name):
        self.server_procs[name].send_signal(signal.SIGCONT)

    def isolate_server(self, name):
        """Cuts server host `name` from every other server host (both
        directions); nodes and the client still reach it."""
        t = time.time()
        for other in self.servers:
            if other != name:
                self.drop_between(name, other)
        return t

    def rejoin_server(self, name):
        for other in self.servers:
            if other != name:
                self.undrop_between(name, other)

    def log_text(self, server):
        """The whole log of the drover server on server host `server`
        (every run of it: a server that starts over appends)."""
        try:
            return (self.servers[server].dir / "server.err").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, host, lines=20):
        if host in self.servers:
            try:
                text = (self.servers[host].dir / "server.err").read_text(errors="replace")
            except FileNotFoundError:
                return "(no log)"
            return "\n".join(text.splitlines()[-lines:])
        return super().log_tail(host, lines)

    # -- etcd, from the client host ----------------------------------------

    def etcdctl(self, *args, timeout=10):
        cmd = ["nsenter", f"--net=/run/netns/{self.client.ns}", "etcdctl", "--endpoints", self.etcd_endpoints(),
               "--command-timeout", "3s", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, ETCDCTL_API="3"))
        if r.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def leader(self):
        """The server host whose drover server holds the leader key; None
        when none does (or etcd does not answer)."""
        try:
            value = self.etcdctl("get", LEADER_KEY, "--print-value-only").strip()
        except (RuntimeError, subprocess.TimeoutExpired):
            return None
        if not value:
            return None
        return self.server_of_ip(json.loads(value)["grpc"].rsplit(":", 1)[0])

    def etcd_revision(self):
        return int(json.loads(self.etcdctl("get", "nothing", "-w", "json"))["header"]["revision"])

    def record_history(self):
        """Records every event of the servers' namespace from revision 1,
        with `etcdctl watch` on the client host, into a file; history()
        reads it. Started before the servers write, so compaction cannot
        hide a revision from it. A watch that etcd cancels (its member lost
        the majority) is started again after the last revision it showed."""
        self._history_file = self.dir / "etcd-history.jsonl"
        self._history_stop = threading.Event()
        self._history_proc = None

        def record():
            next_rev = 1
            while not self._history_stop.is_set():
                with open(self._history_file, "ab") as out, open(self.dir / "etcd-history.err", "ab") as err:
                    self._history_proc = subprocess.Popen(
                        ["nsenter", f"--net=/run/netns/{self.client.ns}", "etcdctl", "--endpoints",
                         self.etcd_endpoints(), "watch", "--prefix", NAMESPACE, "--rev", str(next_rev), "-w", "json"],
                        stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=dict(os.environ, ETCDCTL_API="3"),
                        start_new_session=True)
                self._history_proc.wait()
                seen = [r for r, *_ in self._events()]
                next_rev = max(seen, default=next_rev - 1) + 1
                self._history_stop.wait(0.2)

        self._history_thread = threading.Thread(target=record, daemon=True)
        self._history_thread.start()

    def _events(self):
        """The events recorded so far: [(revision, "put"/"delete", key,
        value, create_revision)], in revision order."""
        events = []
        for line in self._history_file.read_text().splitlines():
            try:
                resp = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            for e in resp.get("Events") or []:
                kv = e["kv"]
                events.append((int(kv.get("mod_revision", 0)), "delete" if e.get("type") == 1 else "put",
                               base64.b64decode(kv["key"]).decode(errors="replace"),
                               base64.b64decode(kv.get("value", "")).decode(errors="replace"),
                               int(kv.get("create_revision", 0))))
        return events

    def history(self, timeout=30):
        """Every event of the namespace up to etcd's current revision, as
        _events() gives them."""
        upto = self.etcd_revision()

        def read():
            events = self._events()
            # Every revision is a write in the namespace (nothing else
            # writes to this etcd): caught up once `upto` is seen.
            return events if any(r >= upto for r, *_ in events) else None

        return wait_until(read, timeout, interval=0.2, what=f"etcd's history up to revision {upto}")

    def close(self):
        if getattr(self, "_history_stop", None) is not None:
            self._history_stop.set()
            p = self._history_proc
            if p is not None and p.poll() is None:
                p.kill()
            self._history_thread.join(5)
        super().close()
