// cohort-thread-probe: the threads of every rank of a DDP job and of a parameter-server job,
// counted from /proc/<pid>/task while they train (issue 36; docs/architecture.md, "Threads").
//
//   OMP_NUM_THREADS=1 cohortrun --nproc-per-node 64 build/bin/cohort-thread-probe --mode ddp
//   OMP_NUM_THREADS=1 cohortrun --nproc-per-node 64 build/bin/cohort-thread-probe --mode ps
//
// Every rank trains a tiny model for --steps steps: under DistributedDataParallel (--mode ddp),
// or as a worker of a synchronous parameter server whose last rank serves (--mode ps: 63
// workers at 64 ranks, one two-rank group per (server, worker) pair). The ranks first share
// their process ids; half way through, rank 0 counts the entries of every rank's
// /proc/<pid>/task (the job runs on one host) and prints one line:
//   THREADS mode=ps world=64 server=67 worker_max=6 rank_max=67
#include <dirent.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cohort/comm/init.h"
#include "cohort/torch/async/parameter_server.h"
#include "cohort/torch/ddp/ddp.h"

namespace {

int count_tasks(int64_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

std::vector<int64_t> every_pid(cohort::Group& group) {
  int64_t mine = ::getpid();
  std::vector<int64_t> all(static_cast<size_t>(group.size()));
  group.allgather(cohort::ConstBuffer(&mine, 1, cohort::DType::kInt64), cohort::make_buffer(all));
  return all;
}

void print_counts(const char* mode, const std::vector<int64_t>& pids, int server) {
  int worker_max = 0, rank_max = 0;
  for (size_t r = 0; r < pids.size(); ++r) {
    const int n = count_tasks(pids[r]);
    rank_max = std::max(rank_max, n);
    if (static_cast<int>(r) != server) worker_max = std::max(worker_max, n);
  }
  std::printf("THREADS mode=%s world=%zu", mode, pids.size());
  if (server >= 0) std::printf(" server=%d", count_tasks(pids[static_cast<size_t>(server)]));
  std::printf(" worker_max=%d rank_max=%d\n", worker_max, rank_max);
  std::fflush(stdout);
}

// One step of a tiny regression: enough to run backward's hooks and the optimizer.
void train_step(torch::nn::Linear& model, torch::optim::SGD& optimizer) {
  optimizer.zero_grad();
  const torch::Tensor x = torch::randn({8, 16});
  torch::mse_loss(model->forward(x), x).backward();
}

int run_ddp(std::shared_ptr<cohort::Group> group, torch::nn::Linear model, int steps) {
  const std::vector<int64_t> pids = every_pid(*group);
  cohort::DistributedDataParallel ddp(model, group);
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  for (int step = 0; step < steps; ++step) {
    train_step(model, optimizer);
    optimizer.step();
    if (step == steps / 2 && group->rank() == 0) print_counts("ddp", pids, -1);
  }
  group->barrier();
  return 0;
}

int run_ps(std::shared_ptr<cohort::Group> group, torch::nn::Linear model, int steps) {
  const std::vector<int64_t> pids = every_pid(*group);
  cohort::ParameterServerOptions options;
  options.consistency = cohort::Consistency::kSynchronous;
  auto ps = cohort::ParameterServer::create(
      group, *model,
      [](std::vector<torch::Tensor> p) { return std::make_unique<torch::optim::SGD>(p, 0.01); },
      options);
  if (ps->is_server()) {
    ps->serve();
    return 0;
  }
  torch::optim::SGD optimizer(model->parameters(), 0.01);  // zero_grad only
  for (int step = 0; step < steps; ++step) {
    train_step(model, optimizer);
    ps->step();
    // Synchronous: every worker is in this step, every session of the server is open.
    if (step == steps / 2 && group->rank() == 0) print_counts("ps", pids, group->size() - 1);
  }
  ps->finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort-thread-probe: the threads of a DDP or parameter-server rank"};
  std::string mode = "ddp";
  int steps = 10;
  app.add_option("--mode", mode, "ddp or ps")->check(CLI::IsMember({"ddp", "ps"}));
  app.add_option("--steps", steps, "training steps of every rank (workers, under ps)");
  CLI11_PARSE(app, argc, argv);
  torch::manual_seed(0);  // the same model on every rank
  torch::nn::Linear model(16, 16);
  auto group = cohort::init();
  return mode == "ddp" ? run_ddp(group, model, steps) : run_ps(group, model, steps);
}
