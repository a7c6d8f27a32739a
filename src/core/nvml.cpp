// NVML loaded with dlopen: the few types and entry points gpubench uses, declared to match the
// NVML C ABI (nvml.h) so that no NVML header or library is needed at build time.
#include "gpubench/core/nvml.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace gpubench {

namespace {

// ---- The NVML C ABI (values and layouts as in nvml.h) ----
using nvmlReturn_t = int;
using nvmlDevice_t = nvml::Device;
using nvmlEventSet_t = nvml::EventSet;
using nvmlEnableState_t = unsigned;  // NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr unsigned NVML_FEATURE_ENABLED = 1;
constexpr unsigned NVML_TEMPERATURE_GPU = 0;              // nvmlTemperatureSensors_t
constexpr unsigned NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;  // nvmlMemoryErrorType_t
constexpr unsigned NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr unsigned NVML_VOLATILE_ECC = 0;  // nvmlEccCounterType_t
constexpr unsigned NVML_AGGREGATE_ECC = 1;
constexpr unsigned NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1;  // nvmlTemperatureThresholds_t
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;
constexpr unsigned NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON = 90;
constexpr unsigned NVML_FI_DEV_NVLINK_LINK_COUNT = 91;
constexpr std::size_t NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;

// nvmlPciInfo_t as filled by nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2.
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain;
  unsigned bus;
  unsigned device;
  unsigned pciDeviceId;
  unsigned pciSubSystemId;
  char busId[32];
};
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t must match the NVML ABI");

union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  unsigned short usVal;
};
constexpr unsigned NVML_VALUE_TYPE_DOUBLE = 0;
constexpr unsigned NVML_VALUE_TYPE_UNSIGNED_INT = 1;
constexpr unsigned NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
constexpr unsigned NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
constexpr unsigned NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
constexpr unsigned NVML_VALUE_TYPE_SIGNED_INT = 5;
constexpr unsigned NVML_VALUE_TYPE_UNSIGNED_SHORT = 6;

