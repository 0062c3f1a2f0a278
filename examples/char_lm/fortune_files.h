// Reading the text of Debian's `fortunes` packages: in /usr/share/games/fortunes, one plain
// text file per theme ("computers", "pratchett", ...) holding entries (quotations, jokes,
// poems) separated by lines that hold just "%". Beside each file lie its index (`<name>.dat`,
// binary) and a `<name>.u8` link to it, which are skipped.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace char_lm {

inline const char* const kDefaultFortuneDir = "/usr/share/games/fortunes";

// Data that is missing or unusable; the message names the path and what to do.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every entry of every fortune file in `dir`, files in name order and entries in file order,
// each with its lines' newlines and without the "%" lines. Old files underline and embolden
// with backspaces ("_\bW" prints as an underlined W); only the character that shows is kept.
// Throws DataError naming `dir` when it cannot be listed or holds no fortune file, or naming
// the file that cannot be read.
std::vector<std::string> read_fortune_entries(const std::string& dir);

}  // namespace char_lm
