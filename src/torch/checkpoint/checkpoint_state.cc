#include "checkpoint/checkpoint_state.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "checkpoint/state_snapshot.h"
#include "cohort/core/check.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"

namespace cohort::detail {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

constexpr const char* kRefitAdvice =
    "; load it into the model, optimizer and sampler of the run that saved it";
constexpr const char* kMalformedAdvice =
    "; the file passed its checksum, so it was written wrong or by something else: load an older "
    "checkpoint, or start the run over";

std::string rng_key(int64_t rank) {
  return "rng/" + std::to_string(rank);
}

std::string describe(const torch::Tensor& tensor) {
  return concat(c10::toString(tensor.scalar_type()), " ", tensor.sizes());
}

// ---- writing

template <typename Save>
void write_nested(OutputArchive& archive, const std::string& key, Save&& save) {
  OutputArchive nested(archive.compilation_unit());
  save(nested);
  archive.write(key, nested);
}

void write_grad_scaler(OutputArchive& archive, const amp::GradScaler& scaler) {
  const amp::GradScalerState saved = scaler.state();
  write_nested(archive, "grad_scaler", [&](OutputArchive& out) {
    out.write("scale", torch::tensor(saved.scale, torch::kFloat64), /*is_buffer=*/true);
    write_int(out, "growth_tracker", saved.growth_tracker);
  });
}

void write_lr_scheduler(OutputArchive& archive, const optim::WarmupDecayLR& scheduler) {
  const optim::LrSchedulerState saved = scheduler.state();
  write_nested(archive, "lr_scheduler", [&](OutputArchive& out) {
    write_int(out, "step", saved.step);
    out.write("base_lrs", torch::tensor(saved.base_lrs, torch::kFloat64), /*is_buffer=*/true);
  });
}

void write_sampler(OutputArchive& archive, const DistributedSampler& sampler) {
  const SamplerRecord record = sampler_record(sampler);
  write_nested(archive, "sampler", [&](OutputArchive& out) {
    write_int(out, "dataset_size", record.dataset_size);
    write_int(out, "epoch", record.epoch);
    write_int(out, "seed", record.seed);
    write_int(out, "shuffle", record.shuffle ? 1 : 0);
    write_int(out, "consumed", record.consumed);
  });
}

void write_text(OutputArchive& archive, const std::string& key, const std::string& text) {
  torch::Tensor bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
  archive.write(key, bytes, /*is_buffer=*/true);
}

void write_parts(OutputArchive& archive, const TrainingState& state) {
  write_nested(archive, "parts", [&](OutputArchive& parts) {
    for (const auto& [name, part] : state.parts) {
      write_nested(parts, name, [&, part = part](OutputArchive& out) { part->save(out); });
    }
  });
}

// ---- reading: everything is read and checked before anything is changed

// A text entry; "" when the file has none (files of earlier cohort versions).
std::string read_text(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isTensor()) return "";
  const torch::Tensor bytes = value.toTensor().contiguous();
  if (bytes.scalar_type() != torch::kUInt8 || bytes.dim() != 1) return "";
  const auto* data = bytes.data_ptr<uint8_t>();
  return std::string(data, data + bytes.numel());
}

std::string quoted_job(const std::string& job_id) {
  return job_id.empty() ? std::string("no job id") : "job id '" + job_id + "'";
}

// A section that the caller asked to restore must be in the file.
void read_section(const std::string& path, InputArchive& archive, const std::string& key,
                  InputArchive& section) {
  if (!archive.try_read(key, section)) throw_missing_section(path, key);
}

struct TensorCopy {
  torch::Tensor target;
  torch::Tensor saved;
};

void collect_tensor(const std::string& path, InputArchive& archive, const std::string& key,
                    const std::string& name, const torch::Tensor& target,
                    std::vector<TensorCopy>& copies) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isTensor()) {
    throw_mismatch(path, concat("the model has '", name, "' but the checkpoint does not"));
  }
  torch::Tensor saved = value.toTensor();
  if (saved.scalar_type() != target.scalar_type() || saved.sizes() != target.sizes()) {
    throw_mismatch(path, concat("'", name, "' is ", describe(saved), " in the checkpoint but ",
                                describe(target), " in the model"));
  }
  copies.push_back({target, std::move(saved)});
}