struct nvmlFieldValue_t {
  unsigned fieldId;
  unsigned scopeId;
  long long timestamp;
  long long latencyUsec;
  unsigned valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t must match the NVML ABI");

// nvmlProcessInfo_t (v2, the layout nvmlDeviceGetComputeRunningProcesses_v3 fills).
struct nvmlProcessInfo_t {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t must match the NVML ABI");

// nvmlEventData_t as filled by nvmlEventSetWait_v2.
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned gpuInstanceId;
  unsigned computeInstanceId;
};
static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t must match the NVML ABI");

// Every entry point, as name + function type. A missing one (older driver) stays null.
#define GPB_NVML_SYMBOLS(X)                                                                     \
  X(nvmlErrorString, const char*(nvmlReturn_t))                                                 \
  X(nvmlInit_v2, nvmlReturn_t())                                                                \
  X(nvmlSystemGetDriverVersion, nvmlReturn_t(char*, unsigned))                                  \
  X(nvmlDeviceGetHandleByPciBusId_v2, nvmlReturn_t(const char*, nvmlDevice_t*))                 \
  X(nvmlDeviceGetHandleByUUID, nvmlReturn_t(const char*, nvmlDevice_t*))                        \
  X(nvmlDeviceGetPciInfo_v3, nvmlReturn_t(nvmlDevice_t, nvmlPciInfo_t*))                        \
  X(nvmlDeviceGetClockInfo, nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*))                    \
  X(nvmlDeviceGetMaxClockInfo, nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*))                 \
  X(nvmlDeviceGetTemperature, nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*))                  \
  X(nvmlDeviceGetPowerUsage, nvmlReturn_t(nvmlDevice_t, unsigned*))                             \
  X(nvmlDeviceGetEnforcedPowerLimit, nvmlReturn_t(nvmlDevice_t, unsigned*))                     \
  X(nvmlDeviceGetCurrentClocksEventReasons, nvmlReturn_t(nvmlDevice_t, unsigned long long*))    \
  X(nvmlDeviceGetCurrentClocksThrottleReasons, nvmlReturn_t(nvmlDevice_t, unsigned long long*)) \
  X(nvmlDeviceGetEccMode, nvmlReturn_t(nvmlDevice_t, nvmlEnableState_t*, nvmlEnableState_t*))   \
  X(nvmlDeviceGetTotalEccErrors,                                                                \
    nvmlReturn_t(nvmlDevice_t, unsigned, unsigned, unsigned long long*))                        \
  X(nvmlDeviceGetPersistenceMode, nvmlReturn_t(nvmlDevice_t, nvmlEnableState_t*))               \
  X(nvmlDeviceGetMigMode, nvmlReturn_t(nvmlDevice_t, unsigned*, unsigned*))                     \
  X(nvmlDeviceGetCurrPcieLinkGeneration, nvmlReturn_t(nvmlDevice_t, unsigned*))                 \
  X(nvmlDeviceGetMaxPcieLinkGeneration, nvmlReturn_t(nvmlDevice_t, unsigned*))                  \
  X(nvmlDeviceGetCurrPcieLinkWidth, nvmlReturn_t(nvmlDevice_t, unsigned*))                      \
  X(nvmlDeviceGetMaxPcieLinkWidth, nvmlReturn_t(nvmlDevice_t, unsigned*))                       \
  X(nvmlDeviceGetNvLinkState, nvmlReturn_t(nvmlDevice_t, unsigned, nvmlEnableState_t*))         \
  X(nvmlDeviceGetNvLinkVersion, nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*))                \
  X(nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlReturn_t(nvmlDevice_t, unsigned, nvmlPciInfo_t*))  \
  X(nvmlDeviceGetNvLinkRemoteDeviceType, nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*))       \
  X(nvmlDeviceGetFieldValues, nvmlReturn_t(nvmlDevice_t, int, nvmlFieldValue_t*))               \
  X(nvmlDeviceGetRetiredPages,                                                                  \
    nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*, unsigned long long*))                       \
  X(nvmlDeviceGetRetiredPagesPendingStatus, nvmlReturn_t(nvmlDevice_t, nvmlEnableState_t*))     \
  X(nvmlDeviceGetRemappedRows,                                                                  \
    nvmlReturn_t(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*))                     \
  X(nvmlDeviceGetNvLinkErrorCounter,                                                            \
    nvmlReturn_t(nvmlDevice_t, unsigned, unsigned, unsigned long long*))                        \
  X(nvmlDeviceGetPcieReplayCounter, nvmlReturn_t(nvmlDevice_t, unsigned*))                      \
  X(nvmlDeviceGetTemperatureThreshold, nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*))         \
  X(nvmlDeviceGetComputeRunningProcesses_v3,                                                    \
    nvmlReturn_t(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*))                                  \
  X(nvmlEventSetCreate, nvmlReturn_t(nvmlEventSet_t*))                                          \
  X(nvmlDeviceRegisterEvents, nvmlReturn_t(nvmlDevice_t, unsigned long long, nvmlEventSet_t))   \
  X(nvmlEventSetWait_v2, nvmlReturn_t(nvmlEventSet_t, nvmlEventData_t*, unsigned))              \
  X(nvmlEventSetFree, nvmlReturn_t(nvmlEventSet_t))

