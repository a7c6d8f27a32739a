#pragma once
// CUDA checks and move-only RAII handles: device and pinned buffers, streams, events.
// One family of check macros: the stringified call, file:line and the current GPU; they throw.
// The *_NOTHROW variants log instead and exist only for destructors.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "gpubench/core/errors.hpp"

namespace gpubench {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
void log_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept;

#define GPB_CUDA_CHECK(call)                                             \
  do {                                                                   \
    cudaError_t gpb_err_ = (call);                                       \
    if (gpb_err_ != cudaSuccess)                                         \
      ::gpubench::throw_cuda_error(gpb_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define GPB_CUDA_CHECK_NOTHROW(call)                                                              \
  do {                                                                                            \
    cudaError_t gpb_err_ = (call);                                                                \
    if (gpb_err_ != cudaSuccess) ::gpubench::log_cuda_error(gpb_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define GPB_CHECK_LAUNCH() GPB_CUDA_CHECK(cudaGetLastError())

// Number of visible CUDA devices; 0 when there is no driver or no GPU (never throws).
int visible_device_count() noexcept;
// Why no GPU is usable ("no NVIDIA driver", "no CUDA device", ...), empty when one is.
std::string no_gpu_reason();
// The major number of `device`'s compute capability (9 for Hopper); throws CudaError.
int compute_capability_major(int device);

// Devices whose queued work missed a deadline (wait_for's TimeoutError): that work may never
// end, and cudaFree or cudaFreeHost would wait for it. While any device is marked, DeviceBuffers
// on a marked device and every PinnedBuffer are left allocated when destroyed (the memory comes
// back when the process ends), so unwinding from a timeout cannot hang in a destructor. The
// marks last until clear_stuck_devices(): the end of the module run that set them, when the
// stuck work has been aborted or the process is about to end.
void mark_device_stuck(int device) noexcept;
bool device_stuck(int device) noexcept;
bool any_device_stuck() noexcept;
void clear_stuck_devices() noexcept;
void unmark_device_stuck(int device) noexcept;  // its stuck work has ended (drain_and_unmark)

// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, std::size_t bytes);  // allocates on `device`
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer t(std::move(o));
    swap(t);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const noexcept { return bytes_; }
  int device() const noexcept { return device_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(device_, o.device_);
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

// Page-locked host memory (cudaMallocHost, portable: usable from every GPU's context).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes, bool mapped = false);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept { swap(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    PinnedBuffer t(std::move(o));
    swap(t);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* get() const noexcept { return ptr_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const noexcept { return bytes_; }
  // Device pointer of a mapped allocation (for kernels that poll host memory).
  void* device_ptr() const;

 private:
  void swap(PinnedBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() = default;
  // A non-blocking stream on `device`; `high_priority`: the device's highest stream priority
  // (its blocks are scheduled before those of default-priority streams as SMs free up).
  explicit Stream(int device, bool high_priority = false);
  ~Stream();
  Stream(Stream&& o) noexcept { swap(o); }
  Stream& operator=(Stream&& o) noexcept {
    Stream t(std::move(o));
    swap(t);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  void synchronize() const;

 private:
  void swap(Stream& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(device_, o.device_);
  }
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

class Event {
 public:
  Event() = default;
  explicit Event(int device, bool timing = true);
  ~Event();
  Event(Event&& o) noexcept { swap(o); }
  Event& operator=(Event&& o) noexcept {
    Event t(std::move(o));
    swap(t);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const noexcept { return event_; }
  operator cudaEvent_t() const noexcept { return event_; }
  int device() const noexcept { return device_; }
  void record(cudaStream_t stream) const;
  void synchronize() const;
  // Seconds from `start` to this event (both recorded and complete).
  double seconds_since(const Event& start) const;

 private:
  void swap(Event& o) noexcept {
    std::swap(event_, o.event_);
    std::swap(device_, o.device_);
  }
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

// Whether work queued on `stream` is being recorded into a graph (a capture begun and not yet
// ended, or one that has gone invalid) rather than run.
bool stream_capturing(cudaStream_t stream);

// A CUDA graph captured from a stream (thread-local capture mode, so ranks on other threads may
// capture at once), launched as one unit: tiny kernels replay without per-launch overhead.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(CudaGraph&& o) noexcept { swap(o); }
  CudaGraph& operator=(CudaGraph&& o) noexcept {
    CudaGraph t(std::move(o));
    swap(t);
    return *this;
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records what `enqueue` queues on `stream` into the graph and instantiates it.
  template <class F>
  void capture(cudaStream_t stream, F&& enqueue) {
    begin_capture(stream);
    try {
      enqueue(stream);
    } catch (...) {
      abandon_capture(stream);
      throw;
    }
    end_capture(stream);
  }
  void launch(cudaStream_t stream) const;
  explicit operator bool() const noexcept { return exec_ != nullptr; }

 private:
  void begin_capture(cudaStream_t stream);
  void end_capture(cudaStream_t stream);
  void abandon_capture(cudaStream_t stream) noexcept;
  void swap(CudaGraph& o) noexcept {
    std::swap(graph_, o.graph_);
    std::swap(exec_, o.exec_);
  }
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Makes `waiter` wait for all work queued so far on `signaller` (an event in between).
void stream_wait(cudaStream_t waiter, cudaStream_t signaller, const Event& scratch);

}  // namespace gpubench
