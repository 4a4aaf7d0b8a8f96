#!/usr/bin/env python3
"""A 2-node PyTorch job on a real multi-host network (issue 39, the launch
contract; docs/distributed.md): a Drover server and two agents, each in a
network namespace of its own (netns.py), one simulated GPU per node, so
that `drover submit --replicas 2 --gpus 1` puts one replica on each.

Each job's ranks join a gloo process group through what Drover gave them
and all-reduce rank + 1: every rank must print the sum, 3. Once under
torchrun (Debian's, which reads PET_*), once as a plain script reading
MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE. Each rank also prints what
its node's name resolves to and its own host name, so the hosts file and
the host name the agent gives the job are checked too.

    sudo DROVER_BINARY=build/apps/drover/drover python3 tests/netns/distributed_test.py [-v]
    ctest -R netns_distributed_test --output-on-failure

Needs root and network namespaces (skipped, exit 77, with the reason where
there are none), and python3-torch on /usr/bin/python3 (fails without it:
scripts/install-deps.sh installs it).
"""

import re
import subprocess
import sys
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import netns  # noqa: E402

PYTHON = "/usr/bin/python3"  # Debian's, where python3-torch is (not a pyenv one first on PATH)
TORCHRUN = "/usr/bin/torchrun"
JOB_TIMEOUT = 90

TRAIN = r'''
import os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
peers = " ".join(f"{n}={socket.gethostbyname(n)}" for n in os.environ["PEER_NAMES"].split(","))
line = (f"rank {rank} of {world} sum {t.item():g} master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
        f"host {socket.gethostname()} resolves {peers} ifname {os.environ.get('GLOO_SOCKET_IFNAME', '')}")
print(line, flush=True)
# Also where the test reads every rank's (the server keeps replica 0's log).
with open(os.environ["OUT"], "a") as f:
    f.write(line + "\n")
dist.destroy_process_group()
'''

LINE = re.compile(r"rank (\d+) of (\d+) sum (\S+) master (\S+):(\d+) host (\S+) resolves (.*) ifname (\S*)$")


class DistributedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        r = subprocess.run([PYTHON, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{PYTHON} cannot import torch with gloo (install python3-torch: "
                               f"scripts/install-deps.sh): {r.stderr.strip()[-400:]}")
        cls.c = netns.Cluster(nodes=2, gpus_per_node=1)
        try:
            cls.c.start()
        except Exception:
            cls.c.close()
            raise
        cls.script = cls.c.dir / "train.py"
        cls.script.write_text(TRAIN)
        cls.script.chmod(0o644)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def run_job(self, *command):
        self.out = self.c.dir / f"ranks-{len(list(self.c.dir.glob('ranks-*')))}.log"
        job = self.c.cli("submit", "--replicas", "2", "--gpus", "1", "-e", "PEER_NAMES=n1,n2", "-e",
                         f"OUT={self.out}", "--", *command)
        job_id = job["id"]

        def ended():
            v = self.c.job(job_id)
            return v if v.state in ("Succeeded", "Failed", "Cancelled") else None

        try:
            view = netns.wait_until(ended, JOB_TIMEOUT, interval=0.2, what=f"job {job_id} to end")
        except TimeoutError as e:
            self.fail(f"{e}: {self.c.job(job_id).raw}\n{self.logs(job_id)}")
        self.assertEqual(view.state, "Succeeded", f"{view.raw}\n{self.logs(job_id)}")
        return job_id, view

    def logs(self, job_id):
        """Replica 0's log through the server, as a user reads it, and the
        lines every rank wrote to the shared file, by rank."""
        out = {"log": self.c.cli("logs", job_id, json_out=False, check=False) or ""}
        try:
            for line in self.out.read_text().splitlines():
                m = LINE.search(line)
                if m:
                    out.setdefault(int(m.group(1)), []).append(m)
        except FileNotFoundError:
            pass
        return out

    def check_ranks(self, job_id, view):
        nodes = view.nodes  # replica order
        self.assertEqual(sorted(nodes), ["n1", "n2"], view.raw)
        ip = {n: self.c.nodes[n].ip for n in ("n1", "n2")}
        attempt = view.attempts[-1]
        port = int(attempt.get("masterPort", 0))
        self.assertTrue(29400 <= port <= 29499, attempt)
        self.assertEqual(attempt.get("hosts"), [ip[n] for n in nodes], attempt)
        logs = self.logs(job_id)
        # Rank 0 printed its sum to its log, which `drover logs` shows.
        self.assertTrue(any(m and m.group(1) == "0" and m.group(3) == "3" for m in map(LINE.search,
                            logs["log"].splitlines())), f"drover logs {job_id}:\n{logs['log']}")
        for replica in (0, 1):
            lines = logs.get(replica, [])
            self.assertEqual(len(lines), 1, f"rank {replica}'s lines: {logs}")
            rank, world, total, maddr, mport, host, resolves, ifname = lines[0].groups()
            self.assertEqual((int(rank), int(world), float(total)), (replica, 2, 3.0), lines[0].group(0))
            self.assertEqual((maddr, int(mport)), (ip[nodes[0]], port), lines[0].group(0))
            self.assertEqual(host, nodes[replica], "the job's host name is its node's name")
            self.assertEqual(resolves, f"n1={ip['n1']} n2={ip['n2']}", "each node's name resolves to its address")
            self.assertEqual(ifname, "eth0", "gloo is told the interface of the advertised address")

    def test_torchrun(self):
        job_id, view = self.run_job(TORCHRUN, "--redirects", "1", "--tee", "1", str(self.script))
        self.check_ranks(job_id, view)

    def test_plain_script(self):
        job_id, view = self.run_job(PYTHON, str(self.script))
        self.check_ranks(job_id, view)


if __name__ == "__main__":
    try:
        netns.Cluster(nodes=0).close()
    except netns.NetnsUnavailable as e:
        print(f"SKIPPED: {e}", file=sys.stderr)
        sys.exit(77)
    unittest.main(verbosity=2)
