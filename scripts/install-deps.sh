#!/usr/bin/env bash
# The one list of Debian packages Drover needs to build, test and run.
# Idempotent: installs only what is missing; uses sudo only when not root.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache git
  # wire API
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # libraries
  libboost-dev nlohmann-json3-dev libyaml-cpp-dev libspdlog-dev libfmt-dev
  libcli11-dev libsqlite3-dev sqlite3 libconcurrentqueue-dev
  # `drover images load` reads gzip archives
  zlib1g-dev
  # tokens, audit hashes, certificates
  libssl-dev
  # the job sandbox's system-call filter (src/drover/agent/seccomp_profile.h)
  libseccomp-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # fuzzing (scripts/fuzz.sh): clang 14; libFuzzer and the sanitizer runtimes
  # are in libclang-rt-14-dev, which clang only recommends (skipped below);
  # llvm-symbolizer (in llvm) makes the stack traces readable
  clang libclang-rt-14-dev llvm
  # devices: OpenCL loader, headers, and PoCL's real CPU device
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
  # devices: vendor headers (the libraries are dlopen'd at run time) and topology
  librocm-smi-dev libze-dev libhwloc-dev
  # integration tests
  curl procps
  # multi-host tests (tests/netns): network namespaces and veth pairs, nftables
  # drops, the harness (python3 stdlib); nsenter is in util-linux (essential)
  iproute2 nftables python3
  # HA control plane: a real etcd (the store contract suite, `drover up --ha`)
  etcd-server etcd-client
  # the gateway's benchmark baseline (bench/gateway_bench): a reverse proxy
  nginx
  # metrics: a real Prometheus scrapes /metrics; promtool checks the format
  # and unit-tests the alert rules (deploy/prometheus/); `drover up
  # --monitoring` starts Prometheus, Alertmanager (amtool checks its
  # configuration) and the node exporter
  prometheus prometheus-alertmanager prometheus-node-exporter
  # charts of `drover sim --out` (optional at run time: the report says when it is missing)
  gnuplot-nox
  # containers (docs/containers.md): the OCI runtime the agent drives (runc:
  # crun refuses these cgroup v1 hybrid hosts), the image store's tool
  # (skopeo pulls into a containers-storage), a registry, umoci and a static
  # busybox to build the tests' and the first session's example images,
  # podman for the benchmark's baseline
  runc skopeo umoci docker-registry busybox-static podman
  # distributed training (tests/netns/distributed_test.py, docs/distributed.md):
  # PyTorch with gloo on Debian's python3 (CPU only; torchrun)
  python3-torch
  # dashboard build (web/) and browser tests (tests/browser): node >= 18, headless chromium
  nodejs chromium
)
# npm: Debian's package on a clean Debian 12. Skipped where npm already exists
# (NodeSource's nodejs bundles npm and conflicts with Debian's npm package).
if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
