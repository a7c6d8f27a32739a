#pragma once
// Private interface of `gpubench allreduce`: the collectives (definitions, data, checks, the NCCL
// call), the sweep and the analysis (fits, knees, headline, rows). The module file ties them to
// the RankGroup and the measurement core.
#include <nccl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gpubench/core/result.hpp"

namespace gpubench::allreduce {

// ---------------------------------------------------------------------------------------------
// Types and reductions

struct DataType {
  // "int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "bf16", "fp32", "fp64",
  // "fp8_e4m3", "fp8_e5m2": canonical_dtype's names
  std::string name;
  ncclDataType_t nccl;
  int bytes;  // element size
  bool floating;
};
// Every type this build's NCCL has (fp8 only when NCCL >= 2.24 headers and library).
const std::vector<DataType>& all_types();
const DataType& parse_type(const std::string& name);  // InputError: "--type: 'x' is not one of ..."

struct ReduceOp {
  std::string name;  // "sum","prod","min","max","avg","mulsum"
  ncclRedOp_t nccl;  // mulsum: ncclNumOps, a PreMulSum op is made for each call (as nccl-tests)
};
const std::vector<ReduceOp>& all_ops();
const ReduceOp& parse_op(const std::string& name);  // InputError

// ---------------------------------------------------------------------------------------------
// Collectives

enum class Kind {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  SendRecv,
  Gather,
  Scatter,
  AllToAllV,
  HyperCube
};

// What one collective is, nccl-tests style. `size` is the byte count nccl-tests prints in its
// "size" column for that collective (all_gather, gather, hypercube: the gathered output;
// reduce_scatter, scatter: the input; alltoall, alltoallv: each rank's send buffer);
// algbw = size x alg_factor(n) / time; busbw = algbw x bus_factor(n).
struct Collective {
  Kind kind;
  std::string name;  // "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                     // "alltoall", "sendrecv", "gather", "scatter", "alltoallv", "hypercube"
  bool reduces;      // takes a reduction op
  bool rooted;       // takes a root
  double skew = 1;   // alltoallv's uneven split, 0..1 (collective_alltoallv_elems)
  // Share of `size` that algbw counts: 1, but (n-1)/n for hypercube, whose rank keeps its own
  // slice (nccl-tests' definition).
  double alg_factor(int nranks) const;
  double bus_factor(int nranks) const;
  // Elements per rank passed to the NCCL call ("count") for a given size; 0 when size is too
  // small for one element per rank where needed.
  std::size_t count_for(std::uint64_t size_bytes, int type_bytes, int nranks) const;
  // Size actually moved for a count (size rounded down to whole elements / whole per-rank slices).
  std::uint64_t size_for(std::size_t count, int type_bytes, int nranks) const;
  // Elements of each rank's send and receive buffers for `count` (alltoallv: n x count, which
  // holds every split; size_for gives what it moves).
  std::size_t send_elems(std::size_t count, int nranks) const;
  std::size_t recv_elems(std::size_t count, int nranks) const;
};
const std::vector<Collective>& all_collectives();  // in the order above
// "all" or a comma list; InputError for an unknown name.
std::vector<Collective> parse_collectives(const std::string& list);

// Queues the collective on `stream` of `rank` (of `nranks`) in `comm`. In place: recvbuf is the
// send buffer as NCCL defines it for that collective (all_gather, gather, hypercube: sendbuf =
// recvbuf + rank*count; reduce_scatter, scatter: recvbuf = sendbuf + rank*count; others sendbuf
// == recvbuf). sendrecv: each rank sends to (rank+1)%n and receives from (rank-1+n)%n inside one
// group. alltoallv: per-peer counts from collective_alltoallv_elems, in one group of sends and
// receives. hypercube: log2(n) rounds, each exchanging the slices gathered so far with the rank
// whose number differs in one bit (n a power of two).
void issue(const Collective& c, const void* sendbuf, void* recvbuf, std::size_t count,
           const DataType& t, const ReduceOp& op, int root, ncclComm_t comm, int rank, int nranks,
           cudaStream_t stream);

// Where the send data lives for the in-place form (a pointer into recvbuf) or sendbuf.
const void* in_place_send(const Collective& c, const void* recvbuf, std::size_t count,
                          const DataType& t, int rank);
// Whether the in-place output is this rank's slice of the input (reduce_scatter, scatter): the
// caller passes recvbuf rank*count elements into a buffer of send_elems(count) elements.
bool output_in_input(const Collective& c);
// Whether the in-place form has a defined output: not alltoall, alltoallv, sendrecv, where a
// rank overwrites input it has not sent yet (nccl-tests does not verify them either).
bool in_place_defined(const Collective& c);
// Why a group of `nranks` cannot run the collective, or "" (hypercube: a power of two;
// alltoallv: at most kMaxAlltoallvRanks).
std::string cannot_run(const Collective& c, int nranks);

// ---------------------------------------------------------------------------------------------
// Data and checks (kernels in kernels/collectives.cu)

// Fills this rank's send buffer with the values the check expects: deterministic per (seed,
// rank, element), small non-zero values chosen so sums, products, min and max are exact in
// every type at up to 64 ranks (floats: sums exact up to 2^mantissa; prod uses 1 and 2 only).
void init_send(const Collective& c, void* sendbuf, std::size_t count, const DataType& t,
               const ReduceOp& op, int rank, int nranks, std::uint64_t seed, cudaStream_t stream);
// Poisons the receive buffer (so unwritten elements are caught).
void poison_recv(void* recvbuf, std::size_t elems, const DataType& t, cudaStream_t stream);
// Counts the elements of this rank's output that differ from the expected values (computed on
// the GPU from the same value function); floats: relative tolerance only where the reduction
// order can round (sum/avg of floats beyond exact range, fp16/bf16/fp8 avg). Ranks without an
// output (reduce: non-root) count 0. Blocks until the count is known.
std::uint64_t count_wrong(const Collective& c, const void* recvbuf, std::size_t count,
                          const DataType& t, const ReduceOp& op, int root, int rank, int nranks,
                          std::uint64_t seed, cudaStream_t stream);
// Elements rank `from` sends rank `to` in alltoallv for a mean per-peer `count`.
std::size_t alltoallv_peer_elems(const Collective& c, std::size_t count, int type_bytes, int from,
                                 int to, int nranks);

// ---------------------------------------------------------------------------------------------
// Sweep and analysis (pure host code)

// nccl-tests sizes: from min to max multiplying by `factor` (> 1), or adding `step` when
// step > 0. Sizes are in bytes; each is rounded down to a multiple of `align` (>= 1), zero and
// duplicate sizes dropped. InputError when min > max, factor <= 1 without step, min == 0, or
// the sweep would have more than kMaxSweepSizes points.
inline constexpr double kMaxSweepSizes = 4096;
std::vector<std::uint64_t> sweep_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                       double factor, std::uint64_t step, std::uint64_t align);

// One measured point of a collective's sweep (out-of-place unless stated).
struct Point {
  std::uint64_t size = 0;  // bytes (nccl-tests "size")
  double time_s = 0;       // per op (median per-iteration time / ops per iteration)
  double algbw_GBps = 0, busbw_GBps = 0;
};

// Least-squares fit of t = alpha + size / beta over the points, weighted by 1/t^2 so small and
// large messages count alike. alpha in seconds, beta in bytes/s (algbw terms). nullopt for < 2
// points.
struct Fit {
  double alpha_s = 0;
  double beta_Bps = 0;
  double r2 = 0;  // of the weighted fit
};
std::optional<Fit> fit_alpha_beta(const std::vector<Point>& points);

// Smallest size whose busbw reaches `fraction` of the sweep's peak busbw, interpolated on log2
// size between neighbouring points; nullopt when never reached or no points.
std::optional<double> size_at_fraction_of_peak(const std::vector<Point>& points, double fraction);

}  // namespace gpubench::allreduce