// Reads an unsigned field value; nothing when the field is unknown to this driver or GPU.
std::optional<unsigned long long> field_as_unsigned(const nvmlFieldValue_t& v) {
  if (v.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  switch (v.valueType) {
    case NVML_VALUE_TYPE_UNSIGNED_INT:
      return v.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG:
      return v.value.ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
      return v.value.ullVal;
    case NVML_VALUE_TYPE_UNSIGNED_SHORT:
      return v.value.usVal;
    case NVML_VALUE_TYPE_SIGNED_INT:
      return v.value.siVal >= 0 ? std::optional<unsigned long long>(v.value.siVal) : std::nullopt;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return v.value.sllVal >= 0 ? std::optional<unsigned long long>(v.value.sllVal) : std::nullopt;
    case NVML_VALUE_TYPE_DOUBLE:
      return v.value.dVal >= 0 ? std::optional<unsigned long long>(v.value.dVal) : std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace

struct Nvml::Symbols {
#define GPB_NVML_MEMBER(name, signature) std::add_pointer_t<signature> name = nullptr;
  GPB_NVML_SYMBOLS(GPB_NVML_MEMBER)
#undef GPB_NVML_MEMBER
};

const Nvml& Nvml::get() {
  static Nvml instance;
  static std::once_flag loaded;
  std::call_once(loaded, [] { instance.load(); });
  return instance;
}

void Nvml::load() {
  // The handle is never closed: NVML stays loaded for the life of the process.
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    error_ = "libnvidia-ml.so.1 not found (no NVIDIA driver installed?)";
    return;
  }
  auto* sym = new Symbols();  // lives as long as the process, like the library
#define GPB_NVML_LOAD(name, signature) \
  sym->name = reinterpret_cast<std::add_pointer_t<signature>>(dlsym(lib, #name));
  GPB_NVML_SYMBOLS(GPB_NVML_LOAD)
#undef GPB_NVML_LOAD
  if (!sym->nvmlInit_v2) {
    error_ = "libnvidia-ml.so.1 has no nvmlInit_v2 (driver too old)";
    delete sym;
    return;
  }
  const nvmlReturn_t rc = sym->nvmlInit_v2();
  if (rc != NVML_SUCCESS) {
    const char* why = sym->nvmlErrorString ? sym->nvmlErrorString(rc) : nullptr;
    error_ = std::string("nvmlInit failed: ") + (why ? why : "error " + std::to_string(rc));
    delete sym;
    return;
  }
  sym_ = sym;
  available_ = true;
}

// Calls an entry point when NVML and the symbol exist; false otherwise or on an NVML error.
#define GPB_NVML_CALL(name, ...) \
  (available_ && sym_->name != nullptr && sym_->name(__VA_ARGS__) == NVML_SUCCESS)

std::optional<std::string> Nvml::driver_version() const {
  char text[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (!GPB_NVML_CALL(nvmlSystemGetDriverVersion, text, sizeof text)) return std::nullopt;
  return std::string(text);
}

std::optional<nvml::Device> Nvml::device_by_pci_bus_id(const std::string& bus_id) const {
  nvml::Device d = nullptr;
  if (!GPB_NVML_CALL(nvmlDeviceGetHandleByPciBusId_v2, bus_id.c_str(), &d)) return std::nullopt;
  return d;
}

std::optional<nvml::Device> Nvml::device_by_uuid(const std::string& uuid) const {
  nvml::Device d = nullptr;
  if (!GPB_NVML_CALL(nvmlDeviceGetHandleByUUID, uuid.c_str(), &d)) return std::nullopt;
  return d;
}

std::optional<nvml::Device> Nvml::device_for_cuda(int cuda_device) const {
  if (!available_) return std::nullopt;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (auto it = cuda_devices_.find(cuda_device); it != cuda_devices_.end()) return it->second;
  std::optional<nvml::Device> found;
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, cuda_device) == cudaSuccess) {
    found = device_by_pci_bus_id(bus_id);
  } else {
    (void)cudaGetLastError();
  }
  if (!found) {  // e.g. a bus id NVML spells differently: the UUID is unambiguous
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, cuda_device) == cudaSuccess) {
      found = device_by_uuid(format_gpu_uuid(prop.uuid.bytes));
    } else {
      (void)cudaGetLastError();
    }
  }
  cuda_devices_[cuda_device] = found;
  return found;
}

std::optional<std::string> Nvml::pci_bus_id(nvml::Device d) const {
  nvmlPciInfo_t info{};
  if (!GPB_NVML_CALL(nvmlDeviceGetPciInfo_v3, d, &info)) return std::nullopt;
  info.busId[sizeof info.busId - 1] = '\0';
  std::string id = canonical_pci_bus_id(info.busId);
  if (id.empty()) return std::nullopt;
  return id;
}

std::optional<unsigned> Nvml::clock_MHz(nvml::Device d, nvml::Clock c) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetClockInfo, d, static_cast<unsigned>(c), &v)) return std::nullopt;
  return v;
}

std::optional<unsigned> Nvml::max_clock_MHz(nvml::Device d, nvml::Clock c) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetMaxClockInfo, d, static_cast<unsigned>(c), &v))
    return std::nullopt;
  return v;
}

