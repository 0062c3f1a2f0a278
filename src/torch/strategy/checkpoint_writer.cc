#include "cohort/torch/strategy/checkpoint_writer.h"

#include <chrono>

#include "cohort/torch/checkpoint/sharded_checkpoint.h"

namespace cohort {

CheckpointWriter::CheckpointWriter(std::shared_ptr<Group> group, bool background)
    : group_(std::move(group)) {
  stats_.background = background;
}

AsyncCheckpointer& CheckpointWriter::checkpointer() {
  if (!async_) async_ = std::make_unique<AsyncCheckpointer>(*group_);
  return *async_;
}

void CheckpointWriter::save(const std::string& path, const TrainingState& state) {
  if (!stats_.background) {
    timed([&] { save_checkpoint(path, *group_, state); });
    return;
  }
  checkpointer().save(path, state);
  count_last_save();
}

void CheckpointWriter::save_sharded(const std::string& directory, const ShardedParameters& sharded,
                                    const TrainingState& state) {
  if (!stats_.background) {
    timed([&] { save_sharded_checkpoint(directory, sharded, state); });
    return;
  }
  checkpointer().save_sharded(directory, sharded, state);
  count_last_save();
}

void CheckpointWriter::count_last_save() {
  const AsyncSaveStats last = async_->last_save();
  if (last.number == counted_) return;  // none finished since the last count
  counted_ = last.number;
  ++stats_.saves;
  stats_.save_ms += last.save_ms;
  stats_.waited_ms += last.waited_ms;
  stats_.written_ms += last.written_ms;
}

void CheckpointWriter::before_update() {
  if (async_) async_->before_update();
}

template <typename Save>
void CheckpointWriter::timed(Save&& save) {
  const auto start = std::chrono::steady_clock::now();
  save();
  ++stats_.saves;
  stats_.save_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void CheckpointWriter::finish() {
  if (!async_) return;
  async_->wait();
  count_last_save();
}

}  // namespace cohort
