// How the strategy layer writes checkpoints: in the background (AsyncCheckpointer: training
// waits before its next update only while the save still reads the parameters) or, when asked,
// synchronously; with the figures that say what the saves cost training.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/async_checkpoint.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort {

// Summed over the saves that have finished.
struct CheckpointWriterStats {
  bool background = true;
  int64_t saves = 0;
  double save_ms = 0;     // training's time in the save calls
  double waited_ms = 0;   // before_update(): training waiting for a save still reading
  double written_ms = 0;  // background only: the writes themselves (beside training)
};

class CheckpointWriter {
 public:
  // The background checkpointer is made at the first save, which is collective as every save.
  CheckpointWriter(std::shared_ptr<Group> group, bool background);

  // save_checkpoint(path, group, state), or its background form. Collective.
  void save(const std::string& path, const TrainingState& state);
  // save_sharded_checkpoint(directory, sharded, state), or its background form. Collective.
  void save_sharded(const std::string& directory, const ShardedParameters& sharded,
                    const TrainingState& state);
  // Before the optimizer's step: waits while a background save still reads the parameters.
  void before_update();
  // Waits for the last save and throws its error. Collective.
  void finish();
  CheckpointWriterStats stats() const { return stats_; }

 private:
  AsyncCheckpointer& checkpointer();
  void count_last_save();  // adds the figures of the save that last finished, once
  template <typename Save>
  void timed(Save&& save);  // runs a synchronous save, counting its time

  std::shared_ptr<Group> group_;
  std::unique_ptr<AsyncCheckpointer> async_;
  int64_t counted_ = 0;  // AsyncSaveStats::number of the last save counted
  CheckpointWriterStats stats_;
};

}  // namespace cohort