std::optional<unsigned> Nvml::temperature_C(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetTemperature, d, NVML_TEMPERATURE_GPU, &v)) return std::nullopt;
  return v;
}

std::optional<unsigned> Nvml::slowdown_temperature_C(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetTemperatureThreshold, d, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &v))
    return std::nullopt;
  return v;
}

std::optional<double> Nvml::power_W(nvml::Device d) const {
  unsigned mW = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetPowerUsage, d, &mW)) return std::nullopt;
  return mW / 1000.0;
}

std::optional<double> Nvml::power_limit_W(nvml::Device d) const {
  unsigned mW = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetEnforcedPowerLimit, d, &mW)) return std::nullopt;
  return mW / 1000.0;
}

std::optional<std::uint64_t> Nvml::clocks_event_reasons(nvml::Device d) const {
  unsigned long long mask = 0;
  // The "event" name replaced "throttle" in driver 535; the bits are the same.
  if (GPB_NVML_CALL(nvmlDeviceGetCurrentClocksEventReasons, d, &mask)) return mask;
  if (GPB_NVML_CALL(nvmlDeviceGetCurrentClocksThrottleReasons, d, &mask)) return mask;
  return std::nullopt;
}

std::optional<bool> Nvml::ecc_enabled(nvml::Device d) const {
  nvmlEnableState_t current = 0, pending = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetEccMode, d, &current, &pending)) return std::nullopt;
  return current == NVML_FEATURE_ENABLED;
}

std::optional<std::uint64_t> Nvml::ecc_errors(nvml::Device d, bool uncorrected,
                                              bool aggregate) const {
  unsigned long long count = 0;
  const unsigned type =
      uncorrected ? NVML_MEMORY_ERROR_TYPE_UNCORRECTED : NVML_MEMORY_ERROR_TYPE_CORRECTED;
  const unsigned counter = aggregate ? NVML_AGGREGATE_ECC : NVML_VOLATILE_ECC;
  if (!GPB_NVML_CALL(nvmlDeviceGetTotalEccErrors, d, type, counter, &count)) return std::nullopt;
  return count;
}

std::optional<std::uint64_t> Nvml::retired_pages(nvml::Device d,
                                                 nvml::RetirementCause cause) const {
  if (!available_ || !sym_->nvmlDeviceGetRetiredPages) return std::nullopt;
  // A zero-sized buffer asks for the count only: NVML answers NVML_SUCCESS when no page matches
  // and NVML_ERROR_INSUFFICIENT_SIZE, with the count, when some do. `unused` is never written
  // (its size is 0) but keeps the address argument non-null for drivers that check it.
  unsigned count = 0;
  unsigned long long unused = 0;
  const nvmlReturn_t rc =
      sym_->nvmlDeviceGetRetiredPages(d, static_cast<unsigned>(cause), &count, &unused);
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) return std::nullopt;
  return count;
}

std::optional<bool> Nvml::retired_pages_pending(nvml::Device d) const {
  nvmlEnableState_t pending = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetRetiredPagesPendingStatus, d, &pending)) return std::nullopt;
  return pending == NVML_FEATURE_ENABLED;
}

std::optional<nvml::RemappedRows> Nvml::remapped_rows(nvml::Device d) const {
  unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetRemappedRows, d, &corrected, &uncorrected, &pending, &failed))
    return std::nullopt;
  nvml::RemappedRows rows;
  rows.corrected = corrected;
  rows.uncorrected = uncorrected;
  rows.pending = pending != 0;
  rows.failed = failed != 0;
  return rows;
}

std::optional<bool> Nvml::persistence_mode(nvml::Device d) const {
  nvmlEnableState_t mode = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetPersistenceMode, d, &mode)) return std::nullopt;
  return mode == NVML_FEATURE_ENABLED;
}

std::optional<bool> Nvml::mig_enabled(nvml::Device d) const {
  unsigned current = 0, pending = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetMigMode, d, &current, &pending)) return std::nullopt;
  return current == NVML_DEVICE_MIG_ENABLE;
}

