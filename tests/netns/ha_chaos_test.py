#!/usr/bin/env python3
"""Chaos on an HA control plane (issue 16 part 5): three server hosts (etcd
member + drover server each), three agent hosts with one simulated GPU
each and a client host, in network namespaces of their own (ha_netns.py).

While a client submits a short job every 0.3 s and jobs keep starting and
ending, the test injects, one after the other:
  1. SIGKILL of the leading server;
  2. SIGSTOP of the leading server until another leads (longer than its
     lease), then SIGCONT: it must find itself deposed and start over;
  3. a partition of the leader's host from the other server hosts (its etcd
     member loses the majority; agents and the client still reach it);
  4. a partition of an agent from the leader only, until the agent's node
     leaves Ready.
After each it waits until a leader serves again (an acknowledged submit)
and every node is Ready. Then, with every acknowledged job finished, it
checks:
  - no acknowledged job was lost: each is known to the last leader and
    succeeded;
  - no job started twice for one attempt: a job's runs on a node are at
    most its attempts bound there, and a job's runs never overlap;
  - no GPU bound to two running jobs: runs on one node (one GPU) never
    overlap, judged from the jobs' own timestamps;
  - no write by a deposed leader accepted: in etcd's history (recorded from
    revision 1 by a watch), every revision that writes carries the epoch of
    its writer (store/leader.h, writer_key), and that epoch held the
    leader key at that revision.

    sudo DROVER_BINARY=build/apps/drover/drover python3 tests/netns/ha_chaos_test.py [-v]
    ctest -R netns_ha_chaos_test --output-on-failure

Needs root, iproute2, nftables and etcd-server. DROVER_NETNS_KEEP=1 keeps
every log (and etcd's history) in the temp dir.
"""

import sys
import threading
import time
import unittest
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ha_netns  # noqa: E402
import netns  # noqa: E402

# A job: its start, five beats 100 ms apart and its end, each a line
# "<job id> <node> <pid> <start|beat|end> <unix time>".
JOB_SCRIPT = r'''run="$DROVER_JOB_ID $DROVER_NODE $$"
echo "$run start $(date +%s.%N)" >> "$OUT"
trap 'echo "$run end $(date +%s.%N)" >> "$OUT"; exit 143' TERM INT
i=0
while [ $i -lt 5 ]; do echo "$run beat $(date +%s.%N)" >> "$OUT"; sleep 0.1; i=$((i+1)); done
echo "$run end $(date +%s.%N)" >> "$OUT"'''

RECOVERY_TIMEOUT = 30  # s: a leader serving again after a fault
DRAIN_TIMEOUT = 120  # s: every acknowledged job finished


@dataclass
class Run:
    job: str
    node: str
    pid: int
    start: float
    last: float

    def __str__(self):
        return f"{self.job} on {self.node} pid {self.pid}: {self.start:.3f} .. {self.last:.3f}"


def read_runs(path):
    runs = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue  # a line being written
        job, node, pid, kind, t = parts
        t = float(t)
        r = runs.setdefault((job, node, pid), Run(job, node, int(pid), t, t))
        if kind == "start":
            r.start = t
        r.last = max(r.last, t)
    return sorted(runs.values(), key=lambda r: r.start)


class Submitter(threading.Thread):
    """Submits the job every 0.3 s from the client host, recording each
    acknowledged id with the time of its answer."""

    def __init__(self, cluster, out):
        super().__init__(daemon=True)
        self.c, self.out = cluster, out
        self.acked = []  # [(time, job id)]
        self.failed = 0
        self.done = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        while not self.done.is_set():
            job = self.c.cli("submit", "--gpus", "1", "--restart-policy", "on-failure", "--max-restarts", "5",
                             "-e", f"OUT={self.out}", "--", "sh", "-c", JOB_SCRIPT, check=False)
            with self.lock:
                if job is not None:
                    self.acked.append((time.time(), job["id"]))
                else:
                    self.failed += 1
            self.done.wait(0.3)

    def acked_after(self, t):
        with self.lock:
            return [j for at, j in self.acked if at > t]

    def ids(self):
        with self.lock:
            return [j for _, j in self.acked]


