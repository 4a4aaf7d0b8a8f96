#!/usr/bin/env python3
"""Leader failovers of `drover up --ha 3`, timed as a submitting client sees them.

    python3 bench/ha_failover.py [--rounds 100] [--fault kill|stop|both] [--json out.json]

Starts `drover up --ha 3 --devices simulated` in a temp dir (three etcd
members, three servers, this machine's agent), and a client thread that
submits a job (`true`, one GPU of eight) over REST every --interval seconds to
whichever server answers (standbys do not listen). Each round finds the
leader (the server whose gRPC port accepts connections), faults it, and records:

  outage    the last submit the old leader acknowledged to the first the new
            leader acknowledged: the failover time, and the submit outage a
            client sees (resolution: --interval plus one request)
  takeover  the fault to the new leader's first acknowledged submit

Faults: `kill` is SIGKILL of the leader's process (the supervisor of `up
--ha` starts it again a second later, as a standby); `stop` is SIGSTOP of
the leader until a new leader acknowledged a submit, then SIGCONT (the old
leader must find itself fenced out and start over as a standby). `both`
alternates. Each round waits until three servers run again before the next.
A round whose new leader has not acknowledged within --round-timeout
seconds counts as timed out. Prints p50 / p90 / p99 / max per fault.

`--fault partition` runs elsewhere: the three servers and their etcd
members each on a host of its own (network namespaces, as
tests/netns/ha_chaos_test.py builds them; needs root and nftables), the
client on a fourth. Each round cuts the leader's host from the other two
server hosts with nftables (its etcd member loses the majority; the client
still reaches it), waits for the new leader's first acknowledged submit,
heals the partition and waits until the old member is back in etcd.

Needs build/apps/drover/drover and etcd (scripts/install-deps.sh). The goal
(p99 <= 2 s) lives in docs/performance.md, not here.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESTART_S = 0.9  # `up --ha` starts a dead server again 1 s after it died


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def server_pid(index):
    """The pid of server `index` of `up --ha` (its data dir is in its command line)."""
    needle = f"ha/server-{index} --grpc-listen".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if needle in cmdline:
            return int(entry)
    return None


class Acks:
    """Acknowledged submits, (monotonic seconds, server), from any thread."""

    def __init__(self):
        self.acks = []
        self.lock = threading.Lock()

    def add(self, t, server):
        with self.lock:
            self.acks.append((t, server))

    def last_ack(self):
        with self.lock:
            return self.acks[-1] if self.acks else None

    def acks_since(self, t):
        with self.lock:
            return [a for a in self.acks if a[0] > t]


def submit_forever(servers, token, interval, on_ack, context=None, stopping=lambda: False):
    """Submits a 1-GPU `true` to the servers in turn ("http(s)://host:port"),
    moving on at a failure; on_ack(monotonic time, server) per 201."""
    body = json.dumps({"spec": {"command": ["true"], "gpus": 1}}).encode()
    current = 0
    while not stopping():
        for attempt in range(len(servers)):
            server = servers[(current + attempt) % len(servers)]
            req = urllib.request.Request(f"{server}/api/v1/jobs", data=body, method="POST",
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=0.5, context=context) as resp:
                    if resp.status == 201:
                        on_ack(time.monotonic(), server)
                        current = (current + attempt) % len(servers)
                        break
            except Exception:  # noqa: BLE001 - refused, reset, timeout, 503: try the next server
                continue
        time.sleep(interval)


class Submitter(Acks, threading.Thread):
    """Submits forever to `up --ha`'s servers on loopback."""

    def __init__(self, servers, token, interval):
        Acks.__init__(self)
        threading.Thread.__init__(self, daemon=True)
        self.servers, self.token, self.interval = servers, token, interval
        self.stopping = False

    def run(self):
        submit_forever(self.servers, self.token, self.interval, self.add, stopping=lambda: self.stopping)


def client_main(servers, ca, token, interval):
    """--client: submits over HTTPS to the servers and prints "<monotonic
    seconds> <server>" per acknowledgement. Runs in the client's network
    namespace."""
    import ssl
    submit_forever([f"https://{s}" for s in servers], token, interval,
                   lambda t, server: print(f"{t:.6f} {server.removeprefix('https://')}", flush=True),
                   context=ssl.create_default_context(cafile=ca))


