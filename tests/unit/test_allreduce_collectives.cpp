// `gpubench allreduce` collective definitions: bus factors, nccl-tests' counts and sizes, buffer
// sizes, in-place pointers, the type/op/collective parsers, and the data kernels' host-side sizes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "gpubench/core/errors.hpp"
#include "gpubench/kernels/collectives.cuh"
#include "gpubench/modules/allreduce/allreduce.hpp"
#include "input_error.hpp"

using namespace gpubench;
using namespace gpubench::allreduce;

namespace {

const Collective& coll(Kind k) {
  for (const Collective& c : all_collectives())
    if (c.kind == k) return c;
  throw std::logic_error("no such collective");
}

using gpubench::testing::contains;

// The InputError message of `f`, or "" when it does not throw one.
template <class F>
std::string error_of(F&& f) {
  return gpubench::testing::input_error_of(f);
}

constexpr std::uint64_t MiB = 1ull << 20;

}  // namespace

TEST(AllreduceCollectives, TableInOrderWithFlags) {
  const auto& all = all_collectives();
  ASSERT_EQ(all.size(), 11u);
  const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                         "reduce",     "alltoall",   "sendrecv",       "gather",
                         "scatter",    "alltoallv",  "hypercube"};
  const Kind kinds[] = {Kind::AllReduce, Kind::AllGather, Kind::ReduceScatter, Kind::Broadcast,
                        Kind::Reduce,    Kind::AllToAll,  Kind::SendRecv,      Kind::Gather,
                        Kind::Scatter,   Kind::AllToAllV, Kind::HyperCube};
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].name, names[i]);
    EXPECT_EQ(all[i].kind, kinds[i]);
  }
  EXPECT_TRUE(coll(Kind::AllReduce).reduces);
  EXPECT_TRUE(coll(Kind::ReduceScatter).reduces);
  EXPECT_TRUE(coll(Kind::Reduce).reduces);
  EXPECT_FALSE(coll(Kind::AllGather).reduces);
  EXPECT_FALSE(coll(Kind::Broadcast).reduces);
  EXPECT_FALSE(coll(Kind::AllToAll).reduces);
  EXPECT_FALSE(coll(Kind::SendRecv).reduces);
  EXPECT_TRUE(coll(Kind::Broadcast).rooted);
  EXPECT_TRUE(coll(Kind::Reduce).rooted);
  EXPECT_FALSE(coll(Kind::AllReduce).rooted);
  EXPECT_FALSE(coll(Kind::SendRecv).rooted);
  EXPECT_TRUE(coll(Kind::Gather).rooted);
  EXPECT_TRUE(coll(Kind::Scatter).rooted);
  EXPECT_FALSE(coll(Kind::AllToAllV).rooted);
  EXPECT_FALSE(coll(Kind::HyperCube).rooted);
  for (Kind k : {Kind::Gather, Kind::Scatter, Kind::AllToAllV, Kind::HyperCube})
    EXPECT_FALSE(coll(k).reduces);
}

