// CUDA error reporting and the RAII handles of cuda.hpp.
#include "gpubench/core/cuda.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace gpubench {

namespace {
int current_device_or(int fallback) noexcept {
  int dev = fallback;
  if (cudaGetDevice(&dev) != cudaSuccess) return fallback;
  return dev;
}

// One bit per device (ordinals beyond 63 share the last bit: marked together, never missed).
std::atomic<std::uint64_t> g_stuck{0};
std::uint64_t stuck_bit(int device) noexcept {
  return std::uint64_t{1} << std::clamp(device, 0, 63);
}
}  // namespace

void mark_device_stuck(int device) noexcept {
  g_stuck.fetch_or(stuck_bit(device));
}
bool device_stuck(int device) noexcept {
  return (g_stuck.load() & stuck_bit(device)) != 0;
}
bool any_device_stuck() noexcept {
  return g_stuck.load() != 0;
}
void clear_stuck_devices() noexcept {
  g_stuck.store(0);
}
void unmark_device_stuck(int device) noexcept {
  g_stuck.fetch_and(~stuck_bit(device));
}

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  const int dev = current_device_or(-1);
  // Clear a sticky-free error so the next call does not report it again.
  (void)cudaGetLastError();
  const std::string what =
      fmt::format("{} failed: {} ({}) at {}:{} on GPU {}", call, cudaGetErrorString(err),
                  cudaGetErrorName(err), file, line, dev);
  if (err == cudaErrorMemoryAllocation) throw OutOfMemoryError(what);
  throw GpuError(what);
}

void log_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept {
  try {
    spdlog::warn("{} failed: {} at {}:{}", call, cudaGetErrorString(err), file, line);
  } catch (...) {
  }
}

int visible_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess && n > 0) return {};
  (void)cudaGetLastError();
  if (err == cudaErrorInsufficientDriver)
    return "the NVIDIA driver is missing or older than this CUDA runtime needs";
  if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0))
    return "no CUDA-capable GPU is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
  return fmt::format("cannot use CUDA: {} ({})", cudaGetErrorString(err), cudaGetErrorName(err));
}

DeviceGuard::DeviceGuard(int device) {
  GPB_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) GPB_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_)
    GPB_CUDA_CHECK_NOTHROW(cudaSetDevice(previous_));
}

DeviceBuffer::DeviceBuffer(int device, std::size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  const cudaError_t err = cudaMalloc(&ptr_, bytes);
  if (err != cudaSuccess) {
    ptr_ = nullptr;
    (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation) {
      std::size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw OutOfMemoryError(
          fmt::format("cannot allocate {:.2f} GiB on GPU {}: {:.2f} GiB free of {:.2f} GiB",
                      bytes / 1073741824.0, device, free_b / 1073741824.0, total_b / 1073741824.0));
    }
    throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_ || device_stuck(device_)) return;
  int prev = -1;
  GPB_CUDA_CHECK_NOTHROW(cudaGetDevice(&prev));
  if (prev != device_) GPB_CUDA_CHECK_NOTHROW(cudaSetDevice(device_));
  GPB_CUDA_CHECK_NOTHROW(cudaFree(ptr_));
  if (prev >= 0 && prev != device_) GPB_CUDA_CHECK_NOTHROW(cudaSetDevice(prev));
}

PinnedBuffer::PinnedBuffer(std::size_t bytes, bool mapped) : bytes_(bytes) {
  if (bytes == 0) return;
  unsigned flags = cudaHostAllocPortable;
  if (mapped) flags |= cudaHostAllocMapped;
  GPB_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, flags));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ && !any_device_stuck()) GPB_CUDA_CHECK_NOTHROW(cudaFreeHost(ptr_));
}

void* PinnedBuffer::device_ptr() const {
  void* d = nullptr;
  GPB_CUDA_CHECK(cudaHostGetDevicePointer(&d, ptr_, 0));
  return d;
}

Stream::Stream(int device, bool high_priority) : device_(device) {
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  if (high_priority) GPB_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  GPB_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking,
                                              high_priority ? greatest : least));
}

Stream::~Stream() {
  if (stream_) GPB_CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
}

void Stream::synchronize() const {
  GPB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(int device, bool timing) : device_(device) {
  DeviceGuard guard(device);
  GPB_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) GPB_CUDA_CHECK_NOTHROW(cudaEventDestroy(event_));
}

void Event::record(cudaStream_t stream) const {
  GPB_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::synchronize() const {
  GPB_CUDA_CHECK(cudaEventSynchronize(event_));
}

double Event::seconds_since(const Event& start) const {
  float ms = 0;
  GPB_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return static_cast<double>(ms) * 1e-3;
}

int compute_capability_major(int device) {
  int major = 0;
  GPB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  GPB_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

CudaGraph::~CudaGraph() {
  if (exec_) GPB_CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(exec_));
  if (graph_) GPB_CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph_));
}

void CudaGraph::begin_capture(cudaStream_t stream) {
  GPB_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

void CudaGraph::end_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  GPB_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  if (exec_) GPB_CUDA_CHECK(cudaGraphExecDestroy(exec_));
  if (graph_) GPB_CUDA_CHECK(cudaGraphDestroy(graph_));
  graph_ = g;
  exec_ = nullptr;
  GPB_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::abandon_capture(cudaStream_t stream) noexcept {
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(stream, &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
}

void CudaGraph::launch(cudaStream_t stream) const {
  GPB_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

void stream_wait(cudaStream_t waiter, cudaStream_t signaller, const Event& scratch) {
  scratch.record(signaller);
  GPB_CUDA_CHECK(cudaStreamWaitEvent(waiter, scratch.get(), 0));
}

}  // namespace gpubench
