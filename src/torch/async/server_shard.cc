#include "async/server_shard.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "async/protocol.h"
#include "checkpoint/checkpoint_state.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"

namespace cohort::ps {

ServerShard::ServerShard(std::vector<torch::Tensor> parameters,
                         std::unique_ptr<torch::optim::Optimizer> optimizer, ConsistencyRule rule,
                         std::vector<int> client_ranks, std::shared_ptr<Timeline> timeline)
    : parameters_(std::move(parameters)),
      optimizer_(std::move(optimizer)),
      rule_(rule),
      client_ranks_(std::move(client_ranks)),
      timeline_(std::move(timeline)),
      clients_(client_ranks_.size()) {
  COHORT_CHECK(optimizer_ != nullptr, "ParameterServer: make_optimizer returned no optimizer");
  for (const auto& p : parameters_) numel_ += p.numel();
  if (!parameters_.empty()) dtype_ = parameters_.front().scalar_type();
}

int ServerShard::alive_locked() const {
  return static_cast<int>(std::count_if(clients_.begin(), clients_.end(),
                                        [](const ClientState& c) { return c.alive; }));
}

int64_t ServerShard::alive_weight_locked() const {
  int64_t weight = 0;
  for (const ClientState& c : clients_) weight += c.alive ? c.weight : 0;
  return weight;
}

int ServerShard::clients_alive() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return alive_locked();
}

void ServerShard::add_gradient(int client, int64_t computed_on, int64_t clock, int64_t weight,
                               const torch::Tensor& flat) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++events_;
  ClientState& state = clients_.at(static_cast<size_t>(client));
  state.weight = std::max<int64_t>(1, weight);
  const Clock::time_point now = Clock::now();
  if (state.pushes == 0) state.first_push = now;
  state.last_push = now;
  state.pushes = clock + 1;
  state.last_computed_on = computed_on;
  if (rule_.mode == Consistency::kAsynchronous) {
    apply({{client, computed_on, state.weight, flat}});
  } else {
    // Note [Consistency]: steps are keyed by clock, or at s = 0 by the version computed on.
    const int64_t key = rule_.staleness == 0 ? computed_on : base_version_ + clock;
    if (key < version_) {
      ++dropped_;  // a backup worker's gradient for a step already taken
    } else {
      pending_[key].push_back({client, computed_on, state.weight, flat});
      apply_ready_steps();
    }
  }
  changed_.notify_all();
}

bool ServerShard::step_ready(const std::vector<Contribution>& step) const {
  int alive_in = 0;
  for (const Contribution& c : step) {
    if (clients_[static_cast<size_t>(c.client)].alive) ++alive_in;
  }
  const int needed = std::max(1, alive_locked() - rule_.backup_workers);
  // Everyone who could still push has pushed (possibly nobody alive is left: the step then
  // averages what the departed pushed).
  return !step.empty() && (alive_in >= needed || alive_locked() == 0);
}

void ServerShard::apply_ready_steps() {
  for (auto it = pending_.find(version_); it != pending_.end() && step_ready(it->second);
       it = pending_.find(version_)) {
    std::vector<Contribution> step = std::move(it->second);
    pending_.erase(it);
    apply(std::move(step));
  }
  // s = 0: gradients computed on a version that is now past came too late.
  for (auto it = pending_.begin(); it != pending_.end() && it->first < version_;) {
    dropped_ += static_cast<int64_t>(it->second.size());
    it = pending_.erase(it);
  }
}

double ServerShard::scale_for_staleness(int64_t staleness) const {
  return rule_.lr_scaling && staleness > 1 ? 1.0 / static_cast<double>(staleness) : 1.0;
}