TEST(AllreduceCollectives, BusFactors) {
  for (int n : {2, 4, 8}) {
    SCOPED_TRACE(n);
    const double d = n;
    EXPECT_DOUBLE_EQ(coll(Kind::AllReduce).bus_factor(n), 2 * (d - 1) / d);
    EXPECT_DOUBLE_EQ(coll(Kind::AllGather).bus_factor(n), (d - 1) / d);
    EXPECT_DOUBLE_EQ(coll(Kind::ReduceScatter).bus_factor(n), (d - 1) / d);
    EXPECT_DOUBLE_EQ(coll(Kind::AllToAll).bus_factor(n), (d - 1) / d);
    EXPECT_DOUBLE_EQ(coll(Kind::Broadcast).bus_factor(n), 1.0);
    EXPECT_DOUBLE_EQ(coll(Kind::Reduce).bus_factor(n), 1.0);
    EXPECT_DOUBLE_EQ(coll(Kind::SendRecv).bus_factor(n), 1.0);
    for (Kind k : {Kind::Gather, Kind::Scatter, Kind::AllToAllV})
      EXPECT_DOUBLE_EQ(coll(k).bus_factor(n), (d - 1) / d);
    // hypercube (nccl-tests): algbw counts the (n-1)/n of the output that moves, busbw = algbw.
    EXPECT_DOUBLE_EQ(coll(Kind::HyperCube).alg_factor(n), (d - 1) / d);
    EXPECT_DOUBLE_EQ(coll(Kind::HyperCube).bus_factor(n), 1.0);
    for (const Collective& c : all_collectives()) {
      if (c.kind == Kind::HyperCube) continue;
      EXPECT_DOUBLE_EQ(c.alg_factor(n), 1.0) << c.name;
    }
  }
  EXPECT_DOUBLE_EQ(coll(Kind::AllReduce).bus_factor(2), 1.0);
  EXPECT_DOUBLE_EQ(coll(Kind::AllReduce).bus_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(coll(Kind::AllReduce).bus_factor(8), 1.75);
  EXPECT_DOUBLE_EQ(coll(Kind::AllGather).bus_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(coll(Kind::AllToAll).bus_factor(8), 0.875);
}

// Whole-buffer collectives: count = size / element, the size is the buffer every rank holds.
TEST(AllreduceCollectives, CountsOfWholeBufferCollectives) {
  for (Kind k : {Kind::AllReduce, Kind::Broadcast, Kind::Reduce, Kind::SendRecv}) {
    const Collective& c = coll(k);
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.count_for(MiB, 4, 4), 262144u);
    EXPECT_EQ(c.count_for(MiB, 2, 8), 524288u);
    EXPECT_EQ(c.count_for(8, 4, 4), 2u);
    EXPECT_EQ(c.count_for(8, 8, 4), 1u);
    EXPECT_EQ(c.count_for(7, 8, 2), 0u);
    EXPECT_EQ(c.count_for(10, 4, 2), 2u);  // whole elements only
    EXPECT_EQ(c.size_for(262144, 4, 4), MiB);
    EXPECT_EQ(c.size_for(2, 4, 8), 8u);
    EXPECT_EQ(c.send_elems(1000, 4), 1000u);
    EXPECT_EQ(c.recv_elems(1000, 4), 1000u);
  }
}

// Sliced collectives: count per rank = size / element / ranks, rounded down to whole 16-byte
// units (nccl-tests); the size is the gathered output / the reduce-scattered input / each
// rank's alltoall send buffer.
TEST(AllreduceCollectives, CountsOfSlicedCollectives) {
  for (Kind k : {Kind::AllGather, Kind::ReduceScatter, Kind::AllToAll, Kind::Gather, Kind::Scatter,
                 Kind::HyperCube}) {
    const Collective& c = coll(k);
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.count_for(MiB, 4, 4), 65536u);
    EXPECT_EQ(c.size_for(65536, 4, 4), MiB);
    EXPECT_EQ(c.count_for(MiB, 8, 8), 16384u);
    EXPECT_EQ(c.count_for(MiB, 1, 2), 524288u);
    // Too small for one 16-byte unit per rank.
    EXPECT_EQ(c.count_for(8, 4, 4), 0u);
    EXPECT_EQ(c.count_for(32, 4, 4), 0u);
    EXPECT_EQ(c.size_for(0, 4, 4), 0u);
    // 64 B on 4 ranks: 4 fp32 per rank; 96 B: 6 per rank rounded down to 4.
    EXPECT_EQ(c.count_for(64, 4, 4), 4u);
    EXPECT_EQ(c.count_for(96, 4, 4), 4u);
    EXPECT_EQ(c.size_for(c.count_for(96, 4, 4), 4, 4), 64u);
    // int8 slices are multiples of 16 elements, fp64 of 2.
    EXPECT_EQ(c.count_for(1000, 1, 4), 240u);
    EXPECT_EQ(c.count_for(1000, 8, 4), 30u);
    // 3 ranks: 1 MiB / 4 B / 3 = 87381 -> 87380.
    EXPECT_EQ(c.count_for(MiB, 4, 3), 87380u);
    EXPECT_EQ(c.size_for(87380, 4, 3), 87380u * 12);
  }
  const Collective& ag = coll(Kind::AllGather);
  EXPECT_EQ(ag.send_elems(65536, 4), 65536u);
  EXPECT_EQ(ag.recv_elems(65536, 4), 262144u);
  const Collective& rs = coll(Kind::ReduceScatter);
  EXPECT_EQ(rs.send_elems(65536, 4), 262144u);
  EXPECT_EQ(rs.recv_elems(65536, 4), 65536u);
  const Collective& a2a = coll(Kind::AllToAll);
  EXPECT_EQ(a2a.send_elems(65536, 4), 262144u);
  EXPECT_EQ(a2a.recv_elems(65536, 4), 262144u);
  for (Kind k : {Kind::Gather, Kind::HyperCube}) {
    EXPECT_EQ(coll(k).send_elems(65536, 4), 65536u);
    EXPECT_EQ(coll(k).recv_elems(65536, 4), 262144u);
  }
  EXPECT_EQ(coll(Kind::Scatter).send_elems(65536, 4), 262144u);
  EXPECT_EQ(coll(Kind::Scatter).recv_elems(65536, 4), 65536u);
}

