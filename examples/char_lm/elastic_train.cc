#include "elastic_train.h"

#include <chrono>
#include <cstdio>

#include "adamw.h"
#include "cohort/comm/elastic.h"
#include "cohort/core/error.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "cohort/torch/optim/lr_schedule.h"
#include "dataset.h"
#include "gpt.h"

namespace char_lm {
namespace {

void check_elastic_options(const TrainOptions& o) {
  const auto refuse = [](bool set, const char* what) {
    if (set) {
      throw cohort::InvalidArgument(std::string("--elastic trains with DDP in float32 from "
                                                "memory; it does not take ") +
                                    what);
    }
  };
  refuse(o.strategy != "ddp", "--strategy other than ddp");
  refuse(o.precision != "fp32", "--precision other than fp32");
  refuse(o.resume, "--resume");
}

torch::data::Example<> windows(TextWindows& data, const std::vector<size_t>& indices) {
  return data.get_batch(c10::ArrayRef<size_t>(indices));
}

torch::Tensor next_char_loss(Gpt& model, const torch::data::Example<>& batch) {
  const auto logits = model->forward(batch.data);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              batch.target.reshape({-1}));
}

// Mean loss of up to 512 validation windows, on this rank alone.
double validation_loss(Gpt& model, const TextWindows& validation) {
  torch::NoGradGuard no_grad;
  model->eval();
  const int64_t count = std::min<int64_t>(512, validation.size().value());
  return next_char_loss(model, validation.range(0, count)).item<double>();
}

}  // namespace

TrainResult train_elastic(const TrainOptions& options, int& rank, int& ranks) {
  check_elastic_options(options);
  auto elastic = cohort::init_elastic();
  torch::set_num_threads(options.threads > 0 ? options.threads : 1);
  const CharData data = load_char_data(options.data_dir, options.context);
  TextWindows train_set(data.train, options.context), validation(data.validation, options.context);
  torch::manual_seed(options.seed);
  Gpt model(options.model_config(data.vocabulary.size()));
  auto optimizer = make_adamw(*model, model->named_parameters(), options);
  const int64_t windows_count = static_cast<int64_t>(train_set.size().value());
  int64_t planned = options.epochs * (windows_count / options.batch_size);
  if (options.max_steps > 0) planned = std::min(planned, options.max_steps);
  cohort::optim::WarmupDecayLR schedule(*optimizer, options.lr_schedule_options(planned));
  cohort::ElasticTrainerOptions elastic_options;
  elastic_options.sampler.global_batch = static_cast<size_t>(options.batch_size);
  elastic_options.sampler.seed = options.seed;
  elastic_options.ddp.bucket_cap_mb = options.bucket_cap_mb;
  cohort::ElasticTrainer trainer(*elastic, model.ptr(), *optimizer,
                                 static_cast<size_t>(windows_count), elastic_options);
  trainer.on_membership_change([&](const cohort::Membership& m) {
    // A joiner's schedule starts at the job's step, not at 0.
    schedule.load_state({trainer.committed_steps(), schedule.base_lrs()});
    torch::manual_seed(options.seed + 1000 * m.generation + static_cast<uint64_t>(m.rank));
    if (m.rank == 0) {
      std::printf("membership: %s (in %.2f s)\n", m.describe().c_str(),
                  trainer.last_change_seconds());
    }
    std::fflush(stdout);
  });
  const auto start = std::chrono::steady_clock::now();
  double last_loss = 0;
  while (static_cast<int64_t>(trainer.epoch()) < options.epochs &&
         (options.max_steps < 0 || trainer.committed_steps() < options.max_steps)) {
    model->train();
    const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
      auto loss = next_char_loss(model, windows(train_set, step.indices));
      loss.backward();
      // The gradients are the same on every member now: so is the clipping.
      if (options.clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), options.clip);
      last_loss = loss.item<double>();
    });
    if (!committed) continue;
    schedule.step();
    const int64_t done = trainer.committed_steps();
    if (trainer.membership().rank == 0 && done % options.log_every == 0) {
      std::printf("step %lld loss %.4f on %d rank(s)\n", (long long)done, last_loss,
                  trainer.membership().size);
      std::fflush(stdout);
    }
  }
  trainer.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TrainResult result;
  result.unigram_entropy = data.unigram_entropy;
  result.steps = trainer.committed_steps();
  result.samples_per_s = seconds > 0 ? double(result.steps * options.batch_size) / seconds : 0;
  rank = trainer.membership().rank;
  ranks = trainer.membership().size;
  if (rank == 0 && !options.skip_eval) result.validation_loss = validation_loss(model, validation);
  return result;
}

}  // namespace char_lm
