#pragma once
// One rank of a data-parallel run (run.cpp): its part of the flat parameter buffer, gradients
// and optimizer state as its strategy holds them, the model (model::TrainStage) placed in them,
// and the collectives it runs between the model's units (TrainHooks) and after backward.
#include <nccl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpubench/core/cuda.hpp"
#include "gpubench/core/ranks.hpp"
#include "gpubench/kernels/gemm_check.cuh"
#include "gpubench/model/train_stage.hpp"
#include "gpubench/modules/dp/dp.hpp"

namespace gpubench::dp {

// A replica's collectives on its communicator, bf16 / fp16 sums: all-reduce in place,
// reduce-scatter and all-gather (chunk elements a rank; in place when recv / send is rank r's
// chunk of the other). With `skip`, nothing runs (the step without communication).
class Collectives {
 public:
  Collectives(ncclComm_t comm, int rank, int ranks, ActDtype dtype);
  bool skip = false;
  void all_reduce(void* data, std::int64_t elems, cudaStream_t st);
  void reduce_scatter(const void* send, void* recv, std::int64_t chunk, cudaStream_t st);
  void all_gather(const void* send, void* recv, std::int64_t chunk, cudaStream_t st);
  // A collective of each kind at 64K elements and at `largest` (a whole bucket's elements, a
  // multiple of the ranks), so that the connections and buffers NCCL sets up on a size's first
  // use (its algorithm and protocol for that size) exist before the replica's memory is counted.
  // On `self`'s stream; returns when they are done (ending the rank as RankGroup::sync does).
  void warm(RankGroup& group, Rank& self, std::int64_t largest);
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }

 private:
  ncclComm_t comm_;
  int rank_, ranks_;
  ncclDataType_t type_;
};

class Replica final : public model::TrainHooks {
 public:
  // The model over `batch` sequences of rank r (sequences r x batch, ...), its buffers as
  // `strategy` holds them for `plan`, weights initialised (the same on every rank), moments 0.
  Replica(const Settings& s, Strategy strategy, const ParamPlan& plan, std::int64_t batch,
          Collectives& comm, int device, cudaStream_t st, const Faults& faults = {});
  // Bytes planned before anything is allocated (memory_plan's), for a replica whose model is
  // `ts` (not built: its shapes alone).
  static MemoryPlan plan_memory(const Settings& s, Strategy strategy, const ParamPlan& plan,
                                const model::TrainStage& ts);

  // One training step on `st`: forward, backward with the gradients' collectives as their
  // buckets complete, then the optimizer (and zero's gather of weights). With a tally, the first
  // block's input-linear gradient GEMMs are checked on the way.
  void step(cudaStream_t st, GemmCheckTally* tally = nullptr);
  // The collectives a step runs, alone, back to back on `st`.
  void collectives_alone(cudaStream_t st);

  // The next step() records its spans (TraceSpan); trace() reads them against `start`, recorded
  // on the step's stream just before it, once the step is done.
  void arm_trace() { tracing_ = true; }
  std::vector<TraceSpan> trace(const Event& start);

  // After a step: the reduced gradient (the sum over the ranks) and the fp32 master weight at
  // flat element e, as this rank holds them (NaN where it does not: another rank's shard).
  struct Sample {
    bool mine = true;                         // false: another rank's shard holds it (nothing read)
    double grad = 0, master = 0, moment = 0;  // moment: AdamW's first moment (m)
    double weight = 0;  // the low-precision weight the next step computes with (gathered)
  };
  Sample sample(std::int64_t e) const;
  // An order-independent hash of every bit of what each rank holds whole: the weights (not fsdp,
  // whose ranks hold shards: 0) and, for ddp, the master weights. Synchronous on `st`.
  std::uint64_t state_hash(cudaStream_t st) const;

  void before_forward(int unit, cudaStream_t st) override;
  void after_forward(int unit, cudaStream_t st) override;
  void before_backward(int unit, cudaStream_t st) override;
  void after_backward(int unit, cudaStream_t st) override;

 private:
  bool sharded_grads() const { return k_ == Strategy::Zero2 || k_ == Strategy::Fsdp; }
  char* ptr(const DeviceBuffer& b, std::int64_t elems) const {
    return static_cast<char*>(b.get()) + elems * eb_;
  }
  // Where flat element e lives in this rank's shard arrays (-1: not this rank's).
  std::int64_t shard_index(std::int64_t e) const;
  void init_weights(cudaStream_t st);
  // The params of bucket b at weights `w` and gradients `g` laid out as the bucket (null: keep).
  void place_bucket(int b, char* w, char* g);
  // fsdp: bucket b's weights gathered into its slot before `st` goes on, the next one prefetched.
  void gathered(int b, int next, cudaStream_t st);
  void gather(int b);
  void reduce_bucket(int b, cudaStream_t st);
  void optimizer(cudaStream_t st);
  // zero1/zero2: every rank's updated chunks to every rank, in place (one NCCL group).
  void gather_updated(cudaStream_t st);

  const Settings& s_;
  Strategy k_;
  const ParamPlan& plan_;
  Collectives& comm_;
  Faults faults_;
  int device_, rank_;
  std::int64_t eb_;
  std::vector<model::TrainParam> params_;
  std::unique_ptr<model::TrainStage> ts_;
  DeviceBuffer weights_, grads_, master_, m_, v_, dgrad_;
  std::array<DeviceBuffer, 2> staging_, slots_;
  Stream comm_stream_;
  Event started_, ready_, synced_;
  std::array<Event, 2> staging_free_, slot_free_, slot_full_;
  std::array<int, 2> slot_holds_{-1, -1};
  int step_ = 0;
  // Tracing: the spans of the armed step, each begun and ended by an event.
  struct Mark {
    std::string name;
    int lane;
    Event begin, end;
  };
  bool tracing_ = false;
  std::vector<Mark> marks_;
  void mark_begin(std::string name, int lane, cudaStream_t st);
  void mark_end(int lane, cudaStream_t st);  // the mark open on that lane
  std::array<int, 2> open_{-1, -1};
  std::string unit_name(int unit) const;
};

}  // namespace gpubench::dp