// alltoallv's split, nccl-tests' generated pattern: 1 MiB of fp32 per rank on 4 ranks.
TEST(AllreduceCollectives, AlltoallvSplit) {
  Collective v = coll(Kind::AllToAllV);
  const std::size_t count = v.count_for(MiB, 4, 4);
  EXPECT_EQ(count, 65536u);  // mean per-peer count, as alltoall's slice
  // skew 1 (the default): nothing to itself, then 1/6, 2/6, 3/6 of 1 MiB by distance, each
  // rounded down to 16 bytes (174762.7 -> 174752 B, 349525.3 -> 349520 B, 524288 B).
  EXPECT_DOUBLE_EQ(v.skew, 1.0);
  const std::size_t by_distance[] = {0, 43688, 87380, 131072};
  for (int from = 0; from < 4; ++from)
    for (int to = 0; to < 4; ++to)
      EXPECT_EQ(alltoallv_peer_elems(v, count, 4, from, to, 4), by_distance[(to - from + 4) % 4])
          << from << "->" << to;
  EXPECT_EQ(v.size_for(count, 4, 4), (43688u + 87380u + 131072u) * 4);
  // The buffers hold any split.
  EXPECT_GE(v.send_elems(count, 4), 43688u + 87380u + 131072u);
  // skew 0: alltoall's even split.
  v.skew = 0;
  for (int to = 0; to < 4; ++to) EXPECT_EQ(alltoallv_peer_elems(v, count, 4, 1, to, 4), count);
  EXPECT_EQ(v.size_for(count, 4, 4), MiB);
  // Half way: the mean of the two, rounded down to 16 bytes.
  v.skew = 0.5;
  EXPECT_EQ(alltoallv_peer_elems(v, count, 4, 0, 0, 4), 32768u);
  EXPECT_EQ(alltoallv_peer_elems(v, count, 4, 0, 3, 4), 98304u);
  EXPECT_EQ(alltoallv_peer_elems(v, count, 4, 0, 1, 4), (((65536u * 4 + 174762u) / 2) & ~15u) / 4);
  // One rank keeps everything.
  EXPECT_EQ(alltoallv_peer_elems(v, 100, 4, 0, 0, 1), 100u);
}

TEST(AllreduceCollectives, WhichGroupsRunWhat) {
  for (int n : {1, 2, 4, 8, 64}) EXPECT_EQ(cannot_run(coll(Kind::HyperCube), n), "") << n;
  EXPECT_NE(cannot_run(coll(Kind::HyperCube), 3).find("power-of-two"), std::string::npos);
  EXPECT_NE(cannot_run(coll(Kind::HyperCube), 6).find("not 6"), std::string::npos);
  EXPECT_EQ(cannot_run(coll(Kind::AllToAllV), kMaxAlltoallvRanks), "");
  EXPECT_NE(cannot_run(coll(Kind::AllToAllV), kMaxAlltoallvRanks + 1), "");
  for (Kind k : {Kind::AllReduce, Kind::Gather, Kind::Scatter})
    EXPECT_EQ(cannot_run(coll(k), 3), "");
  for (Kind k : {Kind::AllToAll, Kind::AllToAllV, Kind::SendRecv})
    EXPECT_FALSE(in_place_defined(coll(k)));
  for (Kind k : {Kind::AllReduce, Kind::Gather, Kind::Scatter, Kind::HyperCube})
    EXPECT_TRUE(in_place_defined(coll(k)));
  for (const Collective& c : all_collectives())
    EXPECT_EQ(output_in_input(c), c.kind == Kind::ReduceScatter || c.kind == Kind::Scatter);
}

// (alltoallv's uneven shares round down per peer, so its size maps back to a smaller count.)
TEST(AllreduceCollectives, SizeOfEveryCountRoundTrips) {
  for (const Collective& c : all_collectives())
    for (int n : c.kind == Kind::AllToAllV ? std::vector<int>{} : std::vector<int>{2, 3, 4, 8})
      for (int bytes : {1, 2, 4, 8})
        for (std::uint64_t size : {std::uint64_t{8}, std::uint64_t{1000}, MiB, 8 * MiB + 24}) {
          const std::size_t count = c.count_for(size, bytes, n);
          const std::uint64_t moved = c.size_for(count, bytes, n);
          EXPECT_LE(moved, size) << c.name;
          EXPECT_EQ(c.count_for(moved, bytes, n), count) << c.name;
        }
}

