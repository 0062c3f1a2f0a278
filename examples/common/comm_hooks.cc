#include "comm_hooks.h"

#include <CLI/CLI.hpp>
#include <functional>

#include "cohort/core/error.h"
#include "cohort/torch/compress/powersgd.h"
#include "cohort/torch/compress/quantization.h"
#include "cohort/torch/compress/sparsification.h"

namespace cohort_examples {
namespace {

struct HookEntry {
  std::string name;
  std::string description;
  std::function<std::shared_ptr<cohort::CommHook>(const CommHookSettings&)> make;
  // Carries state from one step to the next (error feedback, a shared random stream, PowerSGD's
  // matrices): a new elastic member would not have it (comm_hook_keeps_state).
  bool keeps_state = false;
};

const std::vector<HookEntry>& hook_table() {
  static const std::vector<HookEntry> table = {
      {"allreduce", "plain averaging allreduce (DDP's default)",
       [](const CommHookSettings&) { return nullptr; }},
      {"fp16", "gradients sent as float16",
       [](const CommHookSettings&) { return cohort::fp16_compress_hook(); }},
      {"bf16", "gradients sent as bfloat16",
       [](const CommHookSettings&) { return cohort::bf16_compress_hook(); }},
      {"powersgd", "low-rank P and Q of rank --hook-rank, error feedback",
       [](const CommHookSettings& s) {
         cohort::PowerSgdOptions o;
         o.rank = s.rank;
         o.start_iter = s.start_iter;
         return cohort::powersgd_hook(o);
       },
       true},
      {"topk", "the --hook-ratio largest elements, error feedback",
       [](const CommHookSettings& s) {
         cohort::TopKOptions o;
         o.ratio = s.ratio;
         return cohort::top_k_hook(o);
       },
       true},
      {"randomk", "--hook-ratio random elements (shared seed), error feedback",
       [](const CommHookSettings& s) {
         cohort::RandomKOptions o;
         o.ratio = s.ratio;
         return cohort::random_k_hook(o);
       },
       true},
      {"qsgd", "--hook-levels levels per sign, stochastic rounding",
       [](const CommHookSettings& s) {
         cohort::QsgdOptions o;
         o.levels = s.levels;
         return cohort::qsgd_hook(o);
       }},
      {"terngrad", "-1/0/+1 times a scale, 2 bits each",
       [](const CommHookSettings&) { return cohort::terngrad_hook(); }},
      {"sign", "1 bit each and a scale, error feedback",
       [](const CommHookSettings&) { return cohort::sign_hook(); }, true},
  };
  return table;
}

}  // namespace

std::vector<std::string> comm_hook_names() {
  std::vector<std::string> names;
  for (const auto& entry : hook_table()) names.push_back(entry.name);
  return names;
}

void add_comm_hook_options(CLI::App& app, CommHookSettings& settings) {
  std::string help = "How DDP reduces gradients (docs/compression.md):";
  for (const auto& entry : hook_table()) help += "\n  " + entry.name + ": " + entry.description;
  app.add_option("--comm-hook", settings.name, help)
      ->check(CLI::IsMember(comm_hook_names()))
      ->capture_default_str();
  app.add_option("--hook-rank", settings.rank, "powersgd: rank of the approximation")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--hook-ratio", settings.ratio, "topk, randomk: share of elements sent")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--hook-levels", settings.levels, "qsgd: levels per sign (1-127)")
      ->check(CLI::Range(1, 127))
      ->capture_default_str();
  app.add_option("--hook-start-iter", settings.start_iter,
                 "powersgd: steps of plain allreduce before compressing")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

namespace {

const HookEntry& hook_named(const std::string& name) {
  for (const auto& entry : hook_table()) {
    if (entry.name == name) return entry;
  }
  throw cohort::InvalidArgument("--comm-hook: no hook is named '" + name +
                                "'; the names are those of --help");
}

}  // namespace

std::shared_ptr<cohort::CommHook> make_comm_hook(const CommHookSettings& settings) {
  return hook_named(settings.name).make(settings);
}

bool comm_hook_keeps_state(const std::string& name) {
  return hook_named(name).keeps_state;
}

}  // namespace cohort_examples
