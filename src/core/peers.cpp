// Peer access between the GPUs of one process.
#include "gpubench/core/peers.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "gpubench/core/cuda.hpp"

namespace gpubench {

PeerAccess::PeerAccess(const std::vector<int>& devices) : devices_(devices) {
  const std::size_t n = devices.size();
  std::vector<std::vector<bool>> can(n, std::vector<bool>(n, false));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      int ok = 0;
      GPB_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, devices[i], devices[j]));
      if (!ok) continue;
      DeviceGuard guard(devices[i]);
      const cudaError_t err = cudaDeviceEnablePeerAccess(devices[j], 0);
      if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // not an error here: clear it so no later check sees it
      } else if (err != cudaSuccess) {
        (void)cudaGetLastError();
        spdlog::warn("peer access: GPU {} cannot enable peer access to GPU {}: {}", devices[i],
                     devices[j], cudaGetErrorString(err));
        continue;
      }
      can[i][j] = true;
    }
  }
  ok_.assign(n, std::vector<bool>(n, false));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) ok_[i][j] = i != j && can[i][j] && can[j][i];
}

std::size_t PeerAccess::pos(int device) const {
  const auto it = std::find(devices_.begin(), devices_.end(), device);
  if (it == devices_.end())
    throw std::logic_error(fmt::format("peer access: GPU {} is not among the GPUs given", device));
  return static_cast<std::size_t>(it - devices_.begin());
}

bool PeerAccess::pair(int a, int b) const {
  return ok_[pos(a)][pos(b)];
}

bool PeerAccess::all() const {
  for (std::size_t i = 0; i < ok_.size(); ++i)
    for (std::size_t j = 0; j < ok_.size(); ++j)
      if (i != j && !ok_[i][j]) return false;
  return true;
}

}  // namespace gpubench
