#include "checkpoint/shard_pieces.h"

#include <algorithm>
#include <utility>

#include "checkpoint/checkpoint_state.h"
#include "checkpoint/state_snapshot.h"
#include "cohort/core/check.h"

namespace cohort::detail {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

constexpr const char* kNotShardFile =
    "; the file passed its checksum, so it was written wrong or by something else: load an older "
    "checkpoint, or start the run over";

std::string value_key(size_t tensor) {
  return "tensor/" + std::to_string(tensor) + "/value";
}

std::string state_key(size_t tensor) {
  return "state/" + std::to_string(tensor);
}

// [begin, begin + length) of `tensor`'s elements as a tensor over the same memory but with a
// storage of its own: an archive writes a view's whole storage, this one just the range. It
// keeps `tensor`'s memory alive. (Non-contiguous tensors, which shards are not, are copied.)
torch::Tensor range_of(const torch::Tensor& tensor, int64_t begin, int64_t length) {
  torch::Tensor flat = tensor.detach().reshape({-1});
  if (length == 0) return torch::empty({0}, flat.options());
  char* data = static_cast<char*>(flat.data_ptr()) + begin * flat.element_size();
  return torch::from_blob(
      data, {length}, [flat](void*) {}, flat.options());
}

// The same, as a copy (of tensors that change before the archive is written: buffers).
torch::Tensor range_copy(const torch::Tensor& tensor, int64_t begin, int64_t length) {
  return range_of(tensor, begin, length).clone();
}

// `range` itself, or a copy of it kept in `snapshot` under `key`.
torch::Tensor staged(TensorSnapshot* snapshot, const std::string& key, const torch::Tensor& range) {
  return snapshot != nullptr ? snapshot->copy(key, range) : range;
}

void write_state(OutputArchive& archive, size_t tensor, const FlatState& state, int64_t begin,
                 int64_t length, TensorSnapshot* snapshot) {
  OutputArchive nested(archive.compilation_unit());
  if (state.has_step) write_int(nested, "step", state.step);
  for (const auto& [name, field] : state.fields) {
    nested.write(name,
                 staged(snapshot, state_key(tensor) + "/" + name, range_of(field, begin, length)),
                 /*is_buffer=*/true);
  }
  archive.write(state_key(tensor), nested);
}

[[noreturn]] void throw_bad_piece(const std::string& file, const std::string& what) {
  throw CheckpointError(concat("shard file '", file, "' ", what, kNotShardFile));
}

// The 1-D tensor at `key`, of `length` elements (and of `dtype` unless it is undefined).
torch::Tensor read_piece(const std::string& file, InputArchive& archive, const std::string& key,
                         int64_t length, c10::optional<torch::ScalarType> dtype) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isTensor()) {
    throw_bad_piece(file, concat("has no entry '", key, "', which the manifest says it holds"));
  }
  torch::Tensor tensor = value.toTensor();
  if (tensor.dim() != 1 || tensor.numel() != length || (dtype && tensor.scalar_type() != *dtype)) {
    throw_bad_piece(file, concat("holds '", key, "' as ", c10::toString(tensor.scalar_type()), " ",
                                 tensor.sizes(), " where the manifest says ", length, " elements",
                                 dtype ? " of " + std::string(c10::toString(*dtype)) : ""));
  }
  return tensor;
}

}  // namespace

std::vector<SavedRange> saved_ranges(const RankHoldings& holdings, int rank) {
  std::vector<SavedRange> ranges;
  for (const ParameterShard& shard : holdings.shards) {
    // An even split among the replicas: replica i saves [length * i / R, length * (i + 1) / R).
    const int64_t begin = shard.length * shard.replica / shard.replicas;
    const int64_t end = shard.length * (shard.replica + 1) / shard.replicas;
    ranges.push_back({shard.offset + begin, end - begin});
  }
  for (const UnshardedTensor& t : holdings.unsharded) {
    ranges.push_back({0, rank == 0 ? t.tensor.numel() : 0});
  }
  return ranges;
}