// The archive of one module, as torch::nn::Module::save lays it out: its own parameters and
// buffers, and a nested archive per serializable child. Nothing may be missing or left over.
void collect_module(const std::string& path, InputArchive& archive, const torch::nn::Module& module,
                    const std::string& prefix, std::vector<TensorCopy>& copies) {
  std::set<std::string> expected;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    collect_tensor(path, archive, item.key(), prefix + item.key(), item.value(), copies);
    expected.insert(item.key());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    collect_tensor(path, archive, item.key(), prefix + item.key(), item.value(), copies);
    expected.insert(item.key());
  }
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    InputArchive nested;
    if (!archive.try_read(child.key(), nested)) {
      throw_mismatch(path, concat("the model has a submodule '", prefix, child.key(),
                                  "' but the checkpoint does not"));
    }
    collect_module(path, nested, *child.value(), prefix + child.key() + ".", copies);
    expected.insert(child.key());
  }
  for (const std::string& key : archive.keys()) {
    if (expected.count(key) == 0) {
      throw_mismatch(path, concat("the checkpoint has '", prefix, key, "' but the model does not"));
    }
  }
}

std::vector<TensorCopy> read_model(const std::string& path, InputArchive& archive,
                                   const torch::nn::Module& module) {
  InputArchive model;
  if (!archive.try_read("model", model)) throw_malformed(path, "it has no 'model' entry");
  std::vector<TensorCopy> copies;
  collect_module(path, model, module, "", copies);
  return copies;
}

amp::GradScalerState read_grad_scaler(const std::string& path, InputArchive& archive) {
  InputArchive saved;
  read_section(path, archive, "grad_scaler", saved);
  c10::IValue scale;
  const bool found = saved.try_read("scale", scale) && scale.isTensor() &&
                     scale.toTensor().numel() == 1 &&
                     scale.toTensor().scalar_type() == torch::kFloat64;
  if (!found) throw_malformed(path, "its grad_scaler has no scale");
  amp::GradScalerState state;
  state.scale = scale.toTensor().item<double>();
  state.growth_tracker = read_int(path, saved, "growth_tracker");
  if (!state.valid()) {
    throw_malformed(path, concat("its grad_scaler holds scale ", state.scale, " and growth count ",
                                 state.growth_tracker));
  }
  return state;
}

// Note [Checkpoints without a scheduler]: a file written before TrainingState::lr_scheduler
// existed, or saved without one, has no "lr_scheduler" entry. It still loads: the scheduler
// goes on at the file's step counter with the base LRs it was made with.
optim::LrSchedulerState read_lr_scheduler(const std::string& path, InputArchive& archive,
                                          int64_t saved_step,
                                          const optim::WarmupDecayLR& scheduler) {
  InputArchive saved;
  if (!archive.try_read("lr_scheduler", saved)) {
    return lr_scheduler_fallback(path, saved_step, scheduler);
  }
  optim::LrSchedulerState state;
  state.step = read_int(path, saved, "step");
  c10::IValue lrs;
  const bool found = saved.try_read("base_lrs", lrs) && lrs.isTensor() &&
                     lrs.toTensor().dim() == 1 && lrs.toTensor().scalar_type() == torch::kFloat64;
  if (!found) throw_malformed(path, "its lr_scheduler has no base_lrs");
  const torch::Tensor base_lrs = lrs.toTensor().contiguous();
  state.base_lrs.assign(base_lrs.data_ptr<double>(),
                        base_lrs.data_ptr<double>() + base_lrs.numel());
  check_lr_scheduler_state(path, state, scheduler);
  return state;
}

SamplerPlace read_sampler(const std::string& path, InputArchive& archive,
                          const DistributedSampler& sampler) {
  InputArchive saved;
  read_section(path, archive, "sampler", saved);
  SamplerRecord record;
  record.dataset_size = read_int(path, saved, "dataset_size");
  record.epoch = read_int(path, saved, "epoch");
  record.consumed = read_int(path, saved, "consumed");
  record.seed = read_int(path, saved, "seed");
  record.shuffle = read_int(path, saved, "shuffle") != 0;
  return sampler_place(path, record, sampler);
}