std::optional<int> Nvml::pcie_gen_current(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetCurrPcieLinkGeneration, d, &v)) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<int> Nvml::pcie_gen_max(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetMaxPcieLinkGeneration, d, &v)) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<int> Nvml::pcie_width_current(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetCurrPcieLinkWidth, d, &v)) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<int> Nvml::pcie_width_max(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetMaxPcieLinkWidth, d, &v)) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<std::uint64_t> Nvml::pcie_replay_count(nvml::Device d) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetPcieReplayCounter, d, &v)) return std::nullopt;
  return v;
}

std::optional<std::vector<unsigned>> Nvml::compute_process_pids(nvml::Device d) const {
  if (!available_ || !sym_->nvmlDeviceGetComputeRunningProcesses_v3) return std::nullopt;
  // A count of 0 asks for the count: NVML_SUCCESS when no process runs, else
  // NVML_ERROR_INSUFFICIENT_SIZE with the count. Processes may start between the two calls, so
  // the buffer has room for a few more; a second shortfall gives up rather than loop.
  unsigned count = 0;
  nvmlReturn_t rc = sym_->nvmlDeviceGetComputeRunningProcesses_v3(d, &count, nullptr);
  if (rc == NVML_SUCCESS) return std::vector<unsigned>{};
  if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return std::nullopt;
  std::vector<nvmlProcessInfo_t> infos(count + 8);
  count = static_cast<unsigned>(infos.size());
  rc = sym_->nvmlDeviceGetComputeRunningProcesses_v3(d, &count, infos.data());
  if (rc != NVML_SUCCESS || count > infos.size()) return std::nullopt;
  std::vector<unsigned> pids;
  pids.reserve(count);
  for (unsigned i = 0; i < count; ++i) pids.push_back(infos[i].pid);
  return pids;
}

std::optional<unsigned> Nvml::nvlink_link_count(nvml::Device d) const {
  nvmlFieldValue_t v{};
  v.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
  if (!GPB_NVML_CALL(nvmlDeviceGetFieldValues, d, 1, &v)) return std::nullopt;
  const auto n = field_as_unsigned(v);
  if (!n || *n > 64) return std::nullopt;  // not a link count: ignore
  return static_cast<unsigned>(*n);
}

std::optional<bool> Nvml::nvlink_active(nvml::Device d, unsigned link) const {
  nvmlEnableState_t state = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetNvLinkState, d, link, &state)) return std::nullopt;
  return state == NVML_FEATURE_ENABLED;
}

std::optional<unsigned> Nvml::nvlink_version(nvml::Device d, unsigned link) const {
  unsigned v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetNvLinkVersion, d, link, &v)) return std::nullopt;
  return v;
}

std::optional<std::string> Nvml::nvlink_remote_pci_bus_id(nvml::Device d, unsigned link) const {
  nvmlPciInfo_t info{};
  if (!GPB_NVML_CALL(nvmlDeviceGetNvLinkRemotePciInfo_v2, d, link, &info)) return std::nullopt;
  info.busId[sizeof info.busId - 1] = '\0';
  std::string id = canonical_pci_bus_id(info.busId);
  if (id.empty()) return std::nullopt;
  return id;
}

std::optional<nvml::LinkPeer> Nvml::nvlink_remote_type(nvml::Device d, unsigned link) const {
  unsigned type = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetNvLinkRemoteDeviceType, d, link, &type)) return std::nullopt;
  switch (type) {
    case 0:
      return nvml::LinkPeer::Gpu;
    case 1:
      return nvml::LinkPeer::IbmNpu;
    case 2:
      return nvml::LinkPeer::Switch;
    default:
      return nvml::LinkPeer::Unknown;
  }
}

std::optional<double> Nvml::nvlink_speed_GBps(nvml::Device d) const {
  nvmlFieldValue_t v{};
  v.fieldId = NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON;
  if (!GPB_NVML_CALL(nvmlDeviceGetFieldValues, d, 1, &v)) return std::nullopt;
  const auto MBps = field_as_unsigned(v);
  if (!MBps || *MBps == 0) return std::nullopt;
  return static_cast<double>(*MBps) / 1000.0;
}

