#pragma once
// GPU metrics under dcgm-exporter's names and labels, so that the GPU
// dashboards people already run (Grafana's NVIDIA DCGM dashboard, ...) read
// Drover's /metrics unchanged. Used by the agent (its node's GPUs) and by
// the server (every node's GPUs, from the agents' heartbeats).
//
// Labels, as dcgm-exporter writes them: gpu, UUID, pci_bus_id, device
// ("nvidia0"), modelName, Hostname, DCGM_FI_DRIVER_VERSION; and, where
// dcgm-exporter writes the Kubernetes pod that holds the GPU, Drover's
// job_id and tenant (several, comma-separated, on a shared GPU; absent when
// free). ("job" itself is left to Prometheus: it names the scrape job.)
//
// Units are dcgm-exporter's: percent, degrees C, W, MiB, MHz.

#include <string>

#include "drover/common/metrics.h"
#include "drover/v1/common.pb.h"

namespace drover::rpc {

// Writes the series of one GPU of node `hostname` whose telemetry is
// gpu.telemetry(); fields the device does not report are left out.
void WriteGpuMetrics(const std::string& hostname, const v1::Gpu& gpu, metrics::Exposition& out);

}  // namespace drover::rpc
