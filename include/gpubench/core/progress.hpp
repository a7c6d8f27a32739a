#pragma once
// Progress of the running module: case i of N, the time since it started and an estimate of
// what is left. On a terminal it is one status line on stderr, redrawn in place, which every log
// line lifts out of the way; elsewhere (a pipe, a file, Slurm's output) it is one log line per
// case, so a log keeps the order things happened in. Shown only where the log level shows info
// (not on MPI ranks other than 0).
#include <spdlog/sinks/sink.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gpubench::progress {

// A module starts: its cases count from here, and its name leads the line.
void begin(const std::string& module);
// Case `current` (from 1) of `total` starts; `what` names it. The estimate counts the cases
// before it as done. Thread-safe. A total of 0 shows the count alone.
void step(std::size_t current, std::size_t total, const std::string& what);
// The same, counting for the module: expect(total) once (or again when the count is known
// better; 0: not known, the count alone), then next(what) as each case starts.
void expect(std::size_t total);
void next(const std::string& what);
// The module ended: the status line is cleared (its tables come next).
void end();
// Where the count stands, to be taken up again after a module run inside this one (which
// begins its own): resume() begins p.module with its count, the clock restarted.
struct Position {
  std::string module;
  std::size_t current = 0, total = 0;
};
Position position();
void resume(const Position& p);
// A live view: `lines` shown in place of the status line and redrawn by the next call (a log
// line lifts them out of its way, as it does the status line). On a terminal, where the log
// level shows info, only: false elsewhere, for the caller to log plain lines now and then.
bool board(const std::vector<std::string>& lines);
// Clears the status line (before text written to stderr without the log, e.g. a fatal error).
void clear_line();

// "1:05:00" / "15:00" / "0:42": seconds as a clock (negative as 0:00); pure.
std::string clock_text(double seconds);
// "12/96, 0:41, about 2:10 left" for case 12 of 96 with 11 done (no estimate before a case is
// done); pure.
std::string describe(std::size_t current, std::size_t total, double elapsed_s);

// The stderr sink for the log: colours as spdlog's, the status line cleared before each log
// line and drawn again after it.
std::shared_ptr<spdlog::sinks::sink> stderr_sink();

}  // namespace gpubench::progress
