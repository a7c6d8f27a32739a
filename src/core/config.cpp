// A small, strict INI reader for config/*.ini.
#include "gpubench/core/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "gpubench/core/errors.hpp"
#include "gpubench/core/units.hpp"

namespace gpubench {

namespace {
// Strips a trailing " ; comment" or " # comment" (only after whitespace, so "a#b" stays).
std::string strip_comment(const std::string& s) {
  for (std::size_t i = 1; i < s.size(); ++i)
    if ((s[i] == ';' || s[i] == '#') && std::isspace(static_cast<unsigned char>(s[i - 1])))
      return s.substr(0, i);
  return s;
}
}  // namespace

const IniSection* IniFile::find(const std::string& name) const {
  for (const auto& s : sections)
    if (s.name == name) return &s;
  return nullptr;
}

IniFile parse_ini(const std::string& text, const std::string& origin) {
  IniFile ini;
  ini.origin = origin;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  IniSection* current = nullptr;
  std::set<std::string> keys;
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = trim(raw);
    if (line.empty() || line[0] == ';' || line[0] == '#') continue;
    line = trim(strip_comment(line));
    auto fail = [&](const std::string& why) {
      return InputError(fmt::format("{}:{}: {}", origin, line_no, why));
    };
    if (line.front() == '[') {
      if (line.back() != ']') throw fail(fmt::format("malformed section header '{}'", line));
      const std::string name = trim(line.substr(1, line.size() - 2));
      if (name.empty()) throw fail("empty section name");
      if (ini.find(name)) throw fail(fmt::format("section [{}] appears twice", name));
      ini.sections.push_back(IniSection{name, line_no, {}});
      current = &ini.sections.back();
      keys.clear();
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos) throw fail(fmt::format("expected 'key = value', got '{}'", line));
    const std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (key.empty()) throw fail("empty key");
    if (!current) throw fail(fmt::format("key '{}' is outside any [section]", key));
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
        value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    if (!keys.insert(key).second)
      throw fail(fmt::format("key '{}' appears twice in [{}]", key, current->name));
    current->entries.push_back(IniEntry{key, value, line_no});
  }
  return ini;
}

IniFile load_ini(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st))
    throw InputError(fmt::format("--config: cannot read '{}': it is a folder", path));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("--config: cannot read '{}'", path));
  // Read at most one byte past the cap: a huge file or an endless stream (/dev/zero) is refused
  // without being read whole; a pipe (--config <(...)) works.
  std::string text(kMaxConfigBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad()) throw InputError(fmt::format("--config: cannot read '{}'", path));
  text.resize(static_cast<std::size_t>(f.gcount()));
  if (text.size() > kMaxConfigBytes)
    throw InputError(
        fmt::format("--config: '{}' is larger than {} KiB", path, kMaxConfigBytes / 1024));
  return parse_ini(text, path);
}

std::vector<std::string> section_args(const IniFile& ini, const std::string& section,
                                      const std::vector<std::string>& flags) {
  std::vector<std::string> args;
  const IniSection* s = ini.find(section);
  if (!s) return args;
  for (const auto& e : s->entries) {
    const bool is_flag = std::find(flags.begin(), flags.end(), e.key) != flags.end();
    if (is_flag) {
      std::string v = e.value;
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (v == "true" || v == "yes" || v == "on" || v == "1")
        args.push_back("--" + e.key);
      else if (v == "false" || v == "no" || v == "off" || v == "0")
        continue;
      else
        throw InputError(fmt::format("{}:{}: '{}' takes true or false, not '{}'", ini.origin,
                                     e.line, e.key, e.value));
    } else {
      args.push_back(fmt::format("--{}={}", e.key, e.value));
    }
  }
  return args;
}

}  // namespace gpubench