TEST(AllreduceCollectives, InPlacePointers) {
  alignas(16) static char buffer[4096];
  const DataType& f32 = parse_type("fp32");
  char* base = buffer + 1024;
  EXPECT_EQ(in_place_send(coll(Kind::AllGather), base, 10, f32, 3), base + 120);
  EXPECT_EQ(in_place_send(coll(Kind::AllGather), base, 10, f32, 0), base);
  // reduce_scatter: recvbuf = sendbuf + rank*count elements.
  EXPECT_EQ(in_place_send(coll(Kind::ReduceScatter), base, 10, f32, 3), base - 120);
  EXPECT_EQ(in_place_send(coll(Kind::ReduceScatter), base, 10, f32, 0), base);
  for (Kind k : {Kind::AllReduce, Kind::Broadcast, Kind::Reduce, Kind::AllToAll, Kind::SendRecv,
                 Kind::AllToAllV})
    EXPECT_EQ(in_place_send(coll(k), base, 10, f32, 3), base);
  for (Kind k : {Kind::Gather, Kind::HyperCube})
    EXPECT_EQ(in_place_send(coll(k), base, 10, f32, 3), base + 120);
  EXPECT_EQ(in_place_send(coll(Kind::Scatter), base, 10, f32, 3), base - 120);
}

TEST(AllreduceCollectives, TypeTable) {
  const auto& types = all_types();
  // Ten types always; fp8e4m3 and fp8e5m2 with NCCL >= 2.24 (this build's headers have them;
  // the library decides at run time).
  ASSERT_TRUE(types.size() == 10u || types.size() == 12u) << types.size();
  std::set<std::string> names;
  for (const DataType& t : types) {
    names.insert(t.name);
    EXPECT_EQ(&parse_type(t.name), &t);
  }
  EXPECT_EQ(names.size(), types.size());
  const struct {
    const char* name;
    ncclDataType_t nccl;
    int bytes;
    bool floating;
  } expected[] = {{"int8", ncclInt8, 1, false},   {"uint8", ncclUint8, 1, false},
                  {"int32", ncclInt32, 4, false}, {"uint32", ncclUint32, 4, false},
                  {"int64", ncclInt64, 8, false}, {"uint64", ncclUint64, 8, false},
                  {"fp16", ncclFloat16, 2, true}, {"bf16", ncclBfloat16, 2, true},
                  {"fp32", ncclFloat32, 4, true}, {"fp64", ncclFloat64, 8, true}};
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(types[i].name, expected[i].name);
    EXPECT_EQ(types[i].nccl, expected[i].nccl);
    EXPECT_EQ(types[i].bytes, expected[i].bytes);
    EXPECT_EQ(types[i].floating, expected[i].floating);
  }
  if (types.size() == 12) {
    EXPECT_EQ(types[10].name, "fp8_e4m3");
    EXPECT_EQ(types[11].name, "fp8_e5m2");
    EXPECT_EQ(types[10].bytes, 1);
    EXPECT_TRUE(types[11].floating);
  }
}

TEST(AllreduceCollectives, ParseType) {
  EXPECT_EQ(parse_type("fp32").nccl, ncclFloat32);
  EXPECT_EQ(parse_type("FP16").nccl, ncclFloat16);
  EXPECT_EQ(parse_type(" bf16 ").nccl, ncclBfloat16);
  // nccl-tests' names.
  EXPECT_EQ(parse_type("half").name, "fp16");
  EXPECT_EQ(parse_type("float").name, "fp32");
  EXPECT_EQ(parse_type("double").name, "fp64");
  EXPECT_EQ(parse_type("bfloat16").name, "bf16");
  const std::string bad = error_of([] { parse_type("fp128"); });
  EXPECT_TRUE(contains(bad, "--type: 'fp128' is not one of int8, uint8")) << bad;
  EXPECT_TRUE(contains(bad, "fp64")) << bad;
  EXPECT_FALSE(error_of([] { parse_type(""); }).empty());
}

