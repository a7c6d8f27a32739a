// The collectives of `gpubench allreduce` as nccl-tests defines them: types, reductions, the
// count/size of each collective, its bus-bandwidth factor, and the NCCL call.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/nccl_compat.hpp"
#include "gpubench/core/units.hpp"
#include "gpubench/kernels/collectives.cuh"  // kMaxAlltoallvRanks
#include "gpubench/modules/allreduce/allreduce.hpp"

namespace gpubench::allreduce {

namespace {

int runtime_nccl_version() {
  static const int version = [] {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    return v;
  }();
  return version;
}

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

template <class T>
std::string names_of(const std::vector<T>& items) {
  std::string out;
  for (const T& item : items) out += (out.empty() ? "" : ", ") + item.name;
  return out;
}

// Per-rank slices (alltoallv: the mean per-peer count): nccl-tests divides the element count by
// the ranks and rounds down to whole 16-byte units, so every slice stays aligned.
bool sliced(Kind k) {
  switch (k) {
    case Kind::AllGather:
    case Kind::ReduceScatter:
    case Kind::AllToAll:
    case Kind::Gather:
    case Kind::Scatter:
    case Kind::AllToAllV:
    case Kind::HyperCube:
      return true;
    default:
      return false;
  }
}

// Elements each rank sends (and receives) in alltoallv.
std::size_t alltoallv_total(const Collective& c, std::size_t count, int type_bytes, int nranks) {
  std::size_t total = 0;
  for (int to = 0; to < nranks; ++to)
    total += alltoallv_peer_elems(c, count, type_bytes, 0, to, nranks);
  return total;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Types and reductions

const std::vector<DataType>& all_types() {
  static const std::vector<DataType> types = [] {
    std::vector<DataType> t = {
        {"int8", ncclInt8, 1, false},   {"uint8", ncclUint8, 1, false},
        {"int32", ncclInt32, 4, false}, {"uint32", ncclUint32, 4, false},
        {"int64", ncclInt64, 8, false}, {"uint64", ncclUint64, 8, false},
        {"fp16", ncclFloat16, 2, true}, {"bf16", ncclBfloat16, 2, true},
        {"fp32", ncclFloat32, 4, true}, {"fp64", ncclFloat64, 8, true},
    };
    // fp8 needs NCCL 2.24 in both the headers and the loaded library (as nccl-tests checks).
#if GPB_NCCL_HAS_FP8
    if (runtime_nccl_version() >= GPB_NCCL_FP8_MIN_VERSION) {
      t.push_back({"fp8_e4m3", ncclFloat8e4m3, 1, true});
      t.push_back({"fp8_e5m2", ncclFloat8e5m2, 1, true});
    }
#endif
    return t;
  }();
  return types;
}

const DataType& parse_type(const std::string& name) {
  // nccl-tests' names (-d half, float, bfloat16, f8e4m3, ...) are among the aliases.
  const std::string key = canonical_dtype(name);
  for (const DataType& t : all_types())
    if (t.name == key) return t;
  if (key == "fp8_e4m3" || key == "fp8_e5m2")
    throw InputError(
        fmt::format("--type: '{}' needs NCCL 2.24 or later (built with {}.{}.{}, running {})", name,
                    NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, nccl_library_version()));
  throw InputError(fmt::format("--type: '{}' is not one of {}", name, names_of(all_types())));
}

const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> ops = {{"sum", ncclSum}, {"prod", ncclProd},
                                            {"min", ncclMin}, {"max", ncclMax},
                                            {"avg", ncclAvg}, {"mulsum", ncclNumOps}};
  return ops;
}

const ReduceOp& parse_op(const std::string& name) {
  const std::string key = lowercase(trim(name));
  for (const ReduceOp& op : all_ops())
    if (op.name == key) return op;
  throw InputError(fmt::format("--op: '{}' is not one of {}", name, names_of(all_ops())));
}

// ---------------------------------------------------------------------------------------------
// Collectives

double Collective::alg_factor(int nranks) const {
  if (nranks < 1) return 0;
  return kind == Kind::HyperCube ? (nranks - 1.0) / nranks : 1.0;
}

double Collective::bus_factor(int nranks) const {
  const double n = nranks;
  if (nranks < 1) return 0;
  switch (kind) {
    case Kind::AllReduce:
      return 2 * (n - 1) / n;
    case Kind::AllGather:
    case Kind::ReduceScatter:
    case Kind::AllToAll:
    case Kind::Gather:
    case Kind::Scatter:
    case Kind::AllToAllV:
      return (n - 1) / n;
    case Kind::Broadcast:
    case Kind::Reduce:
    case Kind::SendRecv:
    case Kind::HyperCube:  // its algbw already counts only the slices that move
      return 1;
  }
  return 1;
}

std::size_t Collective::count_for(std::uint64_t size_bytes, int type_bytes, int nranks) const {
  if (type_bytes <= 0 || nranks <= 0) return 0;
  const std::uint64_t elems = size_bytes / static_cast<std::uint64_t>(type_bytes);
  if (!sliced(kind)) return static_cast<std::size_t>(elems);
  const std::uint64_t align = type_bytes < 16 ? 16 / static_cast<std::uint64_t>(type_bytes) : 1;
  return static_cast<std::size_t>(elems / static_cast<std::uint64_t>(nranks) / align * align);
}

std::uint64_t Collective::size_for(std::size_t count, int type_bytes, int nranks) const {
  if (kind == Kind::AllToAllV)
    return static_cast<std::uint64_t>(alltoallv_total(*this, count, type_bytes, nranks)) *
           static_cast<std::uint64_t>(type_bytes);
  const std::uint64_t bytes =
      static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(type_bytes);
  return sliced(kind) ? bytes * static_cast<std::uint64_t>(nranks) : bytes;
}

std::size_t Collective::send_elems(std::size_t count, int nranks) const {
  switch (kind) {
    case Kind::ReduceScatter:
    case Kind::AllToAll:
    case Kind::Scatter:
      return count * static_cast<std::size_t>(nranks);
    case Kind::AllToAllV:  // every per-peer share rounds down: at most n x count
      return count * static_cast<std::size_t>(nranks);
    default:
      return count;
  }
}

std::size_t Collective::recv_elems(std::size_t count, int nranks) const {
  switch (kind) {
    case Kind::AllGather:
    case Kind::AllToAll:
    case Kind::Gather:
    case Kind::HyperCube:
      return count * static_cast<std::size_t>(nranks);
    case Kind::AllToAllV:
      return count * static_cast<std::size_t>(nranks);
    default:
      return count;
  }
}

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> collectives = {
      {Kind::AllReduce, "all_reduce", true, false},
      {Kind::AllGather, "all_gather", false, false},
      {Kind::ReduceScatter, "reduce_scatter", true, false},
      {Kind::Broadcast, "broadcast", false, true},
      {Kind::Reduce, "reduce", true, true},
      {Kind::AllToAll, "alltoall", false, false},
      {Kind::SendRecv, "sendrecv", false, false},
      {Kind::Gather, "gather", false, true},
      {Kind::Scatter, "scatter", false, true},
      {Kind::AllToAllV, "alltoallv", false, false},
      {Kind::HyperCube, "hypercube", false, false},
  };
  return collectives;
}

std::vector<Collective> parse_collectives(const std::string& list) {
  // Names compare without case, '_' or '-': "allreduce", "AllGather", "all-to-all" all work;
  // "all" (alone or in the list) stands for every collective. Order as given, no duplicates.
  const auto squash = [](const std::string& s) {
    std::string out;
    for (const char c : lowercase(s))
      if (c != '_' && c != '-') out += c;
    return out;
  };
  const std::string valid = "all, " + names_of(all_collectives());
  std::vector<Collective> chosen;
  const auto add = [&](const Collective& c) {
    const bool seen = std::any_of(chosen.begin(), chosen.end(),
                                  [&](const Collective& x) { return x.kind == c.kind; });
    if (!seen) chosen.push_back(c);
  };
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = list.find(',', start);
    const std::string item =
        trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty())
      throw InputError(fmt::format("--collective: empty name in '{}' (one of {})", list, valid));
    if (squash(item) == "all") {
      for (const Collective& c : all_collectives()) add(c);
    } else {
      const auto it =
          std::find_if(all_collectives().begin(), all_collectives().end(),
                       [&](const Collective& c) { return squash(c.name) == squash(item); });
      if (it == all_collectives().end())
        throw InputError(fmt::format("--collective: '{}' is not one of {}", item, valid));
      add(*it);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return chosen;
}

// ---------------------------------------------------------------------------------------------
// The NCCL call

namespace {

// The NCCL op of a call: the fixed ones as they are; mulsum a PreMulSum op with this rank's
// scalar (collective_mulsum_scalar) in the element type, made for the call and destroyed after
// it is queued (as nccl-tests does, so the time holds the same host work).
class ScopedOp {
 public:
  ScopedOp(const ReduceOp& op, bool reduces, const DataType& t, int rank, ncclComm_t comm)
      : nccl(op.nccl), comm_(comm) {
    if (!reduces || op.nccl != ncclNumOps) return;
    const double s = collective_mulsum_scalar(rank);
    unsigned char scalar[8] = {};
    fill_scalar(scalar, t, s);
    GPB_NCCL_CHECK(ncclRedOpCreatePreMulSum(&nccl, scalar, t.nccl, ncclScalarHostImmediate, comm));
    made_ = true;
  }
  ~ScopedOp() {
    if (made_) (void)ncclRedOpDestroy(nccl, comm_);
  }
  ScopedOp(const ScopedOp&) = delete;
  ScopedOp& operator=(const ScopedOp&) = delete;
  operator ncclRedOp_t() const { return nccl; }
  ncclRedOp_t nccl;

