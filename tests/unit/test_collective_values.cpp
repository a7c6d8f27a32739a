// The collective check's formulas on the host: every rank's input is generated as the kernels
// generate it, the collective is replayed in the element type's own arithmetic in the orders and
// avg paths NCCL can use (ring from any rank, reversed, tree; premultiplied 1/n or sum then
// 1/n; integer wrap-around), and every output element must pass the check. A corrupted element
// and the poison must fail it.
#include <gtest/gtest.h>

#include <type_traits>
#include <vector>

#include "gpubench/kernels/collectives_values.cuh"

using namespace gpubench;

namespace {

template <class T>
double as_double(T x) {
  return Elem<T>::to_double(x);
}

// a + b and a * b as the type computes them: integers wrap, floats round once.
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return Elem<T>::from_double(as_double(a) + as_double(b));
  }
}
template <class T>
T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return Elem<T>::from_double(as_double(a) * as_double(b));
  }
}

template <class T>
T combine(CollectiveReduction r, T a, T b) {
  switch (r) {
    case CollectiveReduction::Sum:
    case CollectiveReduction::Avg:
    case CollectiveReduction::MulSum:
      return add(a, b);
    case CollectiveReduction::Prod:
      return mul(a, b);
    case CollectiveReduction::Min:
      return as_double(b) < as_double(a) ? b : a;
    case CollectiveReduction::Max:
      return as_double(b) > as_double(a) ? b : a;
  }
  return a;
}

enum class Order { Ring, RingFromMiddle, Reversed, Tree };
constexpr Order kOrders[] = {Order::Ring, Order::RingFromMiddle, Order::Reversed, Order::Tree};

// The reduction of `xs` in `order`; float avg premultiplies by 1/n rounded to the type
// (ncclDevPreMulSum) or multiplies the sum (SumPostDiv); integer avg divides the sum, truncated.
template <class T>
T replay(std::vector<T> xs, CollectiveReduction red, Order order, bool post_div) {
  const int n = static_cast<int>(xs.size());
  const double inverse = std::is_same_v<T, double> ? 1.0 / n : static_cast<float>(1.0 / n);
  const bool float_avg = red == CollectiveReduction::Avg && !std::is_integral_v<T>;
  if (float_avg && !post_div)
    for (T& x : xs) x = mul(x, Elem<T>::from_double(inverse));
  if (red == CollectiveReduction::MulSum)  // PreMulSum: each rank's scalar, in the type
    for (int r = 0; r < n; ++r)
      xs[r] = mul(xs[r], Elem<T>::from_double(collective_mulsum_scalar(r)));
  T acc = xs[0];
  switch (order) {
    case Order::Ring:
      for (int r = 1; r < n; ++r) acc = combine(red, acc, xs[r]);
      break;
    case Order::RingFromMiddle:
      acc = xs[n / 2];
      for (int i = 1; i < n; ++i) acc = combine(red, acc, xs[(n / 2 + i) % n]);
      break;
    case Order::Reversed:
      acc = xs[n - 1];
      for (int r = n - 2; r >= 0; --r) acc = combine(red, acc, xs[r]);
      break;
    case Order::Tree:
      while (xs.size() > 1) {
        std::vector<T> next;
        for (std::size_t i = 0; i + 1 < xs.size(); i += 2)
          next.push_back(combine(red, xs[i], xs[i + 1]));
        if (xs.size() % 2) next.push_back(xs.back());
        xs.swap(next);
      }
      acc = xs[0];
      break;
  }
  if (red == CollectiveReduction::Avg) {
    if (float_avg && post_div) acc = Elem<T>::from_double(as_double(acc) * inverse);
    if constexpr (std::is_signed_v<T> && std::is_integral_v<T>)
      acc = static_cast<T>(static_cast<long long>(acc) / n);
    else if constexpr (std::is_integral_v<T>)
      acc = static_cast<T>(static_cast<unsigned long long>(acc) / static_cast<unsigned>(n));
  }
  return acc;
}

