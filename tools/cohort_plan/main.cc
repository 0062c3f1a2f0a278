// cohort-plan: the planner's candidates for a job on a machine that need not be this one
// (docs/planner.md, "Planning a cluster job"). The job is a plan input file (an example's
// --plan-out, or PlanInput::to_json of your own program); the machine is a node count, ranks
// per node and a calibration file (cohort-bench --calibrate on the cluster, or its defaults).
//
//   cohort-plan --input job.json --nodes 4 --ranks-per-node 8 --calibration cluster.json
//       --memory-budget-mb 16000 --allow-bf16
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cohort/core/error.h"
#include "cohort/torch/plan/planner.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw cohort::InvalidArgument("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

cohort::StrategyKind strategy_named(const std::string& name) {
  if (const auto strategy = cohort::strategy_named(name)) return *strategy;
  throw cohort::InvalidArgument("--strategies: unknown strategy '" + name +
                                "' (ddp, zero1, zero2, full_shard, shard_grad_op, hybrid_shard)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "cohort-plan: predicted step time, memory and traffic of each data-parallel "
      "configuration for a job (docs/planner.md)");
  std::string input, calibration;
  int nodes = 1, ranks_per_node = 1;
  bool no_shm = false, allow_bf16 = false, allow_powersgd = false, own_units = false;
  int64_t budget_mb = 0;
  double compute_scale = 1.0;
  size_t rows = 30;
  std::vector<std::string> strategies;
  std::vector<double> caps;
  std::vector<int> local_sgd_periods;
  app.add_option("--input", input, "The job: a plan input file (an example's --plan-out)")
      ->required();
  app.add_option("--calibration", calibration,
                 "The links: a cost model file (cohort-bench --calibrate); default: "
                 "COHORT_COST_MODEL or ~/.cache/cohort/cost_model.json if present, else the "
                 "built-in defaults");
  app.add_option("--nodes", nodes, "Nodes of the job")->check(CLI::PositiveNumber);
  app.add_option("--ranks-per-node", ranks_per_node, "Ranks on each node")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-shm", no_shm, "The ranks of a node do not share memory windows");
  app.add_option("--memory-budget-mb", budget_mb, "Most memory per rank, in MiB (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--strategies", strategies, "Strategies to consider (default: all)")
      ->delimiter(',');
  app.add_option("--bucket-caps", caps, "Bucket sizes in MiB to consider (default: 1 to 100)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_flag("--allow-bf16", allow_bf16, "Consider gradients reduced in bfloat16 too");
  app.add_option("--local-sgd-periods", local_sgd_periods,
                 "Consider local SGD under ddp with these periods (steps), e.g. 2,4,8,16")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_flag("--allow-powersgd", allow_powersgd,
               "Consider PowerSGD under ddp at every rank the plan input measured (an example's "
               "--plan-out with --allow-powersgd)");
  app.add_flag("--own-units", own_units,
               "FSDP strategies under the job's own units, with prefetch only (default: every "
               "unit layout the plan input holds, with prefetch and without)");
  app.add_option("--compute-scale", compute_scale,
                 "Multiply the measured compute by this (another per-rank batch, a faster CPU)")
      ->check(CLI::PositiveNumber);
  app.add_option("--rows", rows, "Candidates to print, fastest first");
  CLI11_PARSE(app, argc, argv);
  try {
    cohort::PlanInput job = cohort::PlanInput::from_json(read_file(input), input);
    job.compute.forward_s *= compute_scale;
    job.compute.backward_s *= compute_scale;
    job.compute.optimizer_s *= compute_scale;
    for (auto& cost : job.compute.powersgd) cost.seconds *= compute_scale;
    cohort::MachineSpec machine;
    machine.shape.world = nodes * ranks_per_node;
    machine.shape.nodes = nodes;
    machine.shape.local_size = ranks_per_node;
    machine.shape.shared_memory = !no_shm;
    machine.links = calibration.empty() ? cohort::CostModel::load_default()
                                        : cohort::CostModel::from_file(calibration);
    cohort::PlannerOptions options;
    options.memory_budget_bytes = budget_mb * 1024 * 1024;
    if (!strategies.empty()) {
      options.strategies.clear();
      for (const auto& name : strategies) options.strategies.push_back(strategy_named(name));
    }
    if (!caps.empty()) options.bucket_caps_mb = caps;
    if (allow_bf16) options.reduce_dtypes = {torch::kFloat32, torch::kBFloat16};
    options.local_sgd_periods = local_sgd_periods;
    options.search_fsdp_units = !own_units;
    if (allow_powersgd) {
      if (job.compute.powersgd.empty()) {
        throw cohort::InvalidArgument(
            "--allow-powersgd: " + input +
            " holds no measured PowerSGD cost; write it with the example's --allow-powersgd");
      }
      for (const auto& cost : job.compute.powersgd) options.powersgd_ranks.push_back(cost.rank);
    }
    const cohort::Plan plan = cohort::plan(job.model, job.compute, machine, options);
    std::printf(
        "cohort-plan: %s: %zu parameters, %.1f MiB; %d ranks (%d node(s) x %d); links: "
        "%s\n",
        input.c_str(), job.model.parameters.size(),
        static_cast<double>(job.model.parameter_bytes()) / (1024.0 * 1024.0), machine.shape.world,
        nodes, ranks_per_node, machine.links.source.c_str());
    std::printf("%s", plan.table(rows).c_str());
    std::printf("chosen: %s\n", plan.chosen.config.describe().c_str());
    return 0;
  } catch (const cohort::Error& e) {
    std::fprintf(stderr, "cohort-plan: %s\n", e.what());
    return 2;
  }
}