 private:
  // The scalar (1 or 2) in the element type's bits.
  static void fill_scalar(unsigned char* out, const DataType& t, double s) {
    const bool two = s == 2.0;
    const auto put = [&](auto v) { std::memcpy(out, &v, sizeof v); };
    switch (static_cast<int>(t.nccl)) {
      case ncclInt8:
        return put(static_cast<std::int8_t>(s));
      case ncclUint8:
        return put(static_cast<std::uint8_t>(s));
      case ncclInt32:
        return put(static_cast<std::int32_t>(s));
      case ncclUint32:
        return put(static_cast<std::uint32_t>(s));
      case ncclInt64:
        return put(static_cast<std::int64_t>(s));
      case ncclUint64:
        return put(static_cast<std::uint64_t>(s));
      case ncclFloat16:
        return put(static_cast<std::uint16_t>(two ? 0x4000 : 0x3C00));
      case ncclBfloat16:
        return put(static_cast<std::uint16_t>(two ? 0x4000 : 0x3F80));
      case ncclFloat32:
        return put(static_cast<float>(s));
      case ncclFloat64:
        return put(s);
#if GPB_NCCL_HAS_FP8
      case ncclFloat8e4m3:
        return put(static_cast<std::uint8_t>(two ? 0x40 : 0x38));
      case ncclFloat8e5m2:
        return put(static_cast<std::uint8_t>(two ? 0x40 : 0x3C));
#endif
    }
  }
  ncclComm_t comm_;
  bool made_ = false;
};

// gather and scatter: NCCL's own where the library has them (2.28+), else what nccl-tests does:
// one send per rank to the root (gather) or from it (scatter), in one group.
void issue_rooted_copy(Kind kind, const void* sendbuf, void* recvbuf, std::size_t count,
                       const DataType& t, int root, ncclComm_t comm, int rank, int nranks,
                       cudaStream_t stream) {
#if GPB_NCCL_HAS_ALLTOALL
  if (runtime_nccl_version() >= GPB_NCCL_ALLTOALL_MIN_VERSION) {
    if (kind == Kind::Gather)
      GPB_NCCL_CHECK(ncclGather(sendbuf, recvbuf, count, t.nccl, root, comm, stream));
    else
      GPB_NCCL_CHECK(ncclScatter(sendbuf, recvbuf, count, t.nccl, root, comm, stream));
    return;
  }
#endif
  const std::size_t slice = count * static_cast<std::size_t>(t.bytes);
  GPB_NCCL_CHECK(ncclGroupStart());
  if (kind == Kind::Gather) {
    GPB_NCCL_CHECK(ncclSend(sendbuf, count, t.nccl, root, comm, stream));
    if (rank == root)
      for (int r = 0; r < nranks; ++r)
        GPB_NCCL_CHECK(
            ncclRecv(static_cast<char*>(recvbuf) + r * slice, count, t.nccl, r, comm, stream));
  } else {
    if (rank == root)
      for (int r = 0; r < nranks; ++r)
        GPB_NCCL_CHECK(ncclSend(static_cast<const char*>(sendbuf) + r * slice, count, t.nccl, r,
                                comm, stream));
    GPB_NCCL_CHECK(ncclRecv(recvbuf, count, t.nccl, root, comm, stream));
  }
  GPB_NCCL_CHECK(ncclGroupEnd());
}

// alltoallv: this rank's parts for ranks 0..n-1 lie one after another in sendbuf, and the parts
// from ranks 0..n-1 one after another in recvbuf; an empty part is neither sent nor received.
void issue_alltoallv(const Collective& c, const void* sendbuf, void* recvbuf, std::size_t count,
                     const DataType& t, ncclComm_t comm, int rank, int nranks,
                     cudaStream_t stream) {
  const auto bytes = static_cast<std::size_t>(t.bytes);
  std::size_t sent = 0, received = 0;
  GPB_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < nranks; ++r) {
    const std::size_t out = alltoallv_peer_elems(c, count, t.bytes, rank, r, nranks);
    const std::size_t in = alltoallv_peer_elems(c, count, t.bytes, r, rank, nranks);
    if (out > 0)
      GPB_NCCL_CHECK(
          ncclSend(static_cast<const char*>(sendbuf) + sent * bytes, out, t.nccl, r, comm, stream));
    if (in > 0)
      GPB_NCCL_CHECK(
          ncclRecv(static_cast<char*>(recvbuf) + received * bytes, in, t.nccl, r, comm, stream));
    sent += out;
    received += in;
  }
  GPB_NCCL_CHECK(ncclGroupEnd());
}

// hypercube (nccl-tests' definition): the own slice goes to its place in recvbuf, then in round
// k = 1, 2, 4, ... each rank swaps the k slices it holds with rank ^ k.
void issue_hypercube(const void* sendbuf, void* recvbuf, std::size_t count, const DataType& t,
                     ncclComm_t comm, int rank, int nranks, cudaStream_t stream) {
  const std::size_t slice = count * static_cast<std::size_t>(t.bytes);
  char* out = static_cast<char*>(recvbuf);
  char* own = out + static_cast<std::size_t>(rank) * slice;
  if (own != sendbuf)
    GPB_CUDA_CHECK(cudaMemcpyAsync(own, sendbuf, slice, cudaMemcpyDeviceToDevice, stream));
  for (int mask = 1; mask < nranks; mask <<= 1) {
    const int held = rank & ~(mask - 1);  // first slice this rank holds
    const int wanted = held ^ mask;       // first slice its partner holds
    const std::size_t elems = count * static_cast<std::size_t>(mask);
    GPB_NCCL_CHECK(ncclGroupStart());
    GPB_NCCL_CHECK(ncclSend(out + static_cast<std::size_t>(held) * slice, elems, t.nccl,
                            rank ^ mask, comm, stream));
    GPB_NCCL_CHECK(ncclRecv(out + static_cast<std::size_t>(wanted) * slice, elems, t.nccl,
                            rank ^ mask, comm, stream));
    GPB_NCCL_CHECK(ncclGroupEnd());
  }
}

}  // namespace

