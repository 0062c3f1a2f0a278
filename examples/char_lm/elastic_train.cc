#include "elastic_train.h"

#include "adamw.h"
#include "cohort/comm/elastic.h"
#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/data/elastic_batch.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "dataset.h"
#include "elastic_loop.h"
#include "gpt.h"
#include "next_char_loss.h"
#include "sample.h"
#include "validation.h"

namespace char_lm {
TrainResult train_elastic(const TrainOptions& options, int& rank, int& ranks) {
  torch::set_num_threads(options.threads > 0 ? options.threads : 1);
  const CharData data = load_char_data(options.data_dir, options.context);
  TextWindows train_set(data.train, options.context), validation(data.validation, options.context);
  const int64_t windows_count = static_cast<int64_t>(train_set.size().value());
  // The schedule is the trainer's (ElasticTrainerOptions::lr_schedule): its place is the job's
  // committed step, on joiners and after a resume too.
  const auto run = cohort_examples::elastic_run_settings(options, windows_count, 0);
  auto elastic = cohort::init_elastic();
  torch::manual_seed(options.seed);
  Gpt model(options.model_config(data.vocabulary.size()));
  if (options.activation_checkpointing) checkpoint_blocks(*model, false);
  // Under a sharded strategy the trainer makes the optimizer over each generation's shards.
  auto make_optimizer = [&](const torch::OrderedDict<std::string, torch::Tensor>& parameters) {
    return make_adamw(*model, parameters, options);
  };
  cohort::ElasticTrainer trainer(*elastic, model.ptr(), make_optimizer,
                                 static_cast<size_t>(windows_count),
                                 cohort_examples::elastic_trainer_options(run));
  cohort_examples::report_memberships(trainer, [&](const cohort::Membership& m) {
    torch::manual_seed(options.seed + 1000 * m.generation + static_cast<uint64_t>(m.rank));
  });
  cohort_examples::ElasticStepHooks hooks;
  hooks.after_backward = [&] {  // the whole gradient's norm, over the shards when sharded
    if (options.clip <= 0) return;
    if (auto* master = trainer.master_weights()) {  // the float32 masters' gradients
      master->copy_gradients_to_masters();
      torch::nn::utils::clip_grad_norm_(master->parameters(), options.clip);
    } else if (run.strategy == cohort::StrategyKind::kDdp) {
      torch::nn::utils::clip_grad_norm_(model->parameters(), options.clip);
    } else {
      cohort::clip_grad_norm(trainer.sharded_parameters(), options.clip);
    }
  };
  TrainResult result;
  // Every member takes part, rank 0 reports it; a member lost during it makes the survivors
  // evaluate again (ElasticFinish::evaluate).
  auto evaluate = [&](cohort::Group& group) {
    model->eval();
    const auto autocast = trainer.forward_scope();  // --precision bf16 (a 16-bit model too)
    result.validation_loss = validation_loss(
        group, validation,
        [&](const torch::data::Example<>& b) { return next_char_loss(model, b, torch::kSum); });
  };
  const auto time = run_elastic_steps(
      trainer, run,
      [&](const cohort::ElasticStep& step) {
        model->train();
        return next_char_loss(model, cohort::elastic_batch(train_set, step));
      },
      hooks, options.skip_eval ? std::function<void(cohort::Group&)>() : evaluate);
  result.unigram_entropy = data.unigram_entropy;
  result.steps = time.trained_steps;
  result.samples_per_s =
      time.seconds > 0 ? double(result.steps * options.batch_size) / time.seconds : 0;
  rank = trainer.membership().rank;
  ranks = trainer.membership().size;
  if (options.sample > 0 && rank == 0) {  // the members' models are the same: rank 0's alone
    const auto autocast = trainer.forward_scope();
    result.sample = generate_text(model, data.vocabulary, kSamplePrompt, options.sample,
                                  kSampleTemperature, options.seed);
  }
  return result;
}

}  // namespace char_lm
