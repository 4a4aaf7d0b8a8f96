#!/usr/bin/env python3
"""Fails when a production file in the folders named below is over 800 lines
or holds a function over 150 lines (issue 36: the control loop, the agent and
the role wiring stay small enough to change), or when the quoted includes of
src/drover and apps/drover make a cycle. A function is counted from the
line that opens it at the file's top level (or one indent inside a class
body) to its closing brace; lambdas count toward the function that holds them.

  scripts/check_sizes.py [--root DIR] [--report]
"""
import argparse
import os
import re
import sys

FOLDERS = ["src/drover/server", "src/drover/agent", "apps/drover"]
FILES = ["src/drover/sched/preemption.cc", "src/drover/sched/preemption_search.cc"]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 150

# A line that opens a function body at depth 0 (or depth 1 in a class): a
# signature ending in "{" that is not a control statement, a namespace, a
# class, an enum, a struct or an initializer.
OPENER = re.compile(r"^(?P<indent> {0,2})(?!(namespace|class|struct|enum|union|extern|if|for|while|switch|do|else|return|case|template)\b)[^=;#/]*\)\s*(const\s*)?(noexcept\s*)?(override\s*)?(final\s*)?(->\s*[\w:<>, *&]+\s*)?(:\s*.*)?\{\s*$")


def production(path):
    base = os.path.basename(path)
    return path.endswith((".cc", ".h")) and not base.endswith(("_test.cc", "_test.h", "_fixture.h", "_test_support.h", "test_util.h"))


def functions(lines):
    """(name line, first line number, length) of each function body."""
    out = []
    i = 0
    while i < len(lines):
        m = OPENER.match(lines[i])
        if not m:
            i += 1
            continue
        depth = 0
        start = i
        for j in range(i, len(lines)):
            code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|//.*$', "", lines[j])
            depth += code.count("{") - code.count("}")
            if depth <= 0:
                out.append((lines[start].strip(), start + 1, j - start + 1))
                i = j + 1
                break
        else:
            i += 1
    return out


def include_cycles(root):
    """Cycles among the quoted includes ("drover/..." from src/, a bare name
    beside the including file)."""
    graph = {}
    for top in ("src/drover", "apps/drover"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if not n.endswith((".h", ".cc")):
                    continue
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, root)
                edges = []
                with open(path, encoding="utf-8") as f:
                    for inc in re.findall(r'^#include "([^"]+)"', f.read(), re.M):
                        target = os.path.join("src", inc) if inc.startswith("drover/") else os.path.join(os.path.dirname(rel), inc)
                        edges.append(os.path.normpath(target))
                graph[rel] = edges
    state, cycles = {}, []

    def visit(n, stack):
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, []):
            if state.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif not state.get(m):
                visit(m, stack)
        stack.pop()
        state[n] = 2

    sys.setrecursionlimit(10000)
    for n in sorted(graph):
        if not state.get(n):
            visit(n, [])
    return len(graph), cycles


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--report", action="store_true", help="print the largest file and function of each folder")
    args = ap.parse_args()
    paths = []
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(args.root, folder)):
            paths += [os.path.join(dirpath, n) for n in sorted(names)]
    paths += [os.path.join(args.root, f) for f in FILES if os.path.exists(os.path.join(args.root, f))]
    errors = []
    longest = (0, "")
    biggest = (0, "")
    for path in sorted(set(paths)):
        if not production(path):
            continue
        rel = os.path.relpath(path, args.root)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        n = len(lines) - (1 if lines and lines[-1] == "" else 0)
        biggest = max(biggest, (n, rel))
        if n > MAX_FILE_LINES:
            errors.append(f"{rel}: {n} lines, over {MAX_FILE_LINES}")
        for sig, line, length in functions(lines):
            longest = max(longest, (length, f"{rel}:{line} {sig[:80]}"))
            if length > MAX_FUNCTION_LINES:
                errors.append(f"{rel}:{line}: a function of {length} lines, over {MAX_FUNCTION_LINES}: {sig[:100]}")
    files, cycles = include_cycles(args.root)
    for c in cycles:
        errors.append("include cycle: " + " -> ".join(c))
    if args.report or errors:
        print(f"largest file: {biggest[1]} ({biggest[0]} lines)")
        print(f"longest function: {longest[1]} ({longest[0]} lines)")
        print(f"include graph: {files} files, {len(cycles)} cycles")
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
