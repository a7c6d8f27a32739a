// Default options of the sanitized builds (GPUBENCH_SANITIZE), compiled into each sanitized
// executable: the CUDA runtime maps memory where ASan keeps its shadow gap, and the driver's
// libraries (libcuda, NVML: loaded, never unloaded) hold memory to the end, which is theirs.
// Undefined behaviour stops the program with a stack trace.
extern "C" const char* __asan_default_options() {
  return "protect_shadow_gap=0:detect_leaks=0";
}
extern "C" const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
