// DiLoCo as a CheckpointPart (include/cohort/torch/local_sgd/diloco.h): what a checkpoint keeps
// of it, under the part's archive:
//   step, fragments                  int64 scalars
//   rounds_of_fragment               int64 [F]: each fragment's round count (a hook's iteration)
//   synchronized_at                  int64 [F]: the step each fragment's progress was last sent
//                                    at (checkpoints written before it: the fragments due at the
//                                    saved step count as synchronized then, the others not)
//   outer/<i>                        the outer parameters, float32, in order
//   outer_optimizer                  nested: the outer optimizer's save()
//   in_flight                        int64 scalar: rounds started but not applied (overlap)
//   round/<j>/fragment, /apply_at    int64 scalars; round/<j>/average: its averaged buffer
#include <torch/torch.h>

#include <string>
#include <utility>

#include "checkpoint/checkpoint_state.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/local_sgd/diloco.h"

namespace cohort {
namespace {

using detail::write_int;
using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

[[noreturn]] void throw_unfit(const std::string& what) {
  throw CheckpointError(detail::concat("its DiLoCo state ", what));
}

torch::Tensor read_tensor(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isTensor()) throw_unfit("has no '" + key + "'");
  return value.toTensor();
}

int64_t read_int(InputArchive& archive, const std::string& key) {
  const torch::Tensor value = read_tensor(archive, key);
  if (value.numel() != 1 || value.scalar_type() != torch::kInt64) {
    throw_unfit("holds '" + key + "' as something other than an integer");
  }
  return value.item<int64_t>();
}

std::string round_key(size_t round, const char* field) {
  return "round/" + std::to_string(round) + "/" + field;
}

}  // namespace

void DiLoCo::before_save() {
  // The rounds in flight were started on every rank, and a hook's finish may be a collective
  // (PowerSGD's second allreduce): every rank finishes them here, so that their averages, what a
  // resumed run applies at their steps, are in rank 0's part.
  for (Round& round : in_flight_) {
    if (round.work) round.work->wait();
    if (round.finish) round.finish();
    round.work = nullptr;
    round.finish = nullptr;
  }
}

void DiLoCo::save(OutputArchive& archive) {
  for (const Round& round : in_flight_) {
    COHORT_CHECK(!round.work && !round.finish,
                 "DiLoCo::save: a round is still in flight; the checkpoint calls before_save() "
                 "on every rank first");
  }
  write_int(archive, "step", step_);
  write_int(archive, "fragments", options_.fragments);
  archive.write("rounds_of_fragment", torch::tensor(rounds_of_fragment_), /*is_buffer=*/true);
  archive.write("synchronized_at", torch::tensor(synchronized_at_), /*is_buffer=*/true);
  for (size_t i = 0; i < outer_parameters_.size(); ++i) {
    archive.write("outer/" + std::to_string(i), outer_parameters_[i].detach(), true);
  }
  OutputArchive outer(archive.compilation_unit());
  outer_->save(outer);
  archive.write("outer_optimizer", outer);
  write_int(archive, "in_flight", static_cast<int64_t>(in_flight_.size()));
  for (size_t j = 0; j < in_flight_.size(); ++j) {
    write_int(archive, round_key(j, "fragment"), in_flight_[j].fragment);
    write_int(archive, round_key(j, "apply_at"), in_flight_[j].apply_at);
    archive.write(round_key(j, "average"), in_flight_[j].flat, /*is_buffer=*/true);
  }
}

std::vector<int64_t> DiLoCo::saved_synchronized_at(InputArchive& archive, int64_t step) const {
  c10::IValue value;
  if (!archive.try_read("synchronized_at", value)) {  // a checkpoint written before it was kept
    std::vector<int64_t> at(static_cast<size_t>(options_.fragments), -1);
    for (int64_t f = 0; f < options_.fragments; ++f) {
      if (options_.overlap_steps == 0 && due(f, step)) at[static_cast<size_t>(f)] = step;
    }
    return at;
  }
  const torch::Tensor saved = value.isTensor() ? value.toTensor() : torch::Tensor();
  if (!saved.defined() || saved.scalar_type() != torch::kInt64 ||
      saved.numel() != options_.fragments) {
    throw_unfit("holds 'synchronized_at' as something other than an integer per fragment");
  }
  return {saved.data_ptr<int64_t>(), saved.data_ptr<int64_t>() + options_.fragments};
}

void DiLoCo::load(InputArchive& archive) {
  const int64_t fragments = read_int(archive, "fragments");
  if (fragments != options_.fragments) {
    throw_unfit(
        detail::concat("has ", fragments, " fragments, but this DiLoCo has ", options_.fragments));
  }
  const int64_t step = read_int(archive, "step");
  const torch::Tensor rounds = read_tensor(archive, "rounds_of_fragment");
  if (step < 0 || rounds.scalar_type() != torch::kInt64 || rounds.numel() != fragments) {
    throw_unfit("has a negative step or no round count per fragment");
  }
  std::vector<torch::Tensor> outer;
  for (size_t i = 0; i < outer_parameters_.size(); ++i) {
    torch::Tensor saved = read_tensor(archive, "outer/" + std::to_string(i));
    if (saved.sizes() != outer_parameters_[i].sizes() ||
        saved.scalar_type() != outer_parameters_[i].scalar_type()) {
      throw_unfit(detail::concat("holds outer parameter ", i, " as ", saved.sizes(),
                                 ", not this model's ", outer_parameters_[i].sizes()));
    }
    outer.push_back(std::move(saved));
  }
  c10::IValue extra;
  if (archive.try_read("outer/" + std::to_string(outer_parameters_.size()), extra)) {
    throw_unfit(
        detail::concat("has more outer parameters than this model's ", outer_parameters_.size()));
  }
  std::vector<Round> restored;
  const int64_t in_flight = read_int(archive, "in_flight");
  for (int64_t j = 0; j < in_flight; ++j) {
    Round round;
    round.fragment = read_int(archive, round_key(static_cast<size_t>(j), "fragment"));
    round.apply_at = read_int(archive, round_key(static_cast<size_t>(j), "apply_at"));
    round.flat = read_tensor(archive, round_key(static_cast<size_t>(j), "average"));
    if (round.fragment < 0 || round.fragment >= fragments) throw_unfit("has a round out of range");
    int64_t elements = 0;
    for (size_t i : members_[static_cast<size_t>(round.fragment)])
      elements += parameters_[i].numel();
    if (round.flat.dim() != 1 || round.flat.numel() != elements) {
      throw_unfit("has a round whose average does not fit its fragment");
    }
    restored.push_back(std::move(round));
  }
  std::vector<int64_t> synchronized_at = saved_synchronized_at(archive, step);
  InputArchive outer_state;
  if (!archive.try_read("outer_optimizer", outer_state)) throw_unfit("has no outer optimizer");
  for (Round& round : in_flight_) {  // this run's own rounds end before they are replaced
    if (round.work) round.work->wait();
  }
  outer_->load(outer_state);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < outer.size(); ++i) outer_parameters_[i].copy_(outer[i]);
  step_ = step;
  rounds_of_fragment_.assign(rounds.data_ptr<int64_t>(), rounds.data_ptr<int64_t>() + fragments);
  synchronized_at_ = std::move(synchronized_at);
  in_flight_ = std::move(restored);
}

}  // namespace cohort