std::optional<std::uint64_t> Nvml::nvlink_error_count(nvml::Device d, unsigned link,
                                                      nvml::LinkCounter c) const {
  unsigned long long v = 0;
  if (!GPB_NVML_CALL(nvmlDeviceGetNvLinkErrorCounter, d, link, static_cast<unsigned>(c), &v))
    return std::nullopt;
  return v;
}

std::optional<nvml::EventSet> Nvml::event_set_create() const {
  nvml::EventSet set = nullptr;
  if (!GPB_NVML_CALL(nvmlEventSetCreate, &set)) return std::nullopt;
  return set;
}

std::string Nvml::register_events(nvml::Device d, std::uint64_t types, nvml::EventSet set) const {
  if (!available_) return error_;
  if (!sym_->nvmlDeviceRegisterEvents) return "this driver's NVML has no nvmlDeviceRegisterEvents";
  const nvmlReturn_t rc = sym_->nvmlDeviceRegisterEvents(d, types, set);
  return rc == NVML_SUCCESS ? std::string() : error_text(rc);
}

nvml::EventWait Nvml::wait_event(nvml::EventSet set, unsigned timeout_ms) const {
  nvml::EventWait out;
  if (!available_) {
    out.error = error_;
    return out;
  }
  if (!sym_->nvmlEventSetWait_v2) {
    out.error = "this driver's NVML has no nvmlEventSetWait_v2";
    return out;
  }
  nvmlEventData_t data{};
  const nvmlReturn_t rc = sym_->nvmlEventSetWait_v2(set, &data, timeout_ms);
  if (rc == NVML_SUCCESS) {
    out.status = nvml::EventWait::Status::Event;
    out.device = data.device;
    out.type = data.eventType;
    out.data = data.eventData;
  } else if (rc == NVML_ERROR_TIMEOUT) {  // also what an interrupted wait answers
    out.status = nvml::EventWait::Status::Timeout;
  } else {
    out.error = error_text(rc);
  }
  return out;
}

void Nvml::event_set_free(nvml::EventSet set) const {
  if (available_ && sym_->nvmlEventSetFree && set) sym_->nvmlEventSetFree(set);
}

std::string Nvml::error_text(int rc) const {
  const char* why = sym_ && sym_->nvmlErrorString ? sym_->nvmlErrorString(rc) : nullptr;
  return why ? std::string(why) : "NVML error " + std::to_string(rc);
}

#undef GPB_NVML_CALL

std::string canonical_pci_bus_id(const std::string& text) {
  // Split "[domain:]bus:device.function" into hex numbers.
  std::array<unsigned long, 4> part{};  // domain, bus, device, function
  std::array<std::string, 4> field;
  const auto colon2 = text.rfind(':');
  const auto dot = text.rfind('.');
  if (colon2 == std::string::npos || dot == std::string::npos || dot < colon2) return {};
  const auto colon1 = text.rfind(':', colon2 == 0 ? std::string::npos : colon2 - 1);
  if (colon2 == 0) return {};
  field[0] = colon1 == std::string::npos ? "0" : text.substr(0, colon1);
  field[1] = colon1 == std::string::npos ? text.substr(0, colon2)
                                         : text.substr(colon1 + 1, colon2 - colon1 - 1);
  field[2] = text.substr(colon2 + 1, dot - colon2 - 1);
  field[3] = text.substr(dot + 1);
  for (std::size_t i = 0; i < field.size(); ++i) {
    const std::string& f = field[i];
    if (f.empty() || f.size() > 8) return {};
    for (char c : f)
      if (!std::isxdigit(static_cast<unsigned char>(c))) return {};
    part[i] = std::stoul(f, nullptr, 16);
  }
  if (part[0] > 0xffffffffUL || part[1] > 0xff || part[2] > 0x1f || part[3] > 0x7) return {};
  char out[32];
  std::snprintf(out, sizeof out, "%04lx:%02lx:%02lx.%lx", part[0], part[1], part[2], part[3]);
  return out;
}

std::string format_gpu_uuid(const char* sixteen_bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(sixteen_bytes);
  char text[48];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return text;
}

}  // namespace gpubench
