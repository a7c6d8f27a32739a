// The collectives of `gpubench allreduce` as nccl-tests defines them: types, reductions, the
// count/size of each collective, its bus-bandwidth factor, and the NCCL call.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "allreduce.hpp"
#include "gpubench/core/errors.hpp"
#include "gpubench/core/nccl.hpp"
#include "gpubench/core/nccl_compat.hpp"
#include "gpubench/core/units.hpp"

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

// Per-rank slices of all_gather, reduce_scatter and alltoall: nccl-tests divides the element
// count by the ranks and rounds down to whole 16-byte units, so every slice stays aligned.
bool sliced(Kind k) {
  return k == Kind::AllGather || k == Kind::ReduceScatter || k == Kind::AllToAll;
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
  static const std::vector<ReduceOp> ops = {
      {"sum", ncclSum}, {"prod", ncclProd}, {"min", ncclMin}, {"max", ncclMax}, {"avg", ncclAvg}};
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

double Collective::bus_factor(int nranks) const {
  const double n = nranks;
  if (nranks < 1) return 0;
  switch (kind) {
    case Kind::AllReduce:
      return 2 * (n - 1) / n;
    case Kind::AllGather:
    case Kind::ReduceScatter:
    case Kind::AllToAll:
      return (n - 1) / n;
    case Kind::Broadcast:
    case Kind::Reduce:
    case Kind::SendRecv:
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
  const std::uint64_t bytes =
      static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(type_bytes);
  return sliced(kind) ? bytes * static_cast<std::uint64_t>(nranks) : bytes;
}

std::size_t Collective::send_elems(std::size_t count, int nranks) const {
  if (kind == Kind::ReduceScatter || kind == Kind::AllToAll)
    return count * static_cast<std::size_t>(nranks);
  return count;
}

std::size_t Collective::recv_elems(std::size_t count, int nranks) const {
  if (kind == Kind::AllGather || kind == Kind::AllToAll)
    return count * static_cast<std::size_t>(nranks);
  return count;
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

void issue(const Collective& c, const void* sendbuf, void* recvbuf, std::size_t count,
           const DataType& t, const ReduceOp& op, int root, ncclComm_t comm, int rank, int nranks,
           cudaStream_t stream) {
  switch (c.kind) {
    case Kind::AllReduce:
      GPB_NCCL_CHECK(ncclAllReduce(sendbuf, recvbuf, count, t.nccl, op.nccl, comm, stream));
      return;
    case Kind::AllGather:
      GPB_NCCL_CHECK(ncclAllGather(sendbuf, recvbuf, count, t.nccl, comm, stream));
      return;
    case Kind::ReduceScatter:
      GPB_NCCL_CHECK(ncclReduceScatter(sendbuf, recvbuf, count, t.nccl, op.nccl, comm, stream));
      return;
    case Kind::Broadcast:
      GPB_NCCL_CHECK(ncclBroadcast(sendbuf, recvbuf, count, t.nccl, root, comm, stream));
      return;
    case Kind::Reduce:
      GPB_NCCL_CHECK(ncclReduce(sendbuf, recvbuf, count, t.nccl, op.nccl, root, comm, stream));
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
  }
}

// In-place forms, as NCCL (and nccl-tests) define them:
//  - all_gather: this rank's input is its own slice of the output, recvbuf + rank*count.
//  - reduce_scatter: the output is this rank's slice of the input, recvbuf = sendbuf +
//    rank*count, so the input starts rank*count elements BEFORE recvbuf: the caller passes as
//    recvbuf a pointer rank*count elements into a buffer of send_elems(count) elements.
//  - the others: the same buffer. (nccl-tests does not verify in-place alltoall and sendrecv:
//    a rank overwrites data it has not sent yet; their in-place output is undefined.)
const void* in_place_send(const Collective& c, const void* recvbuf, std::size_t count,
                          const DataType& t, int rank) {
  const std::size_t offset =
      static_cast<std::size_t>(rank) * count * static_cast<std::size_t>(t.bytes);
  switch (c.kind) {
    case Kind::AllGather:
      return static_cast<const char*>(recvbuf) + offset;
    case Kind::ReduceScatter:
      return static_cast<const char*>(recvbuf) - offset;
    default:
      return recvbuf;
  }
}

}  // namespace gpubench::allreduce
