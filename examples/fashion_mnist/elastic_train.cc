#include "elastic_train.h"

#include <chrono>
#include <cstdio>

#include "cohort/comm/elastic.h"
#include "cohort/core/error.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "dataset.h"
#include "evaluation.h"
#include "fmnist_models.h"
#include "optimizers.h"

namespace fashion_mnist {
namespace {

// What --elastic leaves out, each by the option's name.
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
  refuse(o.mode != "sync", "--mode ps or ssp");
  refuse(o.sync_bn, "--sync-bn");
  refuse(o.local_sgd > 0, "--local-sgd");
  refuse(o.resume, "--resume");
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
  cohort_examples::OptimizerSettings settings;
  settings.lr = options.scaled_lr();
  settings.momentum = options.momentum;
  settings.weight_decay = options.weight_decay;
  settings.module = model.get();
  auto optimizer =
      cohort_examples::make_optimizer(options.optimizer, model->named_parameters(), settings);
  cohort::ElasticTrainerOptions elastic_options;
  elastic_options.sampler.global_batch = static_cast<size_t>(options.batch_size);
  elastic_options.sampler.seed = options.seed;
  elastic_options.ddp.bucket_cap_mb = options.bucket_cap_mb;
  cohort::ElasticTrainer trainer(*elastic, model, *optimizer, static_cast<size_t>(train_set.size()),
                                 elastic_options);
  trainer.on_membership_change([&](const cohort::Membership& m) {
    if (m.rank == 0) {
      std::printf("membership: %s (in %.2f s)\n", m.describe().c_str(),
                  trainer.last_change_seconds());
    }
    std::fflush(stdout);
  });
  const auto start = std::chrono::steady_clock::now();
  double last_loss = 0;
  model->train();
  while (static_cast<int64_t>(trainer.epoch()) < options.epochs &&
         (options.max_steps < 0 || trainer.committed_steps() < options.max_steps)) {
    const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
      auto loss = torch::nll_loss(model->forward(take(train_set.images, step.indices)),
                                  take(train_set.labels, step.indices));
      loss.backward();
      last_loss = loss.item<double>();
    });
    const int64_t done = trainer.committed_steps();
    if (committed && trainer.membership().rank == 0 && done % options.log_every == 0) {
      std::printf("step %lld loss %.4f on %d rank(s)\n", (long long)done, last_loss,
                  trainer.membership().size);
      std::fflush(stdout);
    }
  }
  trainer.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
