#!/usr/bin/env python3
"""Clang's thread-safety analysis over the sources that use drover/common/mutex.h.

    scripts/check-thread-safety.py [-B BUILD_DIR] [--all] [-j N] [-v] [FILE.cc ...]

g++ builds Drover; its DROVER_GUARDED_BY etc. expand to nothing there. This
runs `clang++ -fsyntax-only -Wthread-safety -Werror` over:
  - every .cc under src/ and apps/ that uses the annotations (or includes
    mutex.h), and
  - every .cc that includes a header that does and names one of the members
    it guards or their locks (a file that names none cannot touch one);
    --all takes every .cc that includes such a header.
Flags come from BUILD_DIR/compile_commands.json (default: build/), so the
generated protobuf headers must exist (any build makes them). Only the
thread-safety warnings are on: the build's own warnings are g++'s business.
Files run in parallel (-j, default: the number of CPUs). Exit status 1 when
any file has a warning; the `thread_safety` test of `make test` runs this.
"""

import argparse
import concurrent.futures
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTEX_H = os.path.join(ROOT, "src", "drover", "common", "mutex.h")
USES = re.compile(r'\bDROVER_(?:GUARDED_BY|PT_GUARDED_BY|REQUIRES|REQUIRES_SHARED|EXCLUDES|ACQUIRE|ACQUIRE_SHARED|'
                  r'RELEASE|RELEASE_SHARED|RELEASE_GENERIC|TRY_ACQUIRE|ASSERT_CAPABILITY|RETURN_CAPABILITY|'
                  r'ACQUIRED_BEFORE|ACQUIRED_AFTER|CAPABILITY|SCOPED_CAPABILITY)\b|#include "drover/common/mutex\.h"')
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)
GUARDED = re.compile(r"(\w+)(?:\[[^\]]*\])?\s+DROVER_(?:PT_)?GUARDED_BY\(([^)]*)\)")


def find_clang():
    for name in (os.environ.get("CLANGXX", ""), "clang++-14", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def sources():
    for top in ("src", "apps"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".h", ".cc")):
                    yield os.path.join(dirpath, n)


def units(db, take_all):
    """The .cc files to analyse (see the module comment)."""
    annotated = {p: read(p) for p in sources() if p != MUTEX_H and USES.search(read(p))}
    headers = {}  # the include spelling -> (path, names of what it guards and the locks)
    for p, text in annotated.items():
        if not p.endswith(".h"):
            continue
        names = set()
        for member, lock in GUARDED.findall(text):
            names.add(member)
            names.update(re.findall(r"\w+", lock))
        words = re.compile(r"\b(?:%s)\b" % "|".join(sorted(names))) if names else None
        headers[os.path.relpath(p, os.path.join(ROOT, "src"))] = (p, words)
        if p.startswith(os.path.join(ROOT, "apps") + os.sep):  # included relative to its own folder
            headers[os.path.basename(p)] = (p, words)
    chosen = {p for p in annotated if p.endswith(".cc")}
    covered = set()  # headers included by a chosen file: their inline code is analysed there
    first = {}  # header -> the first file that includes it
    tops = tuple(os.path.join(ROOT, t) + os.sep for t in ("src", "apps"))
    for path in sorted(db):
        if not path.startswith(tops) or not path.endswith(".cc"):
            continue
        text = read(path)
        mine = [headers[i] for i in INCLUDE.findall(text) if i in headers]
        for h, _ in mine:
            first.setdefault(h, path)
        # Without --all: only a file that names a guarded member or its lock can touch one.
        if path in chosen or any(take_all or (words is not None and words.search(text)) for _, words in mine):
            chosen.add(path)
            covered.update(h for h, _ in mine)
    chosen.update(f for h, f in first.items() if h not in covered)
    return sorted(chosen)


def command(entry, clang):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out = [clang]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a.startswith("-W") or a == "-fPIC":
            continue  # g++'s warnings; -Werror below applies to the analysis only
        out.append(a)
    # Boost.Asio turns its coroutines on for g++, and for clang only with libc++.
    # -Wignored-attributes: a GUARDED_BY on a local variable is silently dropped otherwise.
    out[1:1] = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Wignored-attributes", "-Werror",
                "-DBOOST_ASIO_HAS_CO_AWAIT", "-DBOOST_ASIO_HAS_STD_COROUTINE"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", "-B", default=os.path.join(ROOT, "build"), help="where compile_commands.json is")
    ap.add_argument("files", nargs="*", help="only these .cc files")
    ap.add_argument("--all", action="store_true", help="every .cc that includes an annotated header")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    ap.add_argument("-v", action="store_true", help="print each file's time")
    opts = ap.parse_args()

    clang = find_clang()
    if not clang:
        print("check-thread-safety: no clang++ (scripts/install-deps.sh installs clang 14)", file=sys.stderr)
        return 1
    ccdb = os.path.join(opts.build_dir, "compile_commands.json")
    if not os.path.exists(ccdb):
        print(f"check-thread-safety: {ccdb} not found (configure with cmake --preset default first)", file=sys.stderr)
        return 1
    db = {}
    with open(ccdb, encoding="utf-8") as f:
        for e in json.load(f):
            path = os.path.normpath(os.path.join(e["directory"], e["file"]))
            db.setdefault(path, e)  # a file built into two targets: one set of flags is enough
    todo = [os.path.abspath(f) for f in opts.files] if opts.files else units(db, opts.all)
    missing = [f for f in todo if f not in db]
    if missing:
        print("check-thread-safety: not in compile_commands.json: " + " ".join(missing), file=sys.stderr)
        return 1

    start = time.monotonic()

    def run(path):
        e = db[path]
        t = time.monotonic()
        p = subprocess.run(command(e, clang), cwd=e["directory"], capture_output=True, text=True)
        if opts.v:
            print(f"{time.monotonic() - t:5.1f}s {os.path.relpath(path, ROOT)}", flush=True)
        return path, p.returncode, p.stdout + p.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.j)) as pool:
        for path, rc, text in pool.map(run, todo):
            if rc != 0:
                failed += 1
                print(f"FAIL {os.path.relpath(path, ROOT)}\n{text}", end="" if text.endswith("\n") else "\n")
    secs = time.monotonic() - start
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"check-thread-safety: {len(todo)} files, {failed} failed, {secs:.1f}s with -j{opts.j} "
          f"({cpu.ru_utime + cpu.ru_stime:.0f}s of CPU; {clang})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
