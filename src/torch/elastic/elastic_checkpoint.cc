#include "elastic/elastic_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "call_sites.h"
#include "cohort/comm/elastic.h"
#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

std::string sampler_file(const std::string& directory, int64_t step) {
  return directory + "/elastic-" + std::to_string(step) + ".txt";
}

void write_sampler_file(const std::string& directory, int64_t step, const ElasticSampler& s) {
  std::filesystem::create_directories(directory);
  const std::string path = sampler_file(directory, step), temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << s.epoch() << ' ' << s.position() << ' ' << s.skipped() << '\n';
    COHORT_CHECK(out.good(), "ElasticTrainer: cannot write '", temporary, "'");
  }
  std::filesystem::rename(temporary, path);
}

// Best effort: the sampler files of other steps (their checkpoints were replaced).
void remove_other_sampler_files(const std::string& directory, int64_t step) {
  std::error_code error;
  const std::string keep = "elastic-" + std::to_string(step) + ".txt";
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("elastic-", 0) == 0 && name != keep)
      std::filesystem::remove(entry.path(), error);
  }
}

}  // namespace

void save_elastic_checkpoint(const std::string& directory, const ShardedParameters& view,
                             torch::optim::Optimizer& optimizer, int64_t committed,
                             const ElasticSampler& sampler) {
  if (view.group->rank() == 0) write_sampler_file(directory, committed, sampler);
  TrainingState state;
  state.module = view.module;
  state.optimizer = &optimizer;
  state.step = committed;
  state.rng = false;
  save_sharded_checkpoint(directory, view, state);
  if (view.group->rank() == 0) remove_other_sampler_files(directory, committed);
}

std::optional<int64_t> load_elastic_checkpoint(const std::string& directory,
                                               const ShardedParameters& view,
                                               torch::optim::Optimizer& optimizer,
                                               ElasticSampler& sampler) {
  TrainingState state;
  state.module = view.module;
  state.optimizer = &optimizer;
  state.rng = false;
  LoadOptions options;
  options.any_job = true;  // the job's own directory, named by its options
  if (!load_sharded_checkpoint(directory, view, state, options)) return std::nullopt;
  auto place = torch::full({3}, -1, torch::kInt64);
  if (view.group->rank() == 0) {
    std::ifstream in(sampler_file(directory, state.step));
    int64_t epoch = -1, position = -1, skipped = -1;
    if (in >> epoch >> position >> skipped) place = torch::tensor({epoch, position, skipped});
  }
  CollectiveOptions root0;
  root0.site = call_sites::kElasticHeal;
  view.group->broadcast(tensor_buffer(place), root0);
  const auto* v = place.data_ptr<int64_t>();
  if (v[0] < 0) {
    throw ElasticError("ElasticTrainer: checkpoint '" + directory + "' of step " +
                       std::to_string(state.step) + " has no " +
                       sampler_file(directory, state.step) +
                       " (the sampler's place): write it with ElasticTrainer::save_checkpoint");
  }
  sampler.restore(static_cast<uint64_t>(v[0]), static_cast<size_t>(v[1]),
                  static_cast<size_t>(v[2]));
  return state.step;
}

}  // namespace cohort::detail
