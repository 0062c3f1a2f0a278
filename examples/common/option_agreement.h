// Every rank of an example must run with the same options: ranks started with, say,
// --precision fp32 on one and bf16 on another would train different replicas to the end while
// their collectives stay in step. The examples check it once, at start.
#pragma once

#include "cohort/comm/group.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace cohort_examples {

// Collective: every rank's parsed options (every option, defaults included, as CLI11 writes
// them into a config file) must be the same; otherwise throws cohort::ConfigError on every rank
// naming the first option that differs and its value on both ranks.
void agree_on_options(cohort::Group& group, const CLI::App& app);

}  // namespace cohort_examples