void issue(const Collective& c, const void* sendbuf, void* recvbuf, std::size_t count,
           const DataType& t, const ReduceOp& reduce_op, int root, ncclComm_t comm, int rank,
           int nranks, cudaStream_t stream) {
  const ScopedOp op(reduce_op, c.reduces, t, rank, comm);
  switch (c.kind) {
    case Kind::AllReduce:
      GPB_NCCL_CHECK(ncclAllReduce(sendbuf, recvbuf, count, t.nccl, op, comm, stream));
      return;
    case Kind::AllGather:
      GPB_NCCL_CHECK(ncclAllGather(sendbuf, recvbuf, count, t.nccl, comm, stream));
      return;
    case Kind::ReduceScatter:
      GPB_NCCL_CHECK(ncclReduceScatter(sendbuf, recvbuf, count, t.nccl, op, comm, stream));
      return;
    case Kind::Broadcast:
      GPB_NCCL_CHECK(ncclBroadcast(sendbuf, recvbuf, count, t.nccl, root, comm, stream));
      return;
    case Kind::Reduce:
      GPB_NCCL_CHECK(ncclReduce(sendbuf, recvbuf, count, t.nccl, op, root, comm, stream));
      return;
    case Kind::AllToAll: {
#if GPB_NCCL_HAS_ALLTOALL
      // nccl-tests uses NCCL's own alltoall where the library has it (2.28+)...
      if (runtime_nccl_version() >= GPB_NCCL_ALLTOALL_MIN_VERSION) {
        GPB_NCCL_CHECK(ncclAlltoAll(sendbuf, recvbuf, count, t.nccl, comm, stream));
        return;
      }
#endif
      // ...and otherwise one send and one receive of `count` elements per peer, self included,
      // in one group: slice r of the send buffer goes to rank r, slice r of the receive buffer
      // comes from rank r.
      const std::size_t slice = count * static_cast<std::size_t>(t.bytes);
      const char* send = static_cast<const char*>(sendbuf);
      char* recv = static_cast<char*>(recvbuf);
      GPB_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < nranks; ++r) {
        GPB_NCCL_CHECK(ncclSend(send + r * slice, count, t.nccl, r, comm, stream));
        GPB_NCCL_CHECK(ncclRecv(recv + r * slice, count, t.nccl, r, comm, stream));
      }
      GPB_NCCL_CHECK(ncclGroupEnd());
      return;
    }
    case Kind::SendRecv: {
      const int next = (rank + 1) % nranks;
      const int prev = (rank - 1 + nranks) % nranks;
      GPB_NCCL_CHECK(ncclGroupStart());
      GPB_NCCL_CHECK(ncclSend(sendbuf, count, t.nccl, next, comm, stream));
      GPB_NCCL_CHECK(ncclRecv(recvbuf, count, t.nccl, prev, comm, stream));
      GPB_NCCL_CHECK(ncclGroupEnd());
      return;
    }
    case Kind::Gather:
    case Kind::Scatter:
      issue_rooted_copy(c.kind, sendbuf, recvbuf, count, t, root, comm, rank, nranks, stream);
      return;
    case Kind::AllToAllV:
      issue_alltoallv(c, sendbuf, recvbuf, count, t, comm, rank, nranks, stream);
      return;
    case Kind::HyperCube:
      issue_hypercube(sendbuf, recvbuf, count, t, comm, rank, nranks, stream);
      return;
  }
}

