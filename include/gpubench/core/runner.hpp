#pragma once
// Runs one module end to end: GPU selection, Context, module.run, report metadata.
#include <string>
#include <vector>

#include "gpubench/core/context.hpp"
#include "gpubench/core/module.hpp"
#include "gpubench/core/result.hpp"
#include "gpubench/core/system.hpp"

namespace gpubench {

// ISO 8601 UTC timestamp of now ("2026-11-22T07:31:16Z").
std::string utc_now();

// The report's "config": the common options with the stopping rule they give, then the
// module's effective options.
ojson effective_config(const Module& module, const CommonOptions& common);

// Runs `module` with `common`. Bad input (GPU list, option values found bad at run time)
// throws InputError; a module that needs a GPU on a machine without one throws NoGpuError.
// A module that is unsupported here returns a report with status "skipped" and the reason in
// `error`; a module that fails returns status "failed" and why. Never writes files itself: a
// run that stalls (Context::watchdog) hands the report of what finished to `on_stall`, which
// writes it and returns the exit code the process then ends with.
Report run_module(Module& module, const CommonOptions& common, const System& system,
                  const std::string& run_id, const std::vector<std::string>& command,
                  const Context::StallSink& on_stall = {});

// Runs `module` inside the run of `parent` (check's battery): on the parent's GPUs with its common
// options, as a run of its own with its own report and metadata, under the parent's run id; a
// stall inside it reaches the parent's stall sink with the nested report; the parent's progress
// line is taken up again where it stood.
Report run_nested(Module& module, Context& parent);

}  // namespace gpubench