// Each part's archive, in the order of state.parts.
std::vector<InputArchive> read_parts(const std::string& path, InputArchive& archive,
                                     const TrainingState& state) {
  std::vector<InputArchive> out(state.parts.size());
  if (state.parts.empty()) return out;
  InputArchive parts;
  const bool found = archive.try_read("parts", parts);
  for (size_t i = 0; i < state.parts.size(); ++i) {
    const std::string& name = state.parts[i].first;
    if (!found || !parts.try_read(name, out[i])) {
      throw CheckpointError(concat("checkpoint '", path, "' was saved without the part '", name,
                                   "' (TrainingState::parts); leave it out of the parts to load "
                                   "the checkpoint without it, or load one that has it"));
    }
  }
  return out;
}

torch::Tensor read_rng(const std::string& path, InputArchive& archive, int64_t source_rank) {
  c10::IValue value;
  if (!archive.try_read(rng_key(source_rank), value) || !value.isTensor()) {
    throw CheckpointError(concat("checkpoint '", path,
                                 "' was saved without the random "
                                 "generator state of rank ",
                                 source_rank,
                                 "; set TrainingState::rng = false to load it without"));
  }
  return check_generator_state(path, value.toTensor());
}

// ---- applying

void copy_into_module(const std::vector<TensorCopy>& copies) {
  // In place, so that the optimizer, DDP and anything else holding the tensors sees the values.
  torch::NoGradGuard no_grad;
  for (const TensorCopy& copy : copies) copy.target.copy_(copy.saved);
}

// Note [Param-group options]: torch's Optimizer::load restores the per-parameter state
// (momentum buffers, ...) but, in libtorch 1.13, not the param groups' options, so a learning
// rate lowered by a schedule would come back as the constructor's. The options are in the
// archive (param_groups/<i>/options, the layout of torch/optim/serialize.h), and each options
// class reads itself. An optimizer with another layout is left as its load() made it.
void load_param_group_options(InputArchive& saved, torch::optim::Optimizer& optimizer) {
  InputArchive groups;
  if (!saved.try_read("param_groups", groups)) return;
  auto& param_groups = optimizer.param_groups();
  for (size_t i = 0; i < param_groups.size(); ++i) {
    InputArchive group;
    InputArchive options;
    groups.read("param_groups/" + std::to_string(i), group);
    group.read("options", options);
    param_groups[i].options().serialize(options);
  }
}

void load_optimizer(const std::string& path, InputArchive& saved,
                    torch::optim::Optimizer& optimizer) {
  const std::string context = concat("checkpoint '", path, "' does not fit the optimizer");
  or_checkpoint_error(context, kRefitAdvice, [&] {
    optimizer.load(saved);
    load_param_group_options(saved, optimizer);
  });
}

}  // namespace

void write_int(OutputArchive& archive, const std::string& key, int64_t value) {
  archive.write(key, torch::tensor(value), /*is_buffer=*/true);
}

std::string to_bytes(OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

int64_t read_int(const std::string& path, InputArchive& archive, const std::string& key) {
  c10::IValue value;
  const bool found = archive.try_read(key, value) && value.isTensor() &&
                     value.toTensor().numel() == 1 &&
                     value.toTensor().scalar_type() == torch::kInt64;
  if (!found) throw_malformed(path, "it has no integer entry '" + key + "'");
  return value.toTensor().item<int64_t>();
}

std::string reason_of(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) {
    return c10_error->what_without_backtrace();
  }
  return error.what();
}

void throw_mismatch(const std::string& path, const std::string& what) {
  throw CheckpointError(concat("checkpoint '", path, "' does not fit: ", what, kRefitAdvice));
}

void throw_malformed(const std::string& path, const std::string& what) {
  throw CheckpointError(concat("checkpoint '", path,
                               "' is not a cohort training checkpoint: ", what, kMalformedAdvice));
}

void throw_missing_section(const std::string& path, const std::string& key) {
  throw CheckpointError(concat("checkpoint '", path, "' was saved without the ", key,
                               " state; set TrainingState::", key,
                               " = nullptr to load it without, or load a checkpoint that has it"));
}

// Why the loading job may not resume a checkpoint of `saved_job`, or "" when it may.
std::string passed_over_because(const std::string& path, const std::string& saved_job,
                                const JobCheck& job) {
  if (job.any_job || (!job.job_id.empty() && saved_job == job.job_id)) return "";
  return concat("checkpoint '", path, "' was written by another job (", quoted_job(saved_job),
                "; this process has ", quoted_job(job.job_id),
                ", COHORT_JOB_ID), and a job resumes only the checkpoints it wrote itself, after "
                "a restart");
}