// One optimizer step with the mean of the contributions (each scaled for its staleness and
// weighted by the workers it averages), summed in client order so that every run sums alike.
void ServerShard::apply(std::vector<Contribution> contributions) {
  std::sort(contributions.begin(), contributions.end(),
            [](const Contribution& a, const Contribution& b) { return a.client < b.client; });
  // The timeline shows each step's staleness: "apply step 12, staleness 0 1 1".
  std::string name;
  if (timeline_) {
    name = "apply step " + std::to_string(version_) + ", staleness";
    for (const Contribution& c : contributions) {
      name += " " + std::to_string(version_ - c.computed_on);
    }
  }
  auto span = trace(timeline_.get(), std::move(name), "compute", "server");
  torch::Tensor sum;
  int64_t weights = 0;
  for (const Contribution& c : contributions) {
    const int64_t staleness = version_ - c.computed_on;
    if (static_cast<size_t>(staleness) >= staleness_counts_.size()) {
      staleness_counts_.resize(static_cast<size_t>(staleness) + 1, 0);
    }
    ++staleness_counts_[static_cast<size_t>(staleness)];
    const double scale = scale_for_staleness(staleness) * static_cast<double>(c.weight);
    torch::Tensor term = scale == 1.0 ? c.flat : c.flat * scale;
    sum = sum.defined() ? sum.add(term) : term.clone();
    weights += c.weight;
  }
  applied_ += static_cast<int64_t>(contributions.size());
  // Asynchronous: one gradient is its workers' share of a synchronous step (1/N for one of N
  // workers); else the mean of the step's.
  const int64_t divisor = rule_.mode == Consistency::kAsynchronous
                              ? std::max<int64_t>(1, alive_weight_locked())
                              : weights;
  if (divisor != 1) sum.div_(static_cast<double>(divisor));
  int64_t offset = 0;
  for (auto& p : parameters_) {
    p.mutable_grad() = sum.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
  {
    torch::NoGradGuard no_grad;
    optimizer_->step();
  }
  ++version_;
  if (checkpoint_every_ > 0 && version_ % checkpoint_every_ == 0) save_locked();
}

void ServerShard::save_to(const std::string& path, int64_t save_every) {
  std::lock_guard<std::mutex> lock(mutex_);
  checkpoint_path_ = path;
  checkpoint_every_ = save_every;
}

// Under the lock, between two steps: the file holds one consistent version.
void ServerShard::save_locked() const {
  torch::serialize::OutputArchive archive;
  archive.write("version", torch::tensor(version_, torch::kInt64));
  const std::string job = detail::current_job_id();
  archive.write("job", torch::tensor(std::vector<uint8_t>(job.begin(), job.end()), torch::kUInt8));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    archive.write("parameter." + std::to_string(i), parameters_[i].detach());
  }
  torch::serialize::OutputArchive optimizer;
  optimizer_->save(optimizer);
  archive.write("optimizer", optimizer);
  const std::string temporary = checkpoint_path_ + ".tmp";
  archive.save_to(temporary);
  if (std::rename(temporary.c_str(), checkpoint_path_.c_str()) != 0) {
    throw Error("ParameterServer: cannot rename " + temporary + " to " + checkpoint_path_);
  }
}

bool ServerShard::load(const std::string& path, bool any_job, bool start_afresh) {
  std::lock_guard<std::mutex> lock(mutex_);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
    torch::Tensor version, job;
    archive.read("version", version);
    archive.read("job", job);
    const std::string saved_by(static_cast<const char*>(job.data_ptr()),
                               static_cast<size_t>(job.numel()));
    const std::string why =
        detail::passed_over_because(path, saved_by, {detail::current_job_id(), any_job});
    if (!why.empty()) {
      // Issue 35: it was passed over with a warning, and the first save replaced it.
      LoadOptions options;
      options.start_afresh = start_afresh;
      detail::pass_over(
          "ParameterServer: " + why, options, /*log=*/true,
          {"ParameterServerOptions::resume_any_job", "ParameterServerOptions::start_afresh"});
      return false;
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < parameters_.size(); ++i) {
      torch::Tensor saved;
      archive.read("parameter." + std::to_string(i), saved);
      COHORT_CHECK(saved.sizes() == parameters_[i].sizes() &&
                       saved.scalar_type() == parameters_[i].scalar_type(),
                   "parameter ", i, " of the shard is ", saved.dtype(), " ", saved.sizes(),
                   " in the file but ", parameters_[i].dtype(), " ", parameters_[i].sizes(),
                   " in the model");
      parameters_[i].copy_(saved);
    }
    torch::serialize::InputArchive optimizer;
    archive.read("optimizer", optimizer);
    optimizer_->load(optimizer);
    version_ = base_version_ = version.item<int64_t>();
    return true;
  } catch (const CheckpointError&) {
    throw;  // pass_over's, which says what to do
  } catch (const std::exception& e) {
    throw InvalidArgument("ParameterServer: cannot restore the server checkpoint " + path + ": " +
                          e.what() +
                          " (it must come from the same model and optimizer; delete it to "
                          "start afresh)");
  }
}

bool ServerShard::may_go_on(int client) const {
  const ClientState& state = clients_[static_cast<size_t>(client)];
  switch (rule_.mode) {
    case Consistency::kAsynchronous: return true;
    case Consistency::kSynchronous:
    case Consistency::kBoundedStaleness:
      if (rule_.staleness == 0) return version_ > state.last_computed_on;
      return version_ >= base_version_ + state.pushes - rule_.staleness;
  }
  return true;
}

