// The checkpoint file on disk: a payload framed by a verifying footer, written atomically.
//
//   payload (N bytes) | "COHORTCK" | version u32 | N u64 | CRC-32 of the payload u32
//
// Note [Footer last]: the footer sits at the end, so it is the last thing written. A file cut
// short at any byte has no footer where one is expected (wrong magic, or a length that does not
// match the file's size), and a changed byte in the payload changes its CRC-32, which catches
// every error burst up to 32 bits. So a damaged file is reported, never deserialized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace cohort::detail {

// Takes `size` bytes of the payload and returns `size` (after a write error too: the error is
// thrown once the producer returns, Note [Write errors under torch's writer] in
// checkpoint_file.cc); the signature of torch's OutputArchive::save_to writer.
using PayloadSink = std::function<size_t(const void* data, size_t size)>;
// Produces a payload by passing it, in order, to the sink it is given. Anything it throws
// fails the write.
using PayloadProducer = std::function<void(const PayloadSink& sink)>;

// What a streamed write reports while it runs (both optional; run on the writing thread).
struct FileWriteHooks {
  // After each piece of the payload is in the file: the payload bytes written so far. What it
  // throws fails the write (thrown once the producer returns, not through the producer).
  std::function<void(uint64_t bytes)> on_progress;
  // Once the whole payload is in the file, before the footer, the sync and the rename. What it
  // throws fails the write as a write error would (the temporary file is removed).
  std::function<void()> on_payload_written;
};

// Writes payload + footer to `path`: to `<path>.tmp.<pid>` in the same directory, synced, then
// renamed over `path`, then the directory synced (so the rename survives a crash). On failure
// removes the temporary file and throws CheckpointError naming `path` and the system's reason;
// `path` is untouched until the rename. Returns the CRC-32 of the payload (as in the footer).
uint32_t write_checkpoint_file(const std::string& path, const std::string& payload);

// The same with the payload streamed from `produce` straight into the file (its CRC-32 and
// length counted on the way), so that no copy of the whole payload is held in memory.
// `bytes`: where to put the payload's length, when not null.
uint32_t write_checkpoint_file(const std::string& path, const PayloadProducer& produce,
                               const FileWriteHooks& hooks = {}, uint64_t* bytes = nullptr);

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
