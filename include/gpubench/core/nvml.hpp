#pragma once
// NVML, loaded at run time (dlopen of libnvidia-ml.so.1): gpubench builds without nvml.h and
// starts on a machine with no driver. Each query returns nothing when NVML, the symbol (an older
// driver) or the answer is unavailable, so callers never need to know which one it was.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gpubench {

namespace nvml {

// NVML's device handle (an opaque pointer in the C ABI).
struct DeviceOpaque;
using Device = DeviceOpaque*;

// nvmlClockType_t
enum class Clock : unsigned { Graphics = 0, Sm = 1, Memory = 2, Video = 3 };

// nvmlClocksEventReasons (formerly "clocks throttle reasons"): why clocks are below max now.
inline constexpr std::uint64_t kReasonGpuIdle = 0x1ULL;
inline constexpr std::uint64_t kReasonApplicationsClocksSetting = 0x2ULL;
inline constexpr std::uint64_t kReasonSwPowerCap = 0x4ULL;
inline constexpr std::uint64_t kReasonHwSlowdown = 0x8ULL;
inline constexpr std::uint64_t kReasonSyncBoost = 0x10ULL;
inline constexpr std::uint64_t kReasonSwThermalSlowdown = 0x20ULL;
inline constexpr std::uint64_t kReasonHwThermalSlowdown = 0x40ULL;
inline constexpr std::uint64_t kReasonHwPowerBrakeSlowdown = 0x80ULL;
inline constexpr std::uint64_t kReasonDisplayClockSetting = 0x100ULL;

// nvmlIntNvLinkDeviceType_t: what sits at the far end of an NVLink.
enum class LinkPeer : unsigned { Gpu = 0, IbmNpu = 1, Switch = 2, Unknown = 0xFF };

// Highest NVLink index probed when NVML cannot say how many links a GPU has (Hopper has 18).
inline constexpr unsigned kDefaultMaxLinks = 18;

// nvmlNvLinkErrorCounter_t: an NVLink's data-link error counters.
enum class LinkCounter : unsigned { Replay = 0, Recovery = 1, CrcFlit = 2, CrcData = 3 };

// nvmlPageRetirementCause_t: why the driver retired a memory page (pre-Ampere GPUs).
enum class RetirementCause : unsigned { MultipleSingleBitEcc = 0, DoubleBitEcc = 1 };

// nvmlDeviceGetRemappedRows: rows of memory remapped to spares (Ampere and later).
struct RemappedRows {
  unsigned corrected = 0, uncorrected = 0;  // rows remapped for correctable / uncorrectable errors
  bool pending = false;                     // a remap takes effect at the next GPU reset
  bool failed = false;                      // a remap failed: the GPU needs service
};

// NVML's event set handle (an opaque pointer in the C ABI).
struct EventSetOpaque;
using EventSet = EventSetOpaque*;

// nvmlEventType bits.
inline constexpr std::uint64_t kEventXidCriticalError = 0x8ULL;

// The outcome of one wait on an event set: an event, the timeout, or an NVML error.
struct EventWait {
  enum class Status { Event, Timeout, Error };
  Status status = Status::Error;
  Device device = nullptr;  // Event: the GPU it happened on
  std::uint64_t type = 0;   // Event: its nvmlEventType bit
  std::uint64_t data = 0;   // Event: for an XID critical error, the XID
  std::string error;        // Error: why (NVML's error string)
};

}  // namespace nvml

class Nvml {
 public:
  // The process-wide instance; the first call loads and initialises NVML (thread-safe).
  static const Nvml& get();

  bool available() const noexcept { return available_; }
  // Why NVML is unavailable ("libnvidia-ml.so.1 not found", "nvmlInit failed: ..."); "" if it is.
  const std::string& error() const noexcept { return error_; }

  std::optional<std::string> driver_version() const;

  // Handles. CUDA devices are mapped by PCI bus id (then UUID), never by index, because
  // CUDA_VISIBLE_DEVICES renumbers CUDA devices but not NVML's.
  std::optional<nvml::Device> device_by_pci_bus_id(const std::string& bus_id) const;
  std::optional<nvml::Device> device_by_uuid(const std::string& uuid) const;  // "GPU-..."
  std::optional<nvml::Device> device_for_cuda(int cuda_device) const;         // cached