// In-place forms, as NCCL (and nccl-tests) define them:
//  - all_gather: this rank's input is its own slice of the output, recvbuf + rank*count.
//  - reduce_scatter: the output is this rank's slice of the input, recvbuf = sendbuf +
//    rank*count, so the input starts rank*count elements BEFORE recvbuf: the caller passes as
//    recvbuf a pointer rank*count elements into a buffer of send_elems(count) elements.
//  - gather and hypercube as all_gather, scatter as reduce_scatter.
//  - the others: the same buffer. (nccl-tests does not verify in-place alltoall, alltoallv and
//    sendrecv: a rank overwrites data it has not sent yet; their in-place output is undefined.)
const void* in_place_send(const Collective& c, const void* recvbuf, std::size_t count,
                          const DataType& t, int rank) {
  const std::size_t offset =
      static_cast<std::size_t>(rank) * count * static_cast<std::size_t>(t.bytes);
  switch (c.kind) {
    case Kind::AllGather:
    case Kind::Gather:
    case Kind::HyperCube:
      return static_cast<const char*>(recvbuf) + offset;
    case Kind::ReduceScatter:
    case Kind::Scatter:
      return static_cast<const char*>(recvbuf) - offset;
    default:
      return recvbuf;
  }
}

bool output_in_input(const Collective& c) {
  return c.kind == Kind::ReduceScatter || c.kind == Kind::Scatter;
}

bool in_place_defined(const Collective& c) {
  return c.kind != Kind::AllToAll && c.kind != Kind::AllToAllV && c.kind != Kind::SendRecv;
}

std::string cannot_run(const Collective& c, int nranks) {
  if (c.kind == Kind::HyperCube && (nranks < 1 || (nranks & (nranks - 1)) != 0))
    return fmt::format("hypercube needs a power-of-two number of ranks, not {}", nranks);
  if (c.kind == Kind::AllToAllV && nranks > kMaxAlltoallvRanks)
    return fmt::format("alltoallv is checked on at most {} ranks, not {}", kMaxAlltoallvRanks,
                       nranks);
  return "";
}

}  // namespace gpubench::allreduce
