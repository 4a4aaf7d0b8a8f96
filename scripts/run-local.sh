#!/usr/bin/env bash
# `make run`: a one-machine cluster. This machine's devices (every vendor
# library that loads, and OpenCL, which PoCL provides on any machine) plus 4
# simulated nodes of 8 H100s kept busy by a live mixed workload
# (DROVER_WORKLOAD=none for an idle fleet), state in .drover/. Ctrl-C stops the server and agents; running jobs keep running
# under their supervisors and are adopted on the next start.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=./build/apps/drover/drover
DATA=${DROVER_DATA_DIR:-.drover}
GRPC=${DROVER_GRPC_LISTEN:-127.0.0.1:7070}
HTTP=${DROVER_LISTEN:-127.0.0.1:8080}

rm -f "$DATA/endpoints.json"
WORKLOAD=${DROVER_WORKLOAD:-mixed}

# The first session's example image, in a registry on loopback
# (docs/containers.md); nothing when its tools are missing.
REGISTRY=${DROVER_EXAMPLE_REGISTRY:-127.0.0.1:5000}
mkdir -p "$DATA"
registry_pid=$(./scripts/example-image.sh "$DATA" "$REGISTRY" || true)

"$BIN" up --data-dir "$DATA" --grpc-listen "$GRPC" --listen "$HTTP" --simulate 4 --workload "$WORKLOAD" \
  --insecure-registry "$REGISTRY" &
pid=$!
stop() {
  kill -TERM $pid 2>/dev/null
  wait $pid
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; fi
}
trap stop INT TERM

for _ in $(seq 1 100); do
  if [ -f "$DATA/endpoints.json" ]; then break; fi
  if ! kill -0 $pid 2>/dev/null; then wait $pid; exit $?; fi
  sleep 0.1
done

LOGIN_URL=$(cat "$DATA/dashboard-url" 2>/dev/null || echo "http://$HTTP/ui/")

cat <<MSG

  Drover is up (data in $DATA/; the admin token is $DATA/admin.token).
    dashboard $LOGIN_URL
              (a one-time login link; \`drover ui\` prints a new one)
    gRPC     $GRPC            (the CLI's --addr, or DROVER_ADDR)
    REST     http://$HTTP/api/v1/nodes
    metrics  http://$HTTP/metrics
    health   http://$HTTP/healthz   http://$HTTP/readyz

  Try:
    $BIN top
    $BIN nodes
    $BIN submit --gpus 2 --wait -- sh -c 'echo \$DROVER_GPU_IDS'
    $BIN submit --gpus 1 --image $REGISTRY/drover/example --wait
    $BIN jobs
    $BIN logs j-000001

  Ctrl-C stops it.

MSG
wait $pid
if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; fi