void pass_over(const std::string& why, const LoadOptions& options, bool log, const WaysOn& ways) {
  const std::string resume = ways.resume ? ways.resume : concat(options.named_as, "any_job = true");
  const std::string start_afresh =
      ways.start_afresh ? ways.start_afresh : concat(options.named_as, "start_afresh = true");
  if (!options.start_afresh) {
    throw CheckpointError(
        concat(why, ". Nothing was loaded, and nothing is replaced: to go on from it, set ", resume,
               " (the examples' --resume); to start afresh and let the next "
               "save replace it, ",
               start_afresh,
               " (the examples' "
               "--overwrite-checkpoint); or give this job another path (docs/checkpoints.md)"));
  }
  if (log) {
    COHORT_LOG(kWarn, why, ". Starting afresh (", start_afresh, "): the next save replaces it");
  }
}

void check_lr_scheduler_state(const std::string& path, const optim::LrSchedulerState& saved,
                              const optim::WarmupDecayLR& scheduler) {
  if (!saved.valid()) {
    throw_malformed(path, concat("its lr_scheduler holds step ", saved.step,
                                 " and a base LR that is negative or not finite"));
  }
  if (saved.base_lrs.size() != scheduler.base_lrs().size()) {
    throw_mismatch(path, concat("its lr_scheduler has ", saved.base_lrs.size(),
                                " base LRs but the scheduler's optimizer has ",
                                scheduler.base_lrs().size(), " param groups"));
  }
}

optim::LrSchedulerState lr_scheduler_fallback(const std::string& path, int64_t saved_step,
                                              const optim::WarmupDecayLR& scheduler) {
  optim::LrSchedulerState state{saved_step, scheduler.base_lrs()};
  check_lr_scheduler_state(path, state, scheduler);
  return state;
}

SamplerRecord sampler_record(const DistributedSampler& sampler) {
  SamplerRecord record;
  record.dataset_size = static_cast<int64_t>(sampler.dataset_size());
  record.epoch = static_cast<int64_t>(sampler.epoch());
  // The order of the epoch's samples: a run resumed with another one would go on in a
  // different order without anyone noticing.
  record.seed = static_cast<int64_t>(sampler.options().seed);
  record.shuffle = sampler.options().shuffle;
  // Samples of the epoch consumed by all ranks together, so that a run with another number of
  // ranks can find its place (sampler_place).
  record.consumed =
      static_cast<int64_t>(sampler.position() * static_cast<size_t>(sampler.world_size()));
  return record;
}

// Note [Sampler position at another world size]: the file holds the samples of the epoch that
// all ranks consumed together, C = position * W_saved. W ranks resume at position C / W,
// rounded down: the first W * (C / W) samples of the epoch's order are skipped, the few left
// over (fewer than W) are seen again. The position is capped at the epoch's end, which padding
// can put earlier at the new world size.
SamplerPlace sampler_place(const std::string& path, const SamplerRecord& saved,
                           const DistributedSampler& sampler) {
  if (saved.dataset_size != static_cast<int64_t>(sampler.dataset_size())) {
    throw_mismatch(path, concat("it was saved with a sampler over ", saved.dataset_size,
                                " samples, but this sampler has ", sampler.dataset_size()));
  }
  const auto seed = static_cast<uint64_t>(saved.seed);
  if (seed != sampler.options().seed || saved.shuffle != sampler.options().shuffle) {
    throw_mismatch(path, concat("it was saved with a sampler with seed ", seed, " and shuffle ",
                                saved.shuffle, ", but this sampler has seed ",
                                sampler.options().seed, " and shuffle ", sampler.options().shuffle,
                                ": resume with the sampler options of the saved run"));
  }
  if (saved.epoch < 0 || saved.consumed < 0) {
    throw_malformed(path, "its sampler entries are negative");
  }
  const size_t position =
      static_cast<size_t>(saved.consumed) / static_cast<size_t>(sampler.world_size());
  return {static_cast<uint64_t>(saved.epoch), std::min(position, sampler.num_samples())};
}

