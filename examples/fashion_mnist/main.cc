// Fashion-MNIST, data parallel: the example cohort's README starts with.
//
//   cohortrun --nproc-per-node 2 build/bin/fashion_mnist --epochs 1
//   build/bin/fashion_mnist --model mlp --metrics steps.csv      (one process)
//   cohortrun --nproc-per-node 3 --min-ranks 2 --max-restarts 3 build/bin/fashion_mnist --elastic
//   COHORT_TIMELINE=trace.json cohortrun --nproc-per-node 2 build/bin/fashion_mnist --max-steps 50
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cohort/comm/init.h"
#include "cohort/core/error.h"
#include "elastic_train.h"
#include "idx_file.h"
#include "memory.h"
#include "option_agreement.h"
#include "trainer.h"

int main(int argc, char** argv) {
  cohort_examples::keep_freed_memory();  // before the first large tensor
  CLI::App app("Trains a Fashion-MNIST classifier with cohort's DistributedDataParallel");
  fashion_mnist::TrainOptions options;
  fashion_mnist::add_train_options(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    fashion_mnist::TrainResult result;
    if (options.elastic) {
      result = fashion_mnist::train_elastic(options);
    } else {
      auto group = cohort::init();
      cohort_examples::agree_on_options(*group, app);
      result = fashion_mnist::train(options, group);
    }
    if (result.reports) {
      std::printf("final: ");
      if (result.test_accuracy) std::printf("test accuracy %.2f%%, ", 100 * *result.test_accuracy);
      std::printf("%.0f samples/s on %s, %lld steps\n", result.samples_per_s, result.covers.c_str(),
                  (long long)result.steps);
    }
    return 0;
  } catch (const fashion_mnist::DataError& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  } catch (const cohort::InvalidArgument& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
}
