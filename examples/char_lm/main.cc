// A GPT-style character language model trained on Debian's fortunes, data parallel.
//
//   cohortrun --nproc-per-node 2 build/bin/char_lm --epochs 1
//   build/bin/char_lm --layers 2 --width 64 --max-steps 200      (one process)
//   cohortrun --nproc-per-node 3 --min-ranks 2 --max-restarts 2 build/bin/char_lm --elastic
//   COHORT_TIMELINE=trace.json cohortrun --nproc-per-node 2 build/bin/char_lm --max-steps 30
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cohort/comm/init.h"
#include "cohort/core/error.h"
#include "elastic_train.h"
#include "fortune_files.h"
#include "memory.h"
#include "option_agreement.h"
#include "trainer.h"

namespace {

void print_result(const char_lm::TrainResult& result, int ranks) {
  std::printf("final: ");
  if (result.validation_loss) {
    std::printf("validation loss %.4f nats/char (unigram baseline %.4f), ", *result.validation_loss,
                result.unigram_entropy);
  }
  std::printf("%.0f samples/s on %d rank(s), %lld steps\n", result.samples_per_s, ranks,
              (long long)result.steps);
  if (!result.sample.empty()) std::printf("sample:\n%s\n", result.sample.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  cohort_examples::keep_freed_memory();  // before the first large tensor
  CLI::App app("Trains a character-level GPT on Debian's fortunes with cohort's data parallelism");
  char_lm::TrainOptions options;
  char_lm::add_train_options(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    if (options.elastic) {
      int rank = 0, ranks = 1;
      const char_lm::TrainResult result = char_lm::train_elastic(options, rank, ranks);
      if (rank == 0) print_result(result, ranks);
      return 0;
    }
    auto group = cohort::init();
    cohort_examples::agree_on_options(*group, app);
    const char_lm::TrainResult result = char_lm::train(options, group);
    if (group->rank() == 0) print_result(result, group->size());
    return 0;
  } catch (const char_lm::DataError& e) {
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 2;
  } catch (const cohort::InvalidArgument& e) {
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 1;
  }
}
