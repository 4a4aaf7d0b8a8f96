#!/usr/bin/env python3
"""The alert rules of deploy/prometheus/ as ctest runs them (make test):

  1. `promtool check rules` on every rules file;
  2. `promtool test rules` on every unit test file (deploy/prometheus/tests/);
  3. every alert has a test that expects it firing and one that expects it
     silent (an `exp_alerts: []` for its name), and a runbook section in
     docs/alerts.md (a `### <AlertName>` heading) that its `runbook`
     annotation points to;
  4. `promtool check config --syntax-only` on the real cluster's
     deploy/prometheus/prometheus.yml;
  5. `amtool check-config` on deploy/prometheus/alertmanager.yml, and its
     routes: page, ticket and info go where the file says.

Needs promtool (Debian's prometheus) and amtool (prometheus-alertmanager);
scripts/install-deps.sh installs both. Fails, never skips, without them.

  tests/alerts/check_alert_rules.py [--root DIR]
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys


def run(cmd, cwd, stderr=subprocess.STDOUT):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True)
    return p.returncode, p.stdout


def alerts_in(rules_text):
    """(alert name, runbook anchor) for each alert rule, in order."""
    out = []
    for block in re.split(r"\n\s*- (?=alert:|record:)", rules_text):
        m = re.match(r"alert:\s*(\S+)", block)
        if not m:
            continue
        rb = re.search(r"runbook:\s*docs/alerts\.md#(\S+)", block)
        out.append((m.group(1), rb.group(1) if rb else None))
    return out


def cases_in(test_text):
    """{alert name: (fires, silent)} over the alert_rule_test entries."""
    cases = {}
    for m in re.finditer(r"alertname:\s*(\S+)\s*\n\s*exp_alerts:\s*(\[\])?", test_text):
        fires, silent = cases.get(m.group(1), (False, False))
        if m.group(2):
            silent = True
        else:
            fires = True
        cases[m.group(1)] = (fires, silent)
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    prom = os.path.join(root, "deploy", "prometheus")
    failures = []
    for tool in ("promtool", "amtool"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (scripts/install-deps.sh installs it)")
            return 1

    rules = sorted(glob.glob(os.path.join(prom, "rules", "*.yml")))
    tests = sorted(glob.glob(os.path.join(prom, "tests", "*.test.yml")))
    if not rules or not tests:
        print(f"no rules or no tests under {prom}")
        return 1
    rc, out = run(["promtool", "check", "rules"] + rules, prom)
    if rc != 0:
        failures.append("promtool check rules:\n" + out)
    rc, out = run(["promtool", "test", "rules"] + [os.path.basename(t) for t in tests], os.path.join(prom, "tests"))
    if rc != 0:
        failures.append("promtool test rules:\n" + out)

    alerts = []
    for r in rules:
        with open(r) as f:
            alerts += alerts_in(f.read())
    cases = {}
    for t in tests:
        with open(t) as f:
            for name, (fires, silent) in cases_in(f.read()).items():
                a, b = cases.get(name, (False, False))
                cases[name] = (a or fires, b or silent)
    with open(os.path.join(root, "docs", "alerts.md")) as f:
        headings = {m.group(1) for m in re.finditer(r"^### (\S+)", f.read(), re.M)}
    for name, anchor in dict(alerts).items():
        fires, silent = cases.get(name, (False, False))
        if not fires:
            failures.append(f"alert {name}: no test expects it to fire")
        if not silent:
            failures.append(f"alert {name}: no test expects it silent (exp_alerts: [])")
        if name not in headings:
            failures.append(f"alert {name}: docs/alerts.md has no '### {name}' section")
        if anchor != name.lower():
            failures.append(f"alert {name}: its runbook annotation should be docs/alerts.md#{name.lower()}")
    for name in cases:
        if name not in dict(alerts):
            failures.append(f"a test names alert {name}, which no rules file has")

    rc, out = run(["promtool", "check", "config", "--syntax-only", os.path.join(prom, "prometheus.yml")], prom)
    if rc != 0:
        failures.append("promtool check config prometheus.yml:\n" + out)

    am = os.path.join(prom, "alertmanager.yml")
    rc, out = run(["amtool", "check-config", am], prom)
    if rc != 0:
        failures.append("amtool check-config:\n" + out)
    for labels, receiver in ((["severity=page", "alertname=DroverNodeLost"], "pager"),
                             (["severity=ticket", "alertname=DroverNodeSuspect"], "tickets"),
                             (["severity=info", "alertname=DroverNodeDrained"], "null")):
        # (amtool warns on stderr that --config.file overrides its URL)
        rc, out = run(["amtool", "config", "routes", "test", "--config.file=" + am] + labels, prom,
                      stderr=subprocess.DEVNULL)
        got = out.strip().splitlines()[-1] if out.strip() else ""
        if rc != 0 or got != receiver:
            failures.append(f"alertmanager.yml routes {labels} to '{got}', expected '{receiver}'")

    for f in failures:
        print("FAIL: " + f)
    print(f"{len(dict(alerts))} alerts, {len(tests)} test files: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
