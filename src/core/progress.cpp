// The status line of the running module (see progress.hpp).
#include "gpubench/core/progress.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace gpubench::progress {

namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  std::string module;
  Clock::time_point start = Clock::now();
  std::vector<std::string> lines;      // what the terminal shows now (none: nothing)
  std::size_t current = 0, total = 0;  // next()'s count
};

State& state() {
  static State s;
  return s;
}

bool stderr_is_terminal() {
  static const bool tty = [] {
    const char* term = std::getenv("TERM");
    return isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
  }();
  return tty;
}

std::size_t terminal_width() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 10) return w.ws_col;
  return 100;
}

// With the state locked: draw `lines` (each cut to the terminal's width) over what is shown;
// the cursor stays at the end of the last one.
void draw(State& s, const std::vector<std::string>& lines) {
  std::string out = "\r";
  const std::size_t width = terminal_width() - 1;
  s.lines.clear();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string shown = lines[i].size() > width ? lines[i].substr(0, width) : lines[i];
    out += (i ? "\n" : "") + std::string("\033[K") + shown;
    s.lines.push_back(std::move(shown));
  }
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

// With the state locked: clear what is shown; the cursor ends where its first line began.
void erase(State& s) {
  if (s.lines.empty()) return;
  std::string out = "\r\033[K";
  for (std::size_t i = 1; i < s.lines.size(); ++i) out += "\033[1A\r\033[K";
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
  s.lines.clear();
}

class StatusAwareSink final : public spdlog::sinks::sink {
 public:
  StatusAwareSink() : inner_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()) {}
  void log(const spdlog::details::log_msg& msg) override {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const std::vector<std::string> shown = s.lines;
    erase(s);
    inner_->log(msg);
    inner_->flush();
    if (!shown.empty()) draw(s, shown);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

std::string clock_text(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string describe(std::size_t current, std::size_t total, double elapsed_s) {
  if (total == 0) return fmt::format("{}, {}", current, clock_text(elapsed_s));
  std::string text = fmt::format("{}/{}, {}", current, total, clock_text(elapsed_s));
  const std::size_t done = current > 0 ? current - 1 : 0;
  if (done > 0 && done < total) {
    const double left = elapsed_s / static_cast<double>(done) * static_cast<double>(total - done);
    text += fmt::format(", about {} left", clock_text(left));
  }
  return text;
}

void begin(const std::string& module) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  erase(s);
  s.module = module;
  s.start = Clock::now();
  s.current = s.total = 0;
}

void expect(std::size_t total) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.total = total;
}

void next(const std::string& what) {
  State& s = state();
  std::size_t current = 0, total = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    current = ++s.current;
    total = s.total == 0 ? 0 : std::max(s.total, current);  // 0: not known
  }
  step(current, total, what);
}

void step(std::size_t current, std::size_t total, const std::string& what) {
  if (!spdlog::default_logger()->should_log(spdlog::level::info)) return;
  State& s = state();
  std::string text;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const double elapsed = std::chrono::duration<double>(Clock::now() - s.start).count();
    text = fmt::format("{} [{}] {}", s.module, describe(current, total, elapsed), what);
    if (stderr_is_terminal()) {
      draw(s, {text});
      return;
    }
  }
  spdlog::info("{}", text);
}

void end() {
  clear_line();
}

Position position() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return {s.module, s.current, s.total};
}

void resume(const Position& p) {
  begin(p.module);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.current = p.current;
  s.total = p.total;
}

bool board(const std::vector<std::string>& lines) {
  if (!stderr_is_terminal() || !spdlog::default_logger()->should_log(spdlog::level::info))
    return false;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  erase(s);
  draw(s, lines);
  return true;
}

void clear_line() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  erase(s);
}

std::shared_ptr<spdlog::sinks::sink> stderr_sink() {
  return std::make_shared<StatusAwareSink>();
}

}  // namespace gpubench::progress
