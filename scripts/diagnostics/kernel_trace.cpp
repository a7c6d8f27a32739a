// Kernel timeline of any CUDA program, gpubench's decode step among them: a CUPTI injection
// library that writes every kernel's GPU start and end (ns), graph id, graph node, stream, grid
// and block x and mangled name, one kernel a line, to $KTRACE_FILE (default ktrace.tsv).
// Kernels replayed from a CUDA graph are recorded one by one; programmatic dependent launches
// show as a kernel starting before the previous one ends. kernel_timeline.py summarizes a file.
//
// Build (CUPTI comes with the CUDA toolkit's extras, or from PyPI: nvidia-cuda-cupti of the
// toolkit's major and minor version):
//   g++ -O2 -shared -fPIC -o libkernel_trace.so kernel_trace.cpp -I$CUPTI/include
//       -I/usr/local/cuda/include -L$CUPTI/lib -lcupti -Wl,-rpath,'$ORIGIN'   (one line)
// Run:
//   CUDA_INJECTION64_PATH=$PWD/libkernel_trace.so KTRACE_FILE=trace.tsv gpubench seqlen ...
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

FILE* g_out = nullptr;
std::mutex g_mutex;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || g_out == nullptr) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(g_out, "%llu\t%llu\t%u\t%llu\t%u\t%d\t%d\t%s\n",
                 static_cast<unsigned long long>(k->start), static_cast<unsigned long long>(k->end),
                 k->graphId, static_cast<unsigned long long>(k->graphNodeId), k->streamId, k->gridX,
                 k->blockX, k->name != nullptr ? k->name : "?");
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  if (dropped != 0 && g_out != nullptr) std::fprintf(g_out, "#dropped %zu\n", dropped);
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_out != nullptr) std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection(void) {
  const char* path = std::getenv("KTRACE_FILE");
  g_out = std::fopen(path != nullptr ? path : "ktrace.tsv", "w");
  if (g_out == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path != nullptr ? path : "ktrace.tsv");
    return 0;
  }
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI refused kernel activity records\n");
    return 0;
  }
  std::atexit(finish);
  return 1;
}
