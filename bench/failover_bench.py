#!/usr/bin/env python3
"""Failover latency under power loss, on real multi-host networking.

    sudo DROVER_BINARY=build/apps/drover/drover python3 bench/failover_bench.py [--rounds 50]
        [--nodes 3] [--round-timeout 20] [--json results.json]

A server and --nodes agents (one simulated GPU each) run in network
namespaces of their own (tests/netns/netns.py). Each round submits a 1-GPU
job (--restart-policy on-failure), waits until it runs on some node X, powers
X off (link down, SIGKILL of every process in X's namespace) and measures:

  failover  from the power-off to the first line the job's new process wrote
            on another node (its own `date +%s.%N`: no polling error)
  lost      from the power-off to the first poll of `drover nodes` that
            shows X Lost (polled every ~0.1 s: approximate)

then cancels the job, powers X on again (same data dir and node token) and
waits until X is Ready. A round whose job has not started elsewhere within
--round-timeout seconds counts as timed out and is left out of the
percentiles. Prints p50 / p90 / p99 / max; exits 1 when any round timed out.

Needs root, iproute2 and nftables (scripts/install-deps.sh). Timing goals
live in docs/performance.md, not here.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/netns"))
import netns  # noqa: E402

TERMINAL = {"Succeeded", "Failed", "Cancelled"}


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, -(-p * len(s) // 100) - 1))]


def one_round(c, i, timeout):
    out = c.dir / f"round-{i:03d}.log"
    job_id = c.submit("--gpus", "1", "--restart-policy", "on-failure", "--name", f"bench-{i}", out_file=out)
    (first, *_) = netns.wait_until(lambda: netns.read_runs(out), 30, what=f"job {job_id} to start")
    x = first.node
    t = c.power_off(x)
    lost_at = None
    new = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        moved = [r for r in netns.read_runs(out) if r.start > t and r.node != x]
        if moved:
            new = moved[0]
            break
        if lost_at is None and c.node_states().get(x) == "Lost":
            lost_at = time.time()
        time.sleep(0.05)
    result = {"round": i, "job": job_id, "node": x,
              "failover_s": None if new is None else new.start - t,
              "lost_s": None if lost_at is None else lost_at - t,
              "to": None if new is None else new.node}
    c.cli("cancel", job_id, json_out=False, check=False)
    c.power_on(x)
    c.wait_ready([x], 60)
    try:
        netns.wait_until(lambda: c.job(job_id).state in TERMINAL, 30, interval=0.1,
                         what=f"job {job_id} to end after its cancel")
    except TimeoutError as e:
        print(f"  warning: {e} (state {c.job(job_id).state})", flush=True)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--round-timeout", type=float, default=20.0,
                    help="seconds a job may take to start elsewhere after a power-off")
    ap.add_argument("--json", help="also write every round's numbers to this file")
    args = ap.parse_args()
    if args.nodes < 2:
        ap.error("--nodes must be at least 2: the job needs somewhere to go")

    results = []
    with netns.Cluster(nodes=args.nodes, gpus_per_node=1) as c:
        c.start()
        print(f"failover bench: {args.rounds} power-offs, {args.nodes} nodes, {c.binary}", flush=True)
        for i in range(args.rounds):
            r = one_round(c, i, args.round_timeout)
            results.append(r)
            lost = "-" if r["lost_s"] is None else f"{r['lost_s']:.3f}s"
            if r["failover_s"] is None:
                print(f"round {i:3d}: power-off of {r['node']}: job {r['job']} did not start on another node "
                      f"within {args.round_timeout:.0f}s (timed out; lost {lost})", flush=True)
            else:
                print(f"round {i:3d}: power-off of {r['node']}: job {r['job']} ran on {r['to']} after "
                      f"{r['failover_s']:.3f}s (lost {lost})", flush=True)

    done = [r["failover_s"] for r in results if r["failover_s"] is not None]
    timed_out = len(results) - len(done)
    print(f"\nfailover (power-off -> the job's own start on another node), {len(done)} of {len(results)} rounds:")
    if done:
        print("  p50 {:.3f}s  p90 {:.3f}s  p99 {:.3f}s  max {:.3f}s".format(
            percentile(done, 50), percentile(done, 90), percentile(done, 99), max(done)))
    lost = [r["lost_s"] for r in results if r["lost_s"] is not None]
    if lost:
        print("lost (power-off -> node shown Lost, +-0.1s):  p50 {:.3f}s  p90 {:.3f}s  max {:.3f}s".format(
            percentile(lost, 50), percentile(lost, 90), max(lost)))
    if timed_out:
        print(f"{timed_out} rounds timed out: the job never started on another node within "
              f"{args.round_timeout:.0f}s of its node's power-off")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 1 if timed_out else 0


if __name__ == "__main__":
    sys.exit(main())
