#pragma once
// Peer access between GPUs of one process (bandwidth's P2P runs, tp's copy-engine collectives).
#include <cstddef>
#include <vector>

namespace gpubench {

// Peer access between the given GPUs, enabled both ways where the hardware allows (a pair that
// cannot gets a warning on the log, not an error). Left enabled when this goes away.
class PeerAccess {
 public:
  explicit PeerAccess(const std::vector<int>& devices);
  // True when a and b can each read and write the other's memory.
  bool pair(int a, int b) const;
  // True when every pair can.
  bool all() const;

 private:
  std::vector<int> devices_;
  std::vector<std::vector<bool>> ok_;
  std::size_t pos(int device) const;
};

}  // namespace gpubench