std::string ServerShard::holding_up(int client) const {
  std::string who;
  for (size_t c = 0; c < clients_.size(); ++c) {
    if (static_cast<int>(c) == client || !clients_[c].alive) continue;
    const auto pending = pending_.find(version_);
    const bool pushed =
        pending != pending_.end() &&
        std::any_of(pending->second.begin(), pending->second.end(),
                    [&](const Contribution& x) { return x.client == static_cast<int>(c); });
    if (!pushed) who += (who.empty() ? "" : ", ") + std::to_string(client_ranks_[c]);
  }
  return who.empty() ? "none" : who;
}

void ServerShard::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopped_ = true;
  changed_.notify_all();
}

int64_t ServerShard::parameters_for(int client, torch::Tensor& out, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_until(lock, deadline.at(), [&] { return stopped_ || may_go_on(client); })) {
    throw TimeoutError(std::string(kHeldUp) + ": rank " + std::to_string(client_ranks_[client]) +
                       " waited for step " + std::to_string(version_) +
                       " past its deadline; ranks that have not pushed their gradient for it: " +
                       holding_up(client) + " (a straggler, or raise the timeout)");
  }
  if (stopped_) throw Error("ParameterServer: the server stopped");
  copy_parameters(out);
  return version_;
}

int64_t ServerShard::current_parameters(torch::Tensor& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  copy_parameters(out);
  return version_;
}

int64_t ServerShard::final_parameters(torch::Tensor& out, Milliseconds quiet) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const int64_t seen = events_;
    if (changed_.wait_until(lock, Deadline::after(quiet).at(),
                            [&] { return stopped_ || alive_locked() == 0 || events_ != seen; }) &&
        (stopped_ || alive_locked() == 0)) {
      break;
    }
    if (events_ != seen) continue;  // someone is still training
    std::string left;
    for (size_t c = 0; c < clients_.size(); ++c) {
      if (clients_[c].alive) left += (left.empty() ? "" : ", ") + std::to_string(client_ranks_[c]);
    }
    throw TimeoutError("parameter server: ranks " + left + " neither pushed nor finished for " +
                       std::to_string(quiet.count()) + " ms while the others waited to finish");
  }
  if (stopped_) throw Error("ParameterServer: the server stopped");
  copy_parameters(out);
  return version_;
}

void ServerShard::copy_parameters(torch::Tensor& out) const {
  int64_t offset = 0;
  torch::NoGradGuard no_grad;
  for (const auto& p : parameters_) {
    out.narrow(0, offset, p.numel()).copy_(p.reshape({-1}));
    offset += p.numel();
  }
}

void ServerShard::leave(int client, bool died) {
  std::lock_guard<std::mutex> lock(mutex_);
  ClientState& state = clients_.at(static_cast<size_t>(client));
  if (!state.alive) return;
  ++events_;
  state.alive = false;
  state.died = died;
  if (rule_.mode != Consistency::kAsynchronous) apply_ready_steps();
  changed_.notify_all();
}

ServerStats ServerShard::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ServerStats stats;
  stats.version = version_;
  stats.staleness_counts = staleness_counts_;
  stats.applied = applied_;
  stats.dropped = dropped_;
  stats.client_ranks = client_ranks_;
  for (size_t c = 0; c < clients_.size(); ++c) {
    const ClientState& state = clients_[c];
    if (state.died) stats.dead_workers.push_back(client_ranks_[c]);
    const double span_ms =
        std::chrono::duration<double, std::milli>(state.last_push - state.first_push).count();
    stats.mean_push_interval_ms.push_back(
        state.pushes > 1 ? span_ms / static_cast<double>(state.pushes - 1) : 0.0);
  }
  // The straggler among the clients that finished (a dead one's last interval means little).
  std::vector<double> known;
  size_t slowest = 0;
  for (size_t c = 0; c < clients_.size(); ++c) {
    const double ms = stats.mean_push_interval_ms[c];
    if (ms <= 0 || clients_[c].died) continue;
    if (known.empty() || ms > stats.mean_push_interval_ms[slowest]) slowest = c;
    known.push_back(ms);
  }
  if (!known.empty()) {
    std::sort(known.begin(), known.end());
    const double median = known[known.size() / 2];
    stats.slowest_worker = client_ranks_[slowest];
    stats.slowest_ratio = median > 0 ? stats.mean_push_interval_ms[slowest] / median : 0;
  }
  return stats;
}

}  // namespace cohort::ps