class ClientAcks(Acks, threading.Thread):
    """Reads a --client process's acknowledgements."""

    def __init__(self, proc):
        Acks.__init__(self)
        threading.Thread.__init__(self, daemon=True)
        self.proc = proc

    def run(self):
        for line in self.proc.stdout:
            t, server = line.split()
            self.add(float(t), server)


def partition_rounds(args):
    """--fault partition: servers on hosts of their own; each round cuts the
    leader's host from the other server hosts."""
    sys.path.insert(0, str(ROOT / "tests/netns"))
    import ha_netns  # noqa: PLC0415 - needs root; only this mode imports it
    rounds = []
    c = ha_netns.HaCluster(servers=3, nodes=1, gpus_per_node=8)
    try:
        c.start()
        http = {name: f"{h.ip}:{ha_netns.HTTP_PORT}" for name, h in c.servers.items()}
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{c.client.ns}", sys.executable, __file__, "--client",
                                 ",".join(http.values()), c.ca_file, c.token, str(args.interval)],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        client = ClientAcks(proc)
        client.start()
        while client.last_ack() is None:
            if proc.poll() is not None:
                sys.exit("the client exited")
            time.sleep(0.05)
        for n in range(args.rounds):
            leader = c.leader()
            if leader is None:
                sys.exit(f"round {n}: no leader")
            before = client.last_ack()
            t_fault = time.monotonic()
            c.isolate_server(leader)
            first = None
            while time.monotonic() - t_fault < args.round_timeout:
                new = [a for a in client.acks_since(t_fault) if a[1] != http[leader]]
                if new:
                    first = new[0]
                    break
                time.sleep(0.005)
            old = [a for a in client.acks_since(before[0] - 1e-9) if a[1] == http[leader]]
            last_old = old[-1][0] if old else before[0]
            r = {"round": n, "fault": "partition", "timed_out": first is None}
            if first is not None:
                r["outage_s"] = first[0] - last_old
                r["takeover_s"] = first[0] - t_fault
            rounds.append(r)
            print(f"round {n:3d} partition " + ("timed out" if first is None else
                  f"outage {r['outage_s']:.3f} s  takeover {r['takeover_s']:.3f} s"), flush=True)
            c.rejoin_server(leader)
            # The old member is back in etcd (it answers a read that needs
            # a quorum) and its server stands by again, before the next round.
            t_wait = time.monotonic()
            while time.monotonic() - t_wait < 30:
                try:
                    subprocess.run(["nsenter", f"--net=/run/netns/{c.client.ns}", "etcdctl", "--endpoints",
                                    f"{c.servers[leader].ip}:{ha_netns.ETCD_CLIENT_PORT}", "--command-timeout", "1s",
                                    "get", "x"], check=True, capture_output=True, timeout=5)
                    break
                except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                    time.sleep(0.1)
            time.sleep(1.5)  # it started over after its keep-alive failed, and campaigns
        proc.kill()
        print(f"\n{len(rounds)} rounds, {len(client.acks)} submits acknowledged in all")
    finally:
        c.close()
    return rounds


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--client":
        client_main(sys.argv[2].split(","), sys.argv[3], sys.argv[4], float(sys.argv[5]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--fault", choices=["kill", "stop", "both", "partition"], default="both")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between submits")
    ap.add_argument("--round-timeout", type=float, default=20)
    ap.add_argument("--port-base", type=int, default=27000, help="etcd from here, gRPC +100, HTTP +200")
    ap.add_argument("--json", help="write every round here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()

    binary = os.environ.get("DROVER_BINARY", str(ROOT / "build/apps/drover/drover"))
    if args.keep:
        os.environ["DROVER_NETNS_KEEP"] = "1"  # the hosts' logs, for --fault partition
    if args.fault == "partition":
        os.environ["DROVER_BINARY"] = binary
        rounds = partition_rounds(args)
        print_table(rounds)
        if args.json:
            Path(args.json).write_text(json.dumps(rounds, indent=1))
        return 1 if any(r["timed_out"] for r in rounds) else 0
    tmp = tempfile.mkdtemp(prefix="drover-ha-bench-")
    data = Path(tmp) / "data"
    etcd_port, grpc_port, http_port = args.port_base, args.port_base + 100, args.port_base + 200
    http_ports = [http_port + i for i in range(3)]
    grpc_ports = [grpc_port + i for i in range(3)]  # a standby's stays closed (its HTTP port answers 503)
    log = open(Path(tmp) / "up.log", "w")
    up = subprocess.Popen([binary, "up", "--ha", "3", "--ha-etcd-port", str(etcd_port), "--grpc-listen",
                           f"127.0.0.1:{grpc_port}", "--listen", f"127.0.0.1:{http_port}", "--data-dir", str(data),
                           "--devices", "simulated", "--log-level", "info"], stdout=log, stderr=subprocess.STDOUT)
    rounds = []
    try:
        deadline = time.monotonic() + 60
        while not (data / "endpoints.json").exists():
            if up.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"drover up --ha 3 did not start; see {tmp}/up.log")
            time.sleep(0.1)
        token = (data / "admin.token").read_text().strip()
        urls = [f"http://127.0.0.1:{p}" for p in http_ports]
        client = Submitter(urls, token, args.interval)
        client.start()
        while client.last_ack() is None:
            time.sleep(0.05)
        for n in range(args.rounds):
            fault = args.fault if args.fault != "both" else ("kill" if n % 2 == 0 else "stop")
            leaders = [i for i, p in enumerate(grpc_ports) if accepts(p)]
            if len(leaders) != 1:
                time.sleep(0.5)
                leaders = [i for i, p in enumerate(grpc_ports) if accepts(p)]
            if len(leaders) != 1:
                sys.exit(f"round {n}: {len(leaders)} servers listen, expected one leader")
            leader = leaders[0]
            pid = server_pid(leader)
            before = client.last_ack()
            t_fault = time.monotonic()
            os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            # A new leader's acknowledgement: from another server, or from the
            # same port once the old process cannot be the one answering (a
            # killed server comes back no sooner than a second later, and may
            # win the election again).
            def by_new_leader(a):
                return a[1] != urls[leader] or a[0] - t_fault > RESTART_S
            first = None
            while time.monotonic() - t_fault < args.round_timeout:
                new = [a for a in client.acks_since(t_fault) if by_new_leader(a)]
                if new:
                    first = new[0]
                    break
                time.sleep(0.005)
            if fault == "stop":
                os.kill(pid, signal.SIGCONT)
            # The old leader's last acknowledgement: answers read just after the
            # fault count too (sent before it was hit).
            old = [a for a in client.acks_since(before[0] - 1e-9) if not by_new_leader(a)]
            last_old = old[-1][0] if old else before[0]
            r = {"round": n, "fault": fault, "timed_out": first is None}
            if first is not None:
                r["outage_s"] = first[0] - last_old
                r["takeover_s"] = first[0] - t_fault
            rounds.append(r)
            print(f"round {n:3d} {fault:4s} " + ("timed out" if first is None else
                  f"outage {r['outage_s']:.3f} s  takeover {r['takeover_s']:.3f} s"), flush=True)
            # Three servers again (a killed one restarted, a stopped one
            # started over) and standing by, before the next round.
            t_wait = time.monotonic()
            while time.monotonic() - t_wait < 30:
                pids = [server_pid(i) for i in range(3)]
                if all(pids) and (fault == "stop" or pids[leader] != pid) and not accepts(grpc_ports[leader]):
                    break
                time.sleep(0.1)
            time.sleep(1.0)  # its campaign has started: it stands by
        client.stopping = True
    finally:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
        if not args.keep:
            subprocess.run(["rm", "-rf", tmp])
        else:
            print(f"kept {tmp}")

    print()
    print(f"{len(rounds)} rounds, {len(client.acks)} submits acknowledged in all")
    print_table(rounds)
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=1))
    return 1 if any(r["timed_out"] for r in rounds) else 0


def print_table(rounds):
    print("| fault | rounds | timed out | outage p50 | p90 | p99 | max | takeover p50 | p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for fault in ("kill", "stop", "partition"):
        rs = [r for r in rounds if r["fault"] == fault]
        ok = [r for r in rs if not r["timed_out"]]
        if not rs:
            continue
        if not ok:
            print(f"| {fault} | {len(rs)} | {len(rs)} | | | | | | |")
            continue
        o = [r["outage_s"] for r in ok]
        t = [r["takeover_s"] for r in ok]
        print(f"| {fault} | {len(rs)} | {len(rs) - len(ok)} | {percentile(o, 50):.3f} s | {percentile(o, 90):.3f} s | "
              f"{percentile(o, 99):.3f} s | {max(o):.3f} s | {percentile(t, 50):.3f} s | {percentile(t, 99):.3f} s |")


if __name__ == "__main__":
    sys.exit(main())