bool reduces(CollectiveLayout l) {
  return l == CollectiveLayout::AllReduce || l == CollectiveLayout::ReduceScatter ||
         l == CollectiveLayout::Reduce;
}

// Element j of alltoallv's output at rank d.rank: the sources' parts in rank order, each the
// part of the source's input it addressed to this rank (after its parts for lower ranks).
template <class T>
T alltoallv_output(const std::vector<std::vector<T>>& inputs, const CollectiveData& d,
                   std::size_t j) {
  const int n = d.nranks;
  const int bytes = collective_elem_bytes(d.elem);
  const auto part = [&](int from, int to) {
    return collective_alltoallv_elems(d.count, bytes, n, d.skew, ((to - from) % n + n) % n);
  };
  for (int src = 0; src < n; ++src) {
    if (j < part(src, d.rank)) {
      std::size_t offset = 0;
      for (int k = 0; k < d.rank; ++k) offset += part(src, k);
      return inputs[src][offset + j];
    }
    j -= part(src, d.rank);
  }
  return T{};
}

// Replays one collective for all ranks' inputs and checks the outputs of a few ranks.
template <class T>
void replay_collective(CollectiveElem elem, CollectiveLayout layout, CollectiveReduction red, int n,
                       std::size_t count) {
  CollectiveData base;
  base.layout = layout;
  base.elem = elem;
  base.reduction = red;
  base.nranks = n;
  base.root = n - 1;
  base.count = count;
  base.seed = 0x5EED + static_cast<std::uint64_t>(n);
  base.skew = 0.7;  // alltoallv: an uneven split between even and the default

  std::vector<std::vector<T>> inputs(n);
  for (int r = 0; r < n; ++r) {
    CollectiveData d = base;
    d.rank = r;
    const Plan p = make_plan(d);
    for (std::size_t i = 0; i < collective_send_elems(d); ++i)
      inputs[r].push_back(Elem<T>::from_double(input_value(p, r, i, shared_hash(p.seed, i))));
  }

  std::vector<T> column(n);
  const auto reduced = [&](std::size_t idx, Order order, bool post_div) {
    for (int r = 0; r < n; ++r) column[r] = inputs[r][idx];
    return replay(column, red, order, post_div);
  };
  // Copies have one outcome; reductions one per order and avg path.
  std::vector<std::pair<Order, bool>> variants = {{Order::Ring, false}};
  if (reduces(layout))
    for (Order order : kOrders)
      variants.push_back({order, true}), variants.push_back({order, false});
  for (int me : {0, 1, n - 1}) {
    CollectiveData d = base;
    d.rank = me;
    const Plan p = make_plan(d);
    for (const auto& [order, post_div] : variants) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " rank=" << me << " order="
                                      << static_cast<int>(order) << " post_div=" << post_div);
      std::size_t wrong = 0;
      const std::size_t elems = collective_checked_elems(d);
      for (std::size_t j = 0; j < elems; ++j) {
        T got{};
        switch (layout) {
          case CollectiveLayout::AllReduce:
          case CollectiveLayout::Reduce:
            got = reduced(j, order, post_div);
            break;
          case CollectiveLayout::ReduceScatter:
            got = reduced(me * count + j, order, post_div);
            break;
          case CollectiveLayout::AllGather:
            got = inputs[j / count][j % count];
            break;
          case CollectiveLayout::Broadcast:
            got = inputs[base.root][j];
            break;
          case CollectiveLayout::AllToAll:
            got = inputs[j / count][me * count + j % count];
            break;
          case CollectiveLayout::SendRecv:
            got = inputs[(me - 1 + n) % n][j];
            break;
          case CollectiveLayout::Gather:
            got = inputs[j / count][j % count];
            break;
          case CollectiveLayout::Scatter:
            got = inputs[base.root][me * count + j];
            break;
          case CollectiveLayout::AllToAllV:
            got = alltoallv_output<T>(inputs, d, j);
            break;
        }
        const double want = expected_value<T>(p, j);
        if (!output_ok(as_double(got), want, p)) ++wrong;
        if (j == elems / 2) {
          EXPECT_FALSE(output_ok(as_double(Elem<T>::from_double(2 * want + 1)), want, p));
          EXPECT_FALSE(output_ok(as_double(Elem<T>::poison()), want, p));
        }
      }
      EXPECT_EQ(wrong, 0u);
    }
  }
}