std::unique_ptr<OutputArchive> shard_archive(const std::string& path, const RankHoldings& holdings,
                                             const std::vector<SavedRange>& ranges,
                                             const torch::optim::Optimizer* optimizer,
                                             const OptimizerCodec* codec, const torch::Tensor& rng,
                                             TensorSnapshot* snapshot) {
  auto archive = std::make_unique<OutputArchive>();
  const std::string context =
      concat("cannot write checkpoint '", path, "': serializing this rank's shards failed");
  or_checkpoint_error(context, "; the checkpoint was not changed", [&] {
    const size_t shards = holdings.shards.size();
    for (size_t i = 0; i < ranges.size(); ++i) {
      const SavedRange& range = ranges[i];
      if (range.length == 0) continue;
      if (i >= shards) {
        archive->write(value_key(i),
                       range_copy(holdings.unsharded[i - shards].tensor, 0, range.length),
                       /*is_buffer=*/true);
        continue;
      }
      const ParameterShard& shard = holdings.shards[i];
      const int64_t begin = range.offset - shard.offset;  // in the shard's own elements
      archive->write(value_key(i),
                     staged(snapshot, value_key(i), range_of(shard.tensor, begin, range.length)),
                     /*is_buffer=*/true);
      const auto* state = optimizer ? state_of(*optimizer, shard.tensor) : nullptr;
      if (state != nullptr) {
        write_state(*archive, i, codec->read_state(*state), begin, range.length, snapshot);
      }
    }
    if (rng.defined()) archive->write("rng", rng, /*is_buffer=*/true);
  });
  return archive;
}

uint64_t shard_snapshot_bytes(const RankHoldings& holdings, const std::vector<SavedRange>& ranges,
                              const torch::optim::Optimizer* optimizer,
                              const OptimizerCodec* codec) {
  uint64_t total = 0;
  for (size_t i = 0; i < holdings.shards.size(); ++i) {
    const torch::Tensor& shard = holdings.shards[i].tensor;
    const auto length = static_cast<uint64_t>(ranges[i].length);
    total += length * shard.element_size();
    const auto* state = optimizer ? state_of(*optimizer, shard) : nullptr;
    if (state == nullptr) continue;
    for (const auto& [name, field] : codec->read_state(*state).fields) {
      total += length * field.element_size();
    }
  }
  return total;
}

