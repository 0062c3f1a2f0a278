#include "fortune_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace char_lm {

namespace {

const char* const kHowToGetThem =
    ": run ./scripts/setup (it installs Debian's fortunes package), or give a directory of "
    "fortune files with --data DIR";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Regular files only (lstat: the .u8 names are links to the same files), no .dat indexes.
bool is_fortune_file(const std::string& dir, const std::string& name) {
  if (name.empty() || name[0] == '.' || ends_with(name, ".dat")) return false;
  struct stat info;
  return ::lstat((dir + "/" + name).c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::vector<std::string> fortune_file_names(const std::string& dir) {
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) {
    throw DataError("fortune directory '" + dir + "' cannot be read (" + std::strerror(errno) +
                    ")" + kHowToGetThem);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    if (is_fortune_file(dir, entry->d_name)) names.push_back(entry->d_name);
  }
  ::closedir(listing);
  if (names.empty())
    throw DataError("fortune directory '" + dir + "' holds no fortune file" + kHowToGetThem);
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw DataError("fortune file '" + path + "' cannot be read" + kHowToGetThem);
  return text.str();
}

// `text` with every backspace and the character before it removed.
std::string remove_overstrikes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c != '\b') {
      out.push_back(c);
    } else if (!out.empty()) {
      out.pop_back();
    }
  }
  return out;
}

// The entries of one fortune file, without the "%" lines between them.
std::vector<std::string> split_entries(const std::string& text) {
  std::vector<std::string> entries;
  std::string entry;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line == "%") {
      if (!entry.empty()) entries.push_back(std::move(entry));
      entry.clear();
    } else {
      entry += line + '\n';
    }
  }
  if (!entry.empty()) entries.push_back(std::move(entry));
  return entries;
}

}  // namespace

std::vector<std::string> read_fortune_entries(const std::string& dir) {
  std::vector<std::string> entries;
  for (const std::string& name : fortune_file_names(dir)) {
    for (std::string& e : split_entries(remove_overstrikes(read_whole_file(dir + "/" + name)))) {
      entries.push_back(std::move(e));
    }
  }
  return entries;
}

}  // namespace char_lm
