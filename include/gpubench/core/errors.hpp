#pragma once
// Error types and the documented exit codes: every failure maps to one of them.
#include <stdexcept>
#include <string>

namespace gpubench {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,         // a benchmark or check failed (or a module inside `all`)
  kExitBadInput = 2,       // bad flag, value, config, GPU id, size, output folder
  kExitNoGpu = 3,          // no usable GPU or driver
  kExitNotWritten = 4,     // a report file could not be written (the console output stands)
  kExitVerdict = 5,        // a FAIL verdict: compare found a regression
  kExitInterrupted = 130,  // SIGINT (Ctrl-C): the finished cases are reported
  kExitTerminated = 143,   // SIGTERM (kill, Slurm's time limit): the finished cases are reported
};

// Bad input from the user: one clear line, exit 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// No usable GPU or driver: exit 3 with what was found.
struct NoGpuError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A report file could not be written (disk full, folder gone): exit 4 naming the path; the run's
// console output and every other file are kept.
struct WriteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A CUDA / NCCL / cuBLAS call failed: carries the call, file:line and GPU/rank.
struct GpuError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An allocation on the GPU failed for want of memory: a benchmark point that needs more than
// the GPU has is skipped with this reason, and the run goes on with the next.
struct OutOfMemoryError : GpuError {
  using GpuError::GpuError;
};

// GPU work did not finish within the run's --timeout: the caller aborts what may be hung
// (NCCL communicators) and reports the case.
struct TimeoutError : GpuError {
  using GpuError::GpuError;
};

// A benchmark's output did not match its reference: never reported as a number.
struct VerificationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace gpubench
