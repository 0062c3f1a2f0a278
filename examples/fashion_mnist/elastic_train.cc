#include "elastic_train.h"

#include "cohort/comm/elastic.h"
#include "dataset.h"
#include "elastic_loop.h"
#include "evaluation.h"
#include "fmnist_models.h"
#include "optimizers.h"

namespace fashion_mnist {
namespace {

using cohort_examples::refuse_for_elastic;

void check_elastic_options(const TrainOptions& o) {
  refuse_for_elastic(o.strategy != "ddp", "--strategy other than ddp");
  refuse_for_elastic(o.plan.bucket_cap.automatic, "--bucket-cap-mb auto");
  refuse_for_elastic(o.plan.memory_budget_mb > 0 || !o.plan.plan_out.empty(),
                     "--memory-budget-mb and --plan-out");
  refuse_for_elastic(o.precision != "fp32", "--precision other than fp32");
  refuse_for_elastic(o.mode != "sync", "--mode ps or ssp");
  refuse_for_elastic(o.sync_bn, "--sync-bn");
  refuse_for_elastic(o.local_sgd.period > 0, "--local-sgd");
}

torch::Tensor take(const torch::Tensor& all, const std::vector<size_t>& indices) {
  return all.index_select(0, torch::tensor(std::vector<int64_t>(indices.begin(), indices.end())));
}

}  // namespace

TrainResult train_elastic(const TrainOptions& options) {
  check_elastic_options(options);
  auto elastic = cohort::init_elastic();
  torch::set_num_threads(options.threads > 0 ? options.threads : 1);
  const Images train_set = load_split(options.data_dir, Split::kTrain);
  const Images test = options.skip_eval ? Images{} : load_split(options.data_dir, Split::kTest);
  torch::manual_seed(options.seed);
  auto model = make_fmnist_model(options.model);
  if (options.activation_checkpointing) checkpoint_conv_stack(*model, options, false);
  auto optimizer = cohort_examples::make_optimizer(options.optimizer, model->named_parameters(),
                                                   options.optimizer_settings(model.get()));
  const auto run = cohort_examples::elastic_run_settings(options);
  cohort::ElasticTrainer trainer(*elastic, model, *optimizer, static_cast<size_t>(train_set.size()),
                                 cohort_examples::elastic_trainer_options(run));
  cohort_examples::report_memberships(trainer);
  model->train();
  const double seconds = run_elastic_steps(trainer, run, [&](const cohort::ElasticStep& step) {
    return torch::nll_loss(model->forward(take(train_set.images, step.indices)),
                           take(train_set.labels, step.indices));
  });
  trainer.finish();
  TrainResult result;
  result.steps = trainer.committed_steps();
  result.samples_per_s = seconds > 0 ? double(result.steps * options.batch_size) / seconds : 0;
  result.reports = trainer.membership().rank == 0;
  result.covers = std::to_string(trainer.membership().size) + " rank(s) at the end, " +
                  std::to_string(trainer.membership_changes()) + " membership change(s), " +
                  std::to_string(trainer.rolled_back_steps()) + " step(s) redone";
  if (result.reports && !options.skip_eval) {
    model->eval();
    torch::NoGradGuard no_grad;
    result.test_accuracy = evaluate_all(test, [&](const torch::Tensor& images) {
                             return model->forward(images);
                           }).accuracy;
  }
  return result;
}

}  // namespace fashion_mnist