void restore_sampler(DistributedSampler& sampler, const SamplerPlace& place) {
  sampler.set_epoch(place.epoch);  // before set_position, which it would undo
  sampler.set_position(place.position);
}

torch::Tensor check_generator_state(const std::string& path, const torch::Tensor& saved) {
  const torch::Tensor current = cpu_generator_state();
  if (saved.scalar_type() != torch::kUInt8 || saved.sizes() != current.sizes()) {
    throw_mismatch(
        path, concat("its random generator state is ", describe(saved), " but this libtorch's is ",
                     describe(current), " (set TrainingState::rng = false to load it without)"));
  }
  return saved.contiguous();
}

void set_cpu_generator_state(const std::string& path, const torch::Tensor& state) {
  const std::string context =
      concat("checkpoint '", path, "': restoring the random generator failed");
  or_checkpoint_error(context, " (set TrainingState::rng = false to load without it)", [&] {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  });
}

torch::Tensor cpu_generator_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  // The generator is shared by every thread drawing numbers; torch's own users lock it too.
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

std::string current_job_id() {
  return env_string("COHORT_JOB_ID").value_or("");
}

void check_training_state(const TrainingState& state, const char* caller) {
  COHORT_CHECK(state.module != nullptr, caller,
               ": TrainingState::module is null; point it at the model (it is required)");
  std::set<std::string> names;
  for (const auto& [name, part] : state.parts) {
    COHORT_CHECK(part != nullptr && !name.empty() && names.insert(name).second, caller,
                 ": TrainingState::parts needs a non-empty, unique name and a part for each "
                 "entry; '",
                 name, "' is not");
  }
}

// A data-parallel checkpoint holds rank 0's optimizer for every rank: right only when each
// rank's optimizer steps the same whole parameters. ZeroDataParallel's and
// FullyShardedDataParallel's optimizers hold this rank's shards instead, and saving one would
// silently give every rank rank 0's shard state.
void check_optimizer_holds_module_parameters(const TrainingState& state, const char* caller) {
  if (state.optimizer == nullptr) return;
  std::unordered_set<const void*> parameters;
  for (const auto& p : state.module->parameters()) parameters.insert(p.unsafeGetTensorImpl());
  for (const auto& group : state.optimizer->param_groups()) {
    for (const auto& tensor : group.params()) {
      std::ostringstream shape;
      shape << tensor.sizes();
      COHORT_CHECK(parameters.count(tensor.unsafeGetTensorImpl()) != 0, caller,
                   ": the optimizer holds a tensor of shape ", shape.str(),
                   " that is not a parameter of TrainingState::module. A data-parallel "
                   "checkpoint keeps rank 0's optimizer for every rank, which is right only "
                   "when every rank's optimizer holds the model's whole parameters; the "
                   "optimizer of a ZeroDataParallel or FullyShardedDataParallel holds this "
                   "rank's shards. Checkpoint it with save_sharded_checkpoint(directory, zero "
                   "or fsdp, state) or save_gathered_checkpoint(path, zero or fsdp, state) "
                   "(cohort/torch/checkpoint/sharded_checkpoint.h, docs/checkpoints.md).");
    }
  }
}

std::unique_ptr<OutputArchive> training_archive(const std::string& path, const TrainingState& state,
                                                int world_size,
                                                const std::vector<torch::Tensor>& rng_states,
                                                const std::string& job_id,
                                                const ModelWriter& write_model) {
  auto archive = std::make_unique<OutputArchive>();
  const std::string context =
      concat("cannot write checkpoint '", path, "': serializing the training state failed");
  or_checkpoint_error(context, "; the file was not changed", [&] {
    write_int(*archive, "step", state.step);
    write_int(*archive, "epoch", state.epoch);
    write_int(*archive, "world_size", world_size);
    if (!job_id.empty()) write_text(*archive, "job_id", job_id);
    write_nested(*archive, "model", [&](OutputArchive& out) {
      if (write_model) {
        write_model(out);
      } else {
        write_module(out, *state.module);
      }
    });
    if (state.optimizer != nullptr) {
      write_nested(*archive, "optimizer", [&](OutputArchive& out) { state.optimizer->save(out); });
    }
    if (state.sampler != nullptr) write_sampler(*archive, *state.sampler);
    if (state.grad_scaler != nullptr) write_grad_scaler(*archive, *state.grad_scaler);
    if (state.lr_scheduler != nullptr) write_lr_scheduler(*archive, *state.lr_scheduler);
    for (size_t r = 0; r < rng_states.size(); ++r) {
      archive->write(rng_key(static_cast<int64_t>(r)), rng_states[r], /*is_buffer=*/true);
    }
    if (!state.parts.empty()) write_parts(*archive, state);
  });
  return archive;
}