TEST(AllreduceCollectives, ParseOp) {
  const auto& ops = all_ops();
  ASSERT_EQ(ops.size(), 6u);
  EXPECT_EQ(parse_op("sum").nccl, ncclSum);
  // nccl-tests' PreMulSum, made per call: no fixed NCCL op.
  EXPECT_EQ(parse_op("mulsum").nccl, ncclNumOps);
  EXPECT_EQ(collective_mulsum_scalar(0), 1.0);
  EXPECT_EQ(collective_mulsum_scalar(3), 2.0);
  EXPECT_EQ(parse_op("prod").nccl, ncclProd);
  EXPECT_EQ(parse_op("min").nccl, ncclMin);
  EXPECT_EQ(parse_op("MAX").nccl, ncclMax);
  EXPECT_EQ(parse_op("avg").nccl, ncclAvg);
  const std::string bad = error_of([] { parse_op("mean"); });
  EXPECT_EQ(bad, "--op: 'mean' is not one of sum, prod, min, max, avg, mulsum");
}

TEST(AllreduceCollectives, ParseCollectives) {
  EXPECT_EQ(parse_collectives("all").size(), 11u);
  EXPECT_EQ(parse_collectives("ALL").size(), 11u);
  const auto one = parse_collectives("all_gather");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].kind, Kind::AllGather);
  const auto list = parse_collectives("sendrecv, all_reduce,allreduce,Reduce-Scatter");
  ASSERT_EQ(list.size(), 3u);  // in the order given, duplicates dropped
  EXPECT_EQ(list[0].kind, Kind::SendRecv);
  EXPECT_EQ(list[1].kind, Kind::AllReduce);
  EXPECT_EQ(list[2].kind, Kind::ReduceScatter);
  EXPECT_EQ(parse_collectives("all_to_all")[0].kind, Kind::AllToAll);

  const std::string bad = error_of([] { parse_collectives("all_reduce,allscatter"); });
  EXPECT_EQ(bad,
            "--collective: 'allscatter' is not one of all, all_reduce, all_gather, "
            "reduce_scatter, broadcast, reduce, alltoall, sendrecv, gather, scatter, alltoallv, "
            "hypercube");
  EXPECT_FALSE(error_of([] { parse_collectives(""); }).empty());
  EXPECT_FALSE(error_of([] { parse_collectives("all_reduce,"); }).empty());
  EXPECT_EQ(parse_collectives("all,all_reduce").size(), 11u);
  EXPECT_EQ(parse_collectives("broadcast,all")[0].kind, Kind::Broadcast);
}

// Host side of the data kernels: element sizes, buffer extents and tolerances.
TEST(AllreduceCollectives, DataKernelSizesAndTolerances) {
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Int8), 1);
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Uint64), 8);
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Fp16), 2);
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Bf16), 2);
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Fp64), 8);
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Fp8E4M3), 1);
  EXPECT_EQ(collective_elem_bytes(CollectiveElem::Fp8E5M2), 1);

  CollectiveData d;
  d.nranks = 4;
  d.count = 100;
  d.rank = 1;
  d.root = 2;
  d.layout = CollectiveLayout::ReduceScatter;
  EXPECT_EQ(collective_send_elems(d), 400u);
  EXPECT_EQ(collective_checked_elems(d), 100u);
  d.layout = CollectiveLayout::AllToAll;
  EXPECT_EQ(collective_send_elems(d), 400u);
  EXPECT_EQ(collective_checked_elems(d), 400u);
  d.layout = CollectiveLayout::AllGather;
  EXPECT_EQ(collective_send_elems(d), 100u);
  EXPECT_EQ(collective_checked_elems(d), 400u);
  d.layout = CollectiveLayout::Reduce;
  EXPECT_EQ(collective_checked_elems(d), 0u);  // not the root
  d.rank = 2;
  EXPECT_EQ(collective_checked_elems(d), 100u);

  // Exact everywhere but float avg.
  d.layout = CollectiveLayout::AllReduce;
  for (CollectiveReduction r : {CollectiveReduction::Sum, CollectiveReduction::Prod,
                                CollectiveReduction::Min, CollectiveReduction::Max}) {
    d.reduction = r;
    d.elem = CollectiveElem::Fp8E5M2;
    EXPECT_EQ(collective_tolerance(d), 0.0);
  }
  d.reduction = CollectiveReduction::Avg;
  d.elem = CollectiveElem::Int32;
  EXPECT_EQ(collective_tolerance(d), 0.0);
  d.elem = CollectiveElem::Fp32;
  EXPECT_GT(collective_tolerance(d), 0.0);
  EXPECT_LT(collective_tolerance(d), 1e-6);
  d.elem = CollectiveElem::Fp8E4M3;
  EXPECT_LT(collective_tolerance(d), 0.25);
  d.layout = CollectiveLayout::AllGather;  // copies: always exact
  EXPECT_EQ(collective_tolerance(d), 0.0);
}