std::string encode_shard_payload(const std::string& path, const RankHoldings& holdings,
                                 const std::vector<SavedRange>& ranges,
                                 const torch::optim::Optimizer* optimizer,
                                 const OptimizerCodec* codec, const torch::Tensor& rng) {
  auto archive = shard_archive(path, holdings, ranges, optimizer, codec, rng);
  std::string bytes;
  archive_producer(path, *archive)([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

PieceCollector::PieceCollector(const std::vector<ManifestTensor>& tensors,
                               std::vector<PieceNeed> needs, int rng_rank)
    : tensors_(tensors), needs_(std::move(needs)), rng_rank_(rng_rank) {
  for (const PieceNeed& need : needs_) {
    Collected collected;
    collected.values = torch::empty({need.length}, torch::TensorOptions(need.dtype));
    collected_.push_back(std::move(collected));
  }
  progress_.resize(needs_.size());
}

std::vector<uint8_t> PieceCollector::files_needed(int world_size) const {
  std::vector<uint8_t> needed(static_cast<size_t>(world_size), 0);
  if (rng_rank_ >= 0) needed[static_cast<size_t>(rng_rank_)] = 1;
  for (const PieceNeed& need : needs_) {
    for (const ManifestPiece& piece : tensors_[need.tensor].pieces) {
      const bool overlaps =
          piece.offset < need.offset + need.length && need.offset < piece.offset + piece.length;
      if (overlaps) needed[static_cast<size_t>(piece.rank)] = 1;
    }
  }
  return needed;
}

void PieceCollector::consume(int rank, const std::string& file, const std::string& payload) {
  InputArchive archive;
  or_checkpoint_error(concat("shard file '", file, "' cannot be deserialized"), kNotShardFile,
                      [&] { archive.load_from(payload.data(), payload.size()); });
  for (size_t n = 0; n < needs_.size(); ++n) {
    for (const ManifestPiece& piece : tensors_[needs_[n].tensor].pieces) {
      if (piece.rank == rank) take_piece(n, piece, file, archive);
    }
  }
  if (rank != rng_rank_) return;
  c10::IValue value;
  if (!archive.try_read("rng", value) || !value.isTensor()) {
    throw_bad_piece(file, "has no random generator state, which the manifest says it holds");
  }
  rng_ = check_generator_state(file, value.toTensor());
}

void PieceCollector::take_piece(size_t n, const ManifestPiece& piece, const std::string& file,
                                InputArchive& archive) {
  const PieceNeed& need = needs_[n];
  const int64_t begin = std::max(need.offset, piece.offset);
  const int64_t end = std::min(need.offset + need.length, piece.offset + piece.length);
  if (end <= begin) return;
  const torch::Tensor values =
      read_piece(file, archive, value_key(need.tensor), piece.length, need.dtype);
  collected_[n]
      .values.narrow(0, begin - need.offset, end - begin)
      .copy_(values.narrow(0, begin - piece.offset, end - begin));
  progress_[n].values += end - begin;
  if (need.state) take_state(n, piece, file, archive, begin, end - begin);
}

// Note [Re-sliced state]: each piece's state is the same range of each state tensor.
void PieceCollector::take_state(size_t n, const ManifestPiece& piece, const std::string& file,
                                InputArchive& archive, int64_t begin, int64_t length) {
  const PieceNeed& need = needs_[n];
  const std::string& name = tensors_[need.tensor].name;
  InputArchive saved;
  const bool present = archive.try_read(state_key(need.tensor), saved);
  Progress& progress = progress_[n];
  Collected& collected = collected_[n];
  if (progress.state_seen >= 0 && progress.state_seen != (present ? 1 : 0)) {
    throw_bad_piece(
        file, concat("holds optimizer state for some elements of '", name, "' and not for others"));
  }
  progress.state_seen = present ? 1 : 0;
  if (!present) return;
  collected.has_state = true;
  for (const std::string& key : saved.keys()) {
    if (key == "step") {
      const int64_t step = read_int(file, saved, "step");
      if (collected.state.has_step && collected.state.step != step) {
        throw_bad_piece(file,
                        concat("says '", name, "' took ", step,
                               " optimizer steps, but another piece says ", collected.state.step));
      }
      collected.state.has_step = true;
      collected.state.step = step;
      continue;
    }
    const torch::Tensor field = read_piece(file, saved, key, piece.length, c10::nullopt);
    auto it = std::find_if(collected.state.fields.begin(), collected.state.fields.end(),
                           [&](const auto& f) { return f.first == key; });
    if (it == collected.state.fields.end()) {
      collected.state.fields.emplace_back(key, torch::empty({need.length}, field.options()));
      it = std::prev(collected.state.fields.end());
    }
    it->second.narrow(0, begin - need.offset, length)
        .copy_(field.narrow(0, begin - piece.offset, length));
    progress.fields[key] += length;
  }
}

void PieceCollector::check_complete(const std::string& checkpoint) const {
  for (size_t n = 0; n < needs_.size(); ++n) {
    const PieceNeed& need = needs_[n];
    const std::string& name = tensors_[need.tensor].name;
    bool complete = progress_[n].values == need.length;
    for (const auto& [field, copied] : progress_[n].fields) complete &= copied == need.length;
    if (complete) continue;
    throw_malformed(checkpoint, concat("its files do not hold every element of '", name,
                                       "' that its manifest says they hold"));
  }
}

}  // namespace cohort::detail