  std::optional<std::string> pci_bus_id(nvml::Device d) const;  // canonical form
  std::optional<unsigned> clock_MHz(nvml::Device d, nvml::Clock c) const;
  std::optional<unsigned> max_clock_MHz(nvml::Device d, nvml::Clock c) const;
  std::optional<unsigned> temperature_C(nvml::Device d) const;  // GPU die sensor
  // Temperature at which the GPU starts to slow its clocks (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN).
  std::optional<unsigned> slowdown_temperature_C(nvml::Device d) const;
  std::optional<double> power_W(nvml::Device d) const;        // current draw
  std::optional<double> power_limit_W(nvml::Device d) const;  // enforced limit
  // Active clocks-event reasons (bit mask of nvml::kReason*).
  std::optional<std::uint64_t> clocks_event_reasons(nvml::Device d) const;

  std::optional<bool> ecc_enabled(nvml::Device d) const;  // current mode
  // ECC error count, all memory locations: volatile (since the driver loaded) or aggregate (over
  // the GPU's life, kept in its InfoROM).
  std::optional<std::uint64_t> ecc_errors(nvml::Device d, bool uncorrected,
                                          bool aggregate = false) const;
  // Pages retired for `cause`, those awaiting a reset included.
  std::optional<std::uint64_t> retired_pages(nvml::Device d, nvml::RetirementCause cause) const;
  // Whether a page awaits a reset to be retired.
  std::optional<bool> retired_pages_pending(nvml::Device d) const;
  std::optional<nvml::RemappedRows> remapped_rows(nvml::Device d) const;
  std::optional<bool> persistence_mode(nvml::Device d) const;
  std::optional<bool> mig_enabled(nvml::Device d) const;  // current mode

  std::optional<int> pcie_gen_current(nvml::Device d) const;
  std::optional<int> pcie_gen_max(nvml::Device d) const;  // of this GPU in this slot
  std::optional<int> pcie_width_current(nvml::Device d) const;
  std::optional<int> pcie_width_max(nvml::Device d) const;
  // PCIe replays (link-level retransmissions) since the driver loaded.
  std::optional<std::uint64_t> pcie_replay_count(nvml::Device d) const;
  // PIDs of the processes with a compute context on the GPU (this one included, when it has
  // one), as NVML reports them.
  std::optional<std::vector<unsigned>> compute_process_pids(nvml::Device d) const;

  std::optional<unsigned> nvlink_link_count(nvml::Device d) const;  // links the GPU has
  std::optional<bool> nvlink_active(nvml::Device d, unsigned link) const;
  // NVML's nvmlNvlinkVersion_t value (1: 1.0, 2: 2.0, 3: 2.2, 4: 3.0, 5: 3.1, 6: 4.0, 7: 5.0, ...).
  std::optional<unsigned> nvlink_version(nvml::Device d, unsigned link) const;
  // PCI bus id (canonical form) of the device at the far end of `link`: a GPU or an NVSwitch.
  std::optional<std::string> nvlink_remote_pci_bus_id(nvml::Device d, unsigned link) const;
  std::optional<nvml::LinkPeer> nvlink_remote_type(nvml::Device d, unsigned link) const;
  // NVML's common speed of the active links, per direction, GB/s (1e9 bytes/s).
  std::optional<double> nvlink_speed_GBps(nvml::Device d) const;
  // A data-link error counter of `link`, since the driver loaded or the counters were reset.
  std::optional<std::uint64_t> nvlink_error_count(nvml::Device d, unsigned link,
                                                  nvml::LinkCounter c) const;

  // Events. A set is created, has devices registered, is waited on (from any one thread at a
  // time) and is freed once: the caller owns it. Failures say why, in NVML's words.
  std::optional<nvml::EventSet> event_set_create() const;
  // Registers `types` (nvml::kEvent* bits) of `d` with `set`; "" on success, else why not.
  std::string register_events(nvml::Device d, std::uint64_t types, nvml::EventSet set) const;
  // Waits up to `timeout_ms` for the next event of `set`.
  nvml::EventWait wait_event(nvml::EventSet set, unsigned timeout_ms) const;
  void event_set_free(nvml::EventSet set) const;

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

 private:
  Nvml() = default;
  void load();
  std::string error_text(int nvml_return) const;  // NVML's words for a return code

  struct Symbols;
  const Symbols* sym_ = nullptr;
  bool available_ = false;
  std::string error_;
  mutable std::mutex cache_mutex_;
  mutable std::map<int, std::optional<nvml::Device>> cuda_devices_;
};

// Canonical PCI bus id "dddd:bb:dd.f" (lower-case hex, 4-digit domain, the sysfs spelling) of
// any "domain:bus:device.function" or "bus:device.function" text (CUDA writes "0000:1B:00.0",
// NVML "00000000:1B:00.0"); "" when the text is not a bus id.
std::string canonical_pci_bus_id(const std::string& text);

// A GPU's 16-byte UUID (cudaDeviceProp::uuid) as NVML and nvidia-smi spell it:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string format_gpu_uuid(const char* sixteen_bytes);

}  // namespace gpubench
