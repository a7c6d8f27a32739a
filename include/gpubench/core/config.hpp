#pragma once
// config.ini: sections = subcommands (plus [common] for every module), keys = long option
// names. Parsed here into argument lists that go through the same CLI11 parsing as argv.
#include <cstddef>
#include <string>
#include <vector>

namespace gpubench {

struct IniEntry {
  std::string key, value;
  int line = 0;
};

struct IniSection {
  std::string name;
  int line = 0;
  std::vector<IniEntry> entries;
};

struct IniFile {
  std::string origin;  // file name, for messages
  std::vector<IniSection> sections;
  const IniSection* find(const std::string& name) const;
};

// Comments start with ';' or '#' at the start of a line (or after whitespace). Keys before any
// section, duplicate sections or keys, lines without '=', and empty keys are errors
// (InputError "file:line: ...").
IniFile parse_ini(const std::string& text, const std::string& origin);
// A config file is at most this large (a full one is a few KiB).
inline constexpr std::size_t kMaxConfigBytes = 1u << 20;
// Reads and parses a file (or a pipe): missing, unreadable, a folder, or larger than
// kMaxConfigBytes (/dev/zero) -> InputError.
IniFile load_ini(const std::string& path);

// ["--key=value", ...] for one section (empty when the section is absent). A value "true" on a
// flag becomes "--key", "false" is dropped (flags are named in `flags`).
std::vector<std::string> section_args(const IniFile& ini, const std::string& section,
                                      const std::vector<std::string>& flags = {});

}  // namespace gpubench