std::string encode_training_state(const std::string& path, const TrainingState& state,
                                  int world_size, const std::vector<torch::Tensor>& rng_states,
                                  const std::string& job_id, const ModelWriter& write_model) {
  auto archive = training_archive(path, state, world_size, rng_states, job_id, write_model);
  std::string bytes;
  archive_producer(path, *archive)([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

PayloadProducer archive_producer(const std::string& path, OutputArchive& archive) {
  return [path, &archive](const PayloadSink& sink) {
    const std::string context =
        concat("cannot write checkpoint '", path, "': serializing the training state failed");
    or_checkpoint_error(context, "; the file was not changed", [&] { archive.save_to(sink); });
  };
}

void write_module(OutputArchive& archive, const torch::nn::Module& module, TensorSnapshot* snapshot,
                  const std::string& prefix) {
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    archive.write(item.key(),
                  snapshot ? snapshot->copy(prefix + item.key(), item.value()) : item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    const torch::Tensor& buffer = item.value();
    archive.write(item.key(), buffer.defined() ? buffer.detach().clone() : buffer,
                  /*is_buffer=*/true);
  }
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    write_nested(archive, child.key(), [&](OutputArchive& out) {
      write_module(out, *child.value(), snapshot, prefix + child.key() + ".");
    });
  }
}

bool decode_training_state(const std::string& path, const std::string& payload, int rank,
                           const JobCheck& job, TrainingState& state, std::string& passed_over) {
  InputArchive archive;
  or_checkpoint_error(concat("checkpoint '", path, "' cannot be deserialized"), kMalformedAdvice,
                      [&] { archive.load_from(payload.data(), payload.size()); });
  passed_over = passed_over_because(path, read_text(archive, "job_id"), job);
  if (!passed_over.empty()) return false;
  const int64_t step = read_int(path, archive, "step");
  const int64_t epoch = read_int(path, archive, "epoch");
  const int64_t saved_world = read_int(path, archive, "world_size");
  if (saved_world < 1) throw_malformed(path, concat("its world size is ", saved_world));
  const std::vector<TensorCopy> model = read_model(path, archive, *state.module);
  InputArchive optimizer;
  if (state.optimizer != nullptr) read_section(path, archive, "optimizer", optimizer);
  SamplerPlace place;
  if (state.sampler != nullptr) place = read_sampler(path, archive, *state.sampler);
  amp::GradScalerState scaler;
  if (state.grad_scaler != nullptr) scaler = read_grad_scaler(path, archive);
  optim::LrSchedulerState schedule;
  if (state.lr_scheduler != nullptr) {
    schedule = read_lr_scheduler(path, archive, step, *state.lr_scheduler);
  }
  torch::Tensor rng;
  if (state.rng) rng = read_rng(path, archive, rank % saved_world);
  std::vector<InputArchive> parts = read_parts(path, archive, state);

  copy_into_module(model);
  if (state.optimizer != nullptr) load_optimizer(path, optimizer, *state.optimizer);
  if (state.sampler != nullptr) restore_sampler(*state.sampler, place);
  if (state.grad_scaler != nullptr) state.grad_scaler->load_state(scaler);
  // After the optimizer, whose load restores the saved LRs: the scheduler sets them again.
  if (state.lr_scheduler != nullptr) state.lr_scheduler->load_state(schedule);
  if (state.rng) set_cpu_generator_state(path, rng);
  for (size_t i = 0; i < parts.size(); ++i) {
    try {
      state.parts[i].second->load(parts[i]);
    } catch (const std::exception& error) {  // a part's own CheckpointError too: name the part
      throw CheckpointError(concat("checkpoint '", path, "' does not fit the part '",
                                   state.parts[i].first, "': ", reason_of(error), kRefitAdvice));
    }
  }
  state.step = step;
  state.epoch = epoch;
  return true;
}

}  // namespace cohort::detail