template <class T>
void replay_all(CollectiveElem elem) {
  const CollectiveLayout layouts[] = {CollectiveLayout::AllReduce,     CollectiveLayout::AllGather,
                                      CollectiveLayout::ReduceScatter, CollectiveLayout::Broadcast,
                                      CollectiveLayout::Reduce,        CollectiveLayout::AllToAll,
                                      CollectiveLayout::SendRecv,      CollectiveLayout::Gather,
                                      CollectiveLayout::Scatter,       CollectiveLayout::AllToAllV};
  const CollectiveReduction reductions[] = {CollectiveReduction::Sum, CollectiveReduction::Prod,
                                            CollectiveReduction::Min, CollectiveReduction::Max,
                                            CollectiveReduction::Avg, CollectiveReduction::MulSum};
  for (int n : {2, 3, 5, 8, 64, 130})
    for (CollectiveLayout layout : layouts)
      for (CollectiveReduction red : reductions) {
        if (layout == CollectiveLayout::AllToAllV && n > kMaxAlltoallvRanks) break;
        SCOPED_TRACE(testing::Message() << "layout=" << static_cast<int>(layout)
                                        << " reduction=" << static_cast<int>(red));
        replay_collective<T>(elem, layout, red, n, 61);
        if (!reduces(layout)) break;  // the reduction does not matter
      }
}

}  // namespace

TEST(CollectiveValues, Int8) {
  replay_all<std::int8_t>(CollectiveElem::Int8);
}
TEST(CollectiveValues, Uint8) {
  replay_all<std::uint8_t>(CollectiveElem::Uint8);
}
TEST(CollectiveValues, Int32) {
  replay_all<std::int32_t>(CollectiveElem::Int32);
}
TEST(CollectiveValues, Uint32) {
  replay_all<std::uint32_t>(CollectiveElem::Uint32);
}
TEST(CollectiveValues, Int64) {
  replay_all<std::int64_t>(CollectiveElem::Int64);
}
TEST(CollectiveValues, Uint64) {
  replay_all<std::uint64_t>(CollectiveElem::Uint64);
}
TEST(CollectiveValues, Fp16) {
  replay_all<__half>(CollectiveElem::Fp16);
}
TEST(CollectiveValues, Bf16) {
  replay_all<__nv_bfloat16>(CollectiveElem::Bf16);
}
TEST(CollectiveValues, Fp32) {
  replay_all<float>(CollectiveElem::Fp32);
}
TEST(CollectiveValues, Fp64) {
  replay_all<double>(CollectiveElem::Fp64);
}
TEST(CollectiveValues, Fp8E4M3) {
  replay_all<__nv_fp8_e4m3>(CollectiveElem::Fp8E4M3);
}
TEST(CollectiveValues, Fp8E5M2) {
  replay_all<__nv_fp8_e5m2>(CollectiveElem::Fp8E5M2);
}

// The exact ranges behind the values: sums of every rank's largest value stay exact.
TEST(CollectiveValues, DenseValuesFitTheExactRange) {
  for (int n : {2, 3, 4, 8, 16, 64, 127, 128, 300}) {
    CollectiveData d;
    d.nranks = n;
    d.reduction = CollectiveReduction::Sum;
    for (CollectiveElem e :
         {CollectiveElem::Int8, CollectiveElem::Uint8, CollectiveElem::Fp16, CollectiveElem::Bf16,
          CollectiveElem::Fp8E4M3, CollectiveElem::Fp8E5M2}) {
      d.elem = e;
      const Plan p = make_plan(d);
      const std::uint64_t worst =
          p.dense_max >= 1 ? p.dense_max * static_cast<std::uint64_t>(n) : p.dense_limit;
      EXPECT_LE(worst, exact_integer_limit(e)) << "n=" << n << " elem=" << static_cast<int>(e);
    }
  }
}
