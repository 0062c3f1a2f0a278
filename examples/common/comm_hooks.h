// The examples' --comm-hook: one table from a name to the DDP communication hook it makes
// (docs/compression.md). The hook's knobs come from --hook-rank and --hook-start-iter
// (powersgd), --hook-ratio (topk, randomk) and --hook-levels (qsgd); each hook takes what
// applies to it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/ddp/comm_hook.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace cohort_examples {

struct CommHookSettings {
  std::string name = "allreduce";
  int rank = 2;             // powersgd: columns of P and Q
  double ratio = 0.01;      // topk, randomk: the share of each bucket's elements sent
  int levels = 16;          // qsgd: quantization levels
  int64_t start_iter = 10;  // powersgd: steps of plain allreduce first
};

// Every name --comm-hook takes.
std::vector<std::string> comm_hook_names();
// --comm-hook, --hook-rank, --hook-start-iter, --hook-ratio, --hook-levels.
void add_comm_hook_options(CLI::App& app, CommHookSettings& settings);
// The hook for settings.name; null for "allreduce" (DDP's default). A new hook is one entry of
// the table in comm_hooks.cc.
std::shared_ptr<cohort::CommHook> make_comm_hook(const CommHookSettings& settings);
// Whether the hook named `name` carries state from one step to the next (error feedback, a
// shared random stream, PowerSGD's matrices), which a new elastic member would not have.
bool comm_hook_keeps_state(const std::string& name);

}  // namespace cohort_examples
