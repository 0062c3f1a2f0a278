#include "checkpoint/read_tensor.h"

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort::detail {

void check_unchanged(const std::string& path, const std::vector<ReadTensor>& reads) {
  for (const ReadTensor& read : reads) {
    if (static_cast<int64_t>(read.tensor._version()) == read.version) continue;
    throw CheckpointError(concat(
        "asynchronous checkpoint '", path, "' was abandoned: '", read.name,
        "' was changed before the save had read it, so the file would have mixed two steps. "
        "Call AsyncCheckpointer::before_update() before optimizer.step() (and before anything "
        "else that changes the parameters or the optimizer's state); the previous checkpoint at "
        "that path is unchanged"));
  }
}

}  // namespace cohort::detail
