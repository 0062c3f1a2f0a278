// ParameterServer::create: checks the options and the model, lays the job out, connects the
// pairs and builds this rank's role (server_role.h or worker_role.h).
#include "cohort/torch/async/parameter_server.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "async/layout.h"
#include "async/pair_groups.h"
#include "async/server_role.h"
#include "async/worker_role.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/tensor_buffer.h"
#include "model_check.h"

namespace cohort {
namespace {

struct Parameter {
  std::string name;
  torch::Tensor tensor;
};

std::vector<Parameter> trained_parameters(torch::nn::Module& model) {
  std::vector<Parameter> trained;
  for (const auto& item : model.named_parameters()) {
    if (item.value().requires_grad()) trained.push_back({item.key(), item.value()});
  }
  return trained;
}

void check_options(const Group& group, const ParameterServerOptions& o) {
  COHORT_CHECK(o.num_servers >= 1 && o.num_servers < group.size(),
               "ParameterServer: num_servers = ", o.num_servers,
               " must leave at least one worker in a group of ", group.size(), " ranks");
  COHORT_CHECK(o.staleness >= 0, "ParameterServer: staleness = ", o.staleness,
               " must be 0 or more");
  COHORT_CHECK(o.consistency != Consistency::kSynchronous || o.staleness == 0,
               "ParameterServer: staleness = ", o.staleness,
               " is for Consistency::kBoundedStaleness; kSynchronous is staleness 0");
  COHORT_CHECK(o.checkpoint.empty() || o.checkpoint_every >= 1,
               "ParameterServer: checkpoint_every = ", o.checkpoint_every, " must be 1 or more");
  const int workers = group.size() - o.num_servers;
  COHORT_CHECK(o.backup_workers >= 0 && o.backup_workers < workers,
               "ParameterServer: backup_workers = ", o.backup_workers, " must be in [0, ", workers,
               ") with ", workers, " workers");
  const bool synchronous = o.consistency == Consistency::kSynchronous ||
                           (o.consistency == Consistency::kBoundedStaleness && o.staleness == 0);
  COHORT_CHECK(o.backup_workers == 0 || synchronous,
               "ParameterServer: backup_workers = ", o.backup_workers,
               " needs synchronous steps (kSynchronous, or kBoundedStaleness with staleness 0)");
}

// Every rank must hold the same model: refused on every rank, naming the first parameter
// that differs (model_check.h).
void check_same_model(Group& group, torch::nn::Module& model) {
  std::vector<std::string> entries;
  for (const auto& item : model.named_parameters()) {
    std::ostringstream line;
    line << item.key() << ' ' << item.value().dtype() << ' ' << item.value().sizes()
         << (item.value().requires_grad() ? "" : " frozen");
    entries.push_back(line.str());
  }
  check_same_on_all_ranks(group, entries, "parameter", CallSite::kUser, "ParameterServer");
}

void check_one_dtype(const std::vector<Parameter>& trained) {
  COHORT_CHECK(!trained.empty(), "ParameterServer: the model has no parameter to train");
  for (const auto& p : trained) {
    COHORT_CHECK(p.tensor.scalar_type() == trained.front().tensor.scalar_type(),
                 "ParameterServer: parameter ", p.name, " is ", p.tensor.dtype(), " but ",
                 trained.front().name, " is ", trained.front().tensor.dtype(),
                 "; every trained parameter must have one dtype");
    COHORT_CHECK(p.tensor.device().is_cpu(), "ParameterServer: parameter ", p.name, " is on ",
                 p.tensor.device(), "; the parameter server takes CPU tensors");
  }
}

// The node of every rank, as the group found it.
std::vector<int> nodes_of_ranks(Group& group) {
  std::vector<int32_t> nodes(static_cast<size_t>(group.size()));
  int32_t mine = group.node_rank();
  group.allgather(ConstBuffer(&mine, 1, DType::kInt32), make_buffer(nodes));
  return {nodes.begin(), nodes.end()};
}

ps::Layout lay_out(Group& group, const ParameterServerOptions& o,
                   const std::vector<Parameter>& trained, const std::vector<int>& node_of) {
  ps::Layout layout;
  const int world = group.size();
  for (int r = 0; r < world; ++r) {
    (r >= world - o.num_servers ? layout.servers : layout.workers).push_back(r);
  }
  for (int w : layout.workers) {
    const bool lowest_of_node =
        std::none_of(layout.workers.begin(), layout.workers.end(), [&](int other) {
          return other < w &&
                 node_of[static_cast<size_t>(other)] == node_of[static_cast<size_t>(w)];
        });
    if (!o.hybrid || lowest_of_node) layout.clients.push_back(w);
  }
  std::vector<int64_t> numels;
  for (const auto& p : trained) numels.push_back(p.tensor.numel());
  layout.server_of_parameter = assign_to_servers(numels, o.num_servers);
  layout.parameters_of_server.resize(static_cast<size_t>(o.num_servers));
  for (size_t i = 0; i < trained.size(); ++i) {
    layout.parameters_of_server[static_cast<size_t>(layout.server_of_parameter[i])].push_back(
        static_cast<int>(i));
  }
  return layout;
}

Milliseconds resolved_timeout(const Group& group, const ParameterServerOptions& o) {
  if (o.timeout.count() > 0) return o.timeout;
  return group.options().resolved().timeout;
}

}  // namespace

const char* consistency_name(Consistency consistency) {
  switch (consistency) {
    case Consistency::kSynchronous: return "sync";
    case Consistency::kBoundedStaleness: return "ssp";
    case Consistency::kAsynchronous: return "async";
  }
  return "?";
}

Consistency parse_consistency(const std::string& name) {
  for (Consistency c :
       {Consistency::kSynchronous, Consistency::kBoundedStaleness, Consistency::kAsynchronous}) {
    if (name == consistency_name(c)) return c;
  }
  throw InvalidArgument("unknown consistency mode '" + name + "': use sync, ssp or async");
}

std::vector<int> assign_to_servers(const std::vector<int64_t>& numels, int num_servers) {
  COHORT_CHECK(num_servers >= 1, "assign_to_servers: num_servers = ", num_servers,
               " must be at least 1");
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(num_servers), 0);
  std::vector<int> server_of(numels.size(), 0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    server_of[i] = static_cast<int>(least - load.begin());
    *least += numels[i];
  }
  return server_of;
}

