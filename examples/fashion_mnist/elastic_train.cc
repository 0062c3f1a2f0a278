#include "elastic_train.h"

#include "cohort/comm/elastic.h"
#include "cohort/torch/data/elastic_batch.h"
#include "dataset.h"
#include "elastic_loop.h"
#include "evaluation.h"
#include "fmnist_models.h"
#include "optimizers.h"

namespace fashion_mnist {
namespace {

using cohort_examples::refuse_for_elastic;

// What --elastic does not take that only this example has (the planner's and the shared
// options: elastic_run_settings; the rest: train_elastic_as).
void check_elastic_options(const TrainOptions& o) {
  refuse_for_elastic(o.mode != "sync", "--mode ps or ssp");
  // Every member would have to stop at the same step; the elastic trainer's vote does not
  // carry a clock.
  refuse_for_elastic(o.time_limit_s > 0, "--time-limit (stop with --max-steps instead)");
}

}  // namespace

TrainResult train_elastic(const TrainOptions& options) {
  check_elastic_options(options);
  torch::set_num_threads(options.threads > 0 ? options.threads : 1);
  FashionMnist train_set(load_split(options.data_dir, Split::kTrain));
  const Images test = options.skip_eval ? Images{} : load_split(options.data_dir, Split::kTest);
  const size_t samples = *train_set.size();
  auto run = cohort_examples::elastic_run_settings(options, static_cast<int64_t>(samples),
                                                   TrainOptions::kFsdpMinUnitParameters);
  run.wrapping.sync_batchnorm = options.sync_bn;  // the trainer converts the model's BatchNorms
  auto elastic = cohort::init_elastic();
  torch::manual_seed(options.seed);
  auto model = make_fmnist_model(options.model);
  if (options.activation_checkpointing) checkpoint_conv_stack(*model, options, false);
  // Under a sharded strategy the trainer makes the optimizer over each generation's shards.
  auto make_optimizer = [&](const cohort_examples::NamedParameters& parameters) {
    return cohort_examples::make_optimizer(options.optimizer, parameters,
                                           options.optimizer_settings(model.get()));
  };
  cohort::ElasticTrainer trainer(*elastic, model, make_optimizer, samples,
                                 cohort_examples::elastic_trainer_options(run));
  cohort_examples::report_memberships(trainer);
  TrainResult result;
  // Each member evaluates its slice of the test set and the counts are summed: a member lost
  // during it makes the survivors evaluate again (ElasticFinish::evaluate).
  auto evaluate = [&](cohort::Group& group) {
    model->eval();
    torch::NoGradGuard no_grad;
    const auto autocast = trainer.forward_scope();  // --precision bf16 (a 16-bit model too)
    result.test_accuracy = evaluate_slices(test, group, [&](const torch::Tensor& images) {
                             return model->forward(images).to(torch::kFloat32);
                           }).accuracy;
  };
  model->train();
  const auto time = run_elastic_steps(
      trainer, run,
      [&](const cohort::ElasticStep& step) {
        const auto batch = cohort::elastic_batch(train_set, step);
        return torch::nll_loss(model->forward(batch.data), batch.target);
      },
      {}, options.skip_eval ? std::function<void(cohort::Group&)>() : evaluate);
  result.steps = time.trained_steps;
  result.samples_per_s =
      time.seconds > 0 ? double(result.steps * options.batch_size) / time.seconds : 0;
  result.reports = trainer.membership().rank == 0;
  result.covers = std::to_string(trainer.membership().size) + " rank(s) at the end, " +
                  std::to_string(trainer.membership_changes()) + " membership change(s), " +
                  std::to_string(trainer.rolled_back_steps()) + " step(s) redone";
  return result;
}

}  // namespace fashion_mnist