class ChaosTest(unittest.TestCase):
    def setUp(self):
        self.c = ha_netns.HaCluster(servers=3, nodes=3, gpus_per_node=1)
        self.addCleanup(self.c.close)
        self.c.start()
        self.out = self.c.dir / "jobs.log"
        self.client = Submitter(self.c, self.out)
        self.addCleanup(self.client.done.set)
        self.report = []

    def wait(self, pred, timeout, what):
        try:
            return netns.wait_until(pred, timeout, interval=0.1, what=what)
        except TimeoutError as e:
            self.fail(f"{e}\nleader: {self.c.leader()}; nodes: {self.c.node_states(reasons=True)}\n"
                      + "\n".join(f"--- server {s}:\n{self.c.log_tail(s)}" for s in self.c.servers))

    def leader(self):
        return self.wait(self.c.leader, RECOVERY_TIMEOUT, "a leader")

    def recovered(self, fault, t, old_leader=None):
        """Waits until a leader (not old_leader) holds the key, a submit
        after `t` was acknowledged and every node is Ready; records the
        client's outage."""
        new = self.wait(lambda: (l := self.c.leader()) and l != old_leader and l, RECOVERY_TIMEOUT,
                        f"a leader other than {old_leader} after {fault}")
        first = self.wait(lambda: self.client.acked_after(t), RECOVERY_TIMEOUT,
                          f"a submit acknowledged after {fault}")
        ack = min(at for at, j in self.client.acked if j in first)
        self.wait(lambda: all(s == "Ready" for s in self.c.node_states().values()) and self.c.node_states(),
                  RECOVERY_TIMEOUT, f"every node Ready after {fault}")
        self.report.append(f"{fault}: leader {old_leader or '-'} -> {new}, first acknowledged submit "
                           f"{ack - t:.2f} s after the fault")
        return new

    def test_faults_keep_the_invariants(self):
        c = self.c
        self.client.start()
        self.wait(lambda: len(read_runs(self.out)) >= 3, 30, "the first jobs to run")

        # 1. SIGKILL of the leader; it comes back as a standby.
        old = self.leader()
        t = c.kill_server(old)
        self.recovered("SIGKILL of the leader", t, old)
        c.start_drover_server(old)

        # 2. SIGSTOP of the leader until another leads, then SIGCONT: it
        # wakes believing it leads, and must not write or tell agents.
        old = self.leader()
        started_over = c.log_text(old).count("starting over as a standby")
        t = c.stop_server(old)
        self.recovered("SIGSTOP of the leader", t, old)
        t_cont = time.time()
        c.cont_server(old)
        # The woken leader finds itself deposed and starts over (same pid).
        self.wait(lambda: c.log_text(old).count("starting over as a standby") > started_over, RECOVERY_TIMEOUT,
                  f"the woken leader {old} to start over as a standby")
        self.wait(lambda: self.client.acked_after(t_cont + 1), RECOVERY_TIMEOUT, "submits after the SIGCONT")

        # 3. The leader's host cut from the other server hosts.
        old = self.leader()
        t = c.isolate_server(old)
        self.recovered("partition of the leader from the etcd majority", t, old)
        c.rejoin_server(old)

        # 4. An agent cut from the leader only.
        ldr = self.leader()
        node = "n1"
        t = time.time()
        c.drop_between(node, ldr)
        self.wait(lambda: c.node_states().get(node, "Ready") != "Ready", RECOVERY_TIMEOUT,
                  f"node {node} to leave Ready when cut from the leader")
        c.undrop_between(node, ldr)
        self.recovered(f"partition of agent {node} from the leader", t, None)

        # Finish: the client stops, every acknowledged job ends.
        t_end = time.time()
        self.wait(lambda: self.client.acked_after(t_end), RECOVERY_TIMEOUT, "a submit after the last fault healed")
        self.client.done.set()
        self.client.join(15)
        acked = self.client.ids()
        self.assertGreaterEqual(len(acked), 5, "the client hardly submitted")
        views = {}

        def finished():
            for j in acked:
                if j not in views or views[j].state not in ("Succeeded", "Failed", "Cancelled"):
                    got = c.cli("job", j, check=False)
                    if got is None:
                        return False
                    views[j] = netns.job_view(got)
                    if views[j].state not in ("Succeeded", "Failed", "Cancelled"):
                        return False
            return True

        self.wait(finished, DRAIN_TIMEOUT, f"the {len(acked)} acknowledged jobs to finish")
        runs = read_runs(self.out)
        sys.stderr.write("\n" + "\n".join(self.report) + f"\nacknowledged {len(acked)} submits "
                         f"({self.client.failed} failed), {len(runs)} runs\n")

        # No acknowledged job lost: each known to the leader, and done.
        self.assertEqual([j for j in acked if views[j].state != "Succeeded"], [],
                         {j: views[j].raw.get("status") for j in acked if views[j].state != "Succeeded"})
        ran = {r.job for r in runs}
        self.assertEqual([j for j in acked if j not in ran], [], "acknowledged jobs that never ran")

        # No job started twice for one attempt.
        by_job = defaultdict(list)
        for r in runs:
            by_job[r.job].append(r)
        for j, rs in by_job.items():
            v = views.get(j) or netns.job_view(c.cli("job", j))
            attempts = v.attempts or [{"nodes": v.nodes}]
            for node in {r.node for r in rs}:
                on_node = [r for r in rs if r.node == node]
                bound = sum(1 for a in attempts if node in a.get("nodes", []))
                self.assertLessEqual(len(on_node), bound,
                                     f"job {j} ran {len(on_node)} times on {node} in {bound} attempts there:\n"
                                     + "\n".join(map(str, on_node)) + f"\nattempts: {attempts}")
            self.assertEqual(self.overlaps(rs), [], f"runs of job {j} overlap")

        # No GPU bound to two running jobs: one GPU per node.
        for node in c.nodes:
            self.assertEqual(self.overlaps([r for r in runs if r.node == node]), [],
                             f"two jobs ran at once on {node}'s one GPU")

        self.check_writes_were_fenced()

    @staticmethod
    def overlaps(runs):
        runs = sorted(runs, key=lambda r: r.start)
        return [(str(a), str(b)) for i, a in enumerate(runs) for b in runs[i + 1:] if b.start < a.last]

    def check_writes_were_fenced(self):
        events = self.c.history()
        tenure = {}  # epoch -> [first revision, revision its key was deleted (None: still held)]
        by_rev = defaultdict(list)
        for rev, kind, key, value, create in events:
            by_rev[rev].append((kind, key, value))
            if key == ha_netns.LEADER_KEY:
                if kind == "put":
                    tenure.setdefault(create, [create, None])
                else:
                    held = [e for e, (_, end) in tenure.items() if end is None]
                    for e in held:
                        tenure[e][1] = rev
        self.assertGreaterEqual(len(tenure), 4, f"leaderships seen in etcd's history: {tenure}")
        bad, written = [], defaultdict(int)
        for rev, evs in sorted(by_rev.items()):
            stamps = [v for kind, k, v in evs if k == ha_netns.WRITER_KEY and kind == "put"]
            data_puts = [k for kind, k, v in evs if kind == "put" and k not in (ha_netns.LEADER_KEY, ha_netns.WRITER_KEY)]
            if not stamps:
                if data_puts:
                    bad.append(f"revision {rev} puts {data_puts[:3]} without a writer's epoch")
                continue
            epoch = int(stamps[0])
            written[epoch] += 1
            start, end = tenure.get(epoch, (None, None))
            if start is None or rev < start or (end is not None and rev >= end):
                bad.append(f"revision {rev} was written by epoch {epoch}, which held the leader key "
                           f"over {start}..{end}")
        sys.stderr.write(f"etcd history: {len(by_rev)} revisions; writes by epoch {dict(written)}; "
                         f"tenures {tenure}\n")
        self.assertEqual(bad, [], "writes not fenced by the leadership that made them")


if __name__ == "__main__":
    unittest.main(verbosity=2)