std::unique_ptr<ParameterServer> ParameterServer::create(std::shared_ptr<Group> group,
                                                         torch::nn::Module& model,
                                                         MakeOptimizer make_optimizer,
                                                         ParameterServerOptions options) {
  COHORT_CHECK(group != nullptr, "ParameterServer: the group is null");
  check_options(*group, options);
  check_same_model(*group, model);
  const std::vector<Parameter> trained = trained_parameters(model);
  check_one_dtype(trained);
  COHORT_CHECK(static_cast<size_t>(options.num_servers) <= trained.size(),
               "ParameterServer: num_servers = ", options.num_servers, " but the model has only ",
               trained.size(), " trained parameters; a server needs at least one");
  options.timeout = resolved_timeout(*group, options);
  const ps::Layout layout = lay_out(*group, options, trained, nodes_of_ranks(*group));
  // With hybrid the servers wait for nodes, not workers.
  COHORT_CHECK(options.backup_workers < static_cast<int>(layout.clients.size()),
               "ParameterServer: backup_workers = ", options.backup_workers, " must be below the ",
               layout.clients.size(), " nodes that push with hybrid");

  const int rank = group->rank();
  const auto is = [rank](const std::vector<int>& ranks) {
    return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  };
  // Hybrid: the workers of each node, ordered by rank (the client is the lowest).
  std::shared_ptr<Group> node;
  if (options.hybrid) {
    node = group->split(is(layout.workers) ? group->node_rank() : -1, rank);
  }
  auto pairs = ps::connect_pairs(*group, layout.servers, layout.clients);

  std::vector<torch::Tensor> tensors;
  for (const auto& p : trained) tensors.push_back(p.tensor);
  const auto server = std::find(layout.servers.begin(), layout.servers.end(), rank);
  if (server != layout.servers.end()) {
    const int index = static_cast<int>(server - layout.servers.begin());
    std::vector<torch::Tensor> shard;
    for (int i : layout.parameters_of_server[static_cast<size_t>(index)]) {
      shard.push_back(tensors[static_cast<size_t>(i)]);
    }
    const auto connected = pairs;
    try {
      auto optimizer = make_optimizer(shard);
      return std::make_unique<ps::ServerRole>(std::move(group), layout, index, std::move(shard),
                                              std::move(optimizer), options, std::move(pairs));
    } catch (const std::exception& e) {
      // The workers wait for their first parameters: they must hear of this now.
      for (auto& pair : connected) {
        pair->abort("parameter server rank " + std::to_string(rank) +
                    " failed to start: " + e.what());
      }
      throw;
    }
  }
  return std::make_unique<ps::WorkerRole>(std::move(group), layout, std::move(tensors), options,
                                          std::move(pairs), std::move(node));
}

}  // namespace cohort
