// The checkpoint file on disk: a payload framed by a verifying footer, written atomically.
//
//   payload (N bytes) | "COHORTCK" | version u32 | N u64 | CRC-32 of the payload u32
//
// Note [Footer last]: the footer sits at the end, so it is the last thing written. A file cut
// short at any byte has no footer where one is expected (wrong magic, or a length that does not
// match the file's size), and a changed byte in the payload changes its CRC-32, which catches
// every error burst up to 32 bits. So a damaged file is reported, never deserialized.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace cohort::detail {

// Writes payload + footer to `path`: to `<path>.tmp.<pid>` in the same directory, synced, then
// renamed over `path`, then the directory synced (so the rename survives a crash). On failure
// removes the temporary file and throws CheckpointError naming `path` and the system's reason;
// `path` is untouched until the rename. Returns the CRC-32 of the payload (as in the footer).
uint32_t write_checkpoint_file(const std::string& path, const std::string& payload);

// The verified payload of the file at `path`; nullopt when no file is there. Throws
// CheckpointError naming `path` when it cannot be read or fails a check of Note [Footer last].
// crc: where to put the payload's CRC-32 (the footer's, verified), when not null.
std::optional<std::string> read_checkpoint_file(const std::string& path, uint32_t* crc = nullptr);

// Creates `directory` (and its parents) where it does not exist yet, and syncs its parent so
// that the new entry survives a crash. Throws CheckpointError naming `directory` when that
// fails or when it exists but is not a directory.
void make_checkpoint_directory(const std::string& directory);

// "0x1234abcd", as the footer's CRC is named in messages.
std::string hex32(uint32_t value);

}  // namespace cohort::detail
