#pragma once
// The script interface of fake_nvml.cc, a stand-in for libnvidia-ml.so.1
// built for nvml_test. Besides the NVML entry points the backend calls, the
// stand-in exports these C functions; the test reaches them with dlsym on
// the same library the backend opened (dlopen of one path gives one copy).
//
// After fake_nvml_reset() the library is uninitialized and has no devices;
// fake_nvml_set_device_count(n) adds n healthy "NVIDIA H100 80GB HBM3"
// devices (uuid "GPU-00000000-0000-0000-0000-00000000000<i>", PCI bus id
// "00000000:<i+0x10>:00.0" upper-case hex, 80 GiB, compute capability 9.0,
// NUMA node i / 4, idle telemetry). Not thread-safe; tests only.

#ifdef __cplusplus
extern "C" {
#endif

void fake_nvml_reset(void);
// Reports `count` from nvmlDeviceGetCount; creates min(count, 128) devices.
void fake_nvml_set_device_count(unsigned int count);
// field: "name", "uuid", "pci" (device's bus id string as NVML prints it),
// "driver" (device ignored).
void fake_nvml_set_string(int device, const char* field, const char* value);
// field: "memory_total", "memory_used", "util_gpu", "util_memory",
// "temperature", "power_mw", "power_limit_mw", "sm_clock", "memory_clock",
// "throttle", "ecc_corrected", "ecc_uncorrected", "cc_major", "cc_minor",
// "numa" (-1: no affinity known), "mig_mode", "supported_events",
// "row_remap_failure" (-1: not supported), "nvlink_replay", "nvlink_recovery",
// "nvlink_crc" (each active link counts the value).
void fake_nvml_set_value(int device, const char* field, long long value);
// Makes `function` (an exported NVML symbol name, e.g. "nvmlInit_v2") return
// `rc` for `device`, or for every device and device-less call when device < 0.
void fake_nvml_fail(const char* function, int device, int rc);
// Marks NVLink `link` of `device` active, its far end the GPU `remote`, or
// an NVSwitch when remote < 0.
void fake_nvml_set_nvlink(int device, unsigned int link, int remote);
// nvmlDeviceGetTopologyCommonAncestor(a, b) and (b, a) answer `level`;
// unset pairs answer NVML_ERROR_NOT_SUPPORTED.
void fake_nvml_set_topology(int a, int b, int level);
void fake_nvml_add_process(int device, unsigned int pid, unsigned long long used_memory);
void fake_nvml_add_mig(int device, const char* uuid, unsigned long long memory, unsigned int gpu_instance,
                       unsigned int compute_instance);
// Queues an event; nvmlEventSetWait delivers it when `device` registered `type`.
void fake_nvml_push_event(int device, unsigned long long type, unsigned long long data);

// Inspection.
int fake_nvml_init_count(void);             // nvmlInit* minus nvmlShutdown calls
int fake_nvml_calls(const char* function);  // calls of an exported NVML symbol since the reset
int fake_nvml_event_sets(void);             // event sets created and not yet freed
unsigned long long fake_nvml_registered_events(int device);
long long fake_nvml_last_wait_timeout(void);  // timeoutms of the last nvmlEventSetWait*, -1 if none

#ifdef __cplusplus
}
#endif
