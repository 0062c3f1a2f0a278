// cohort::train_elastic_as (include/cohort/torch/elastic/elastic_trainer.h): the strategy
// layer's options as ElasticTrainerOptions, through the same functions make_strategy builds its
// wrappers' options with, so that a strategy trains alike with and without the elastic trainer.
#include "cohort/core/error.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "elastic/follow_generation.h"
#include "strategy/strategies.h"

namespace cohort {
namespace {

void refuse_under_elastic(bool given, const std::string& what) {
  if (!given) return;
  throw InvalidArgument("ElasticTrainer does not train with " + what +
                        " (docs/elastic.md, \"Strategies and options\")");
}

}  // namespace

void train_elastic_as(ElasticTrainerOptions& options, StrategyKind kind,
                      const StrategyOptions& wrapping) {
  check_strategy_options(kind, wrapping);
  refuse_under_elastic(wrapping.local_sgd.has_value(),
                       "local SGD (StrategyOptions::local_sgd; --local-sgd): use DiLoCo "
                       "(StrategyOptions::diloco), which the elastic trainer heals");
  refuse_under_elastic(wrapping.activation_checkpointing.has_value(),
                       "StrategyOptions::activation_checkpointing: apply "
                       "cohort::checkpoint_modules to the module before making the trainer");
  options.strategy = kind;
  options.sync_batchnorm = wrapping.sync_batchnorm;
  options.precision = wrapping.precision;
  options.ddp = strategy_detail::ddp_options(wrapping);
  options.zero = {};
  options.fsdp = {};
  options.diloco.reset();
  if (is_zero(kind)) options.zero = strategy_detail::zero_options(kind, wrapping);
  if (is_fsdp(kind)) options.fsdp = strategy_detail::fsdp_options(kind, wrapping, Precision());
  if (wrapping.diloco) {
    options.diloco = *wrapping.diloco;
    if (!options.diloco->hook) options.diloco->hook = wrapping.comm_hook;  // its rounds'
    options.ddp.comm_hook = nullptr;  // DiLoCo sends no gradients
  }
  detail::refuse_inelastic_precision(options);
}

}  // namespace cohort
