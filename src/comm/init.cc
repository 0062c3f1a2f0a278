#include "cohort/comm/init.h"

#include "cohort/comm/memory_store.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/comm/tcp_store.h"

namespace cohort {

std::shared_ptr<Group> init(InitOptions options) { return init(read_launch_env(), options); }

std::shared_ptr<Group> init(const LaunchEnv& env, InitOptions options) {
  options.group = options.group.resolved();
  if (env.world_size == 1) {
    return Group::create(std::make_shared<MemoryStore>(), 0, 1, options.group);
  }
  TcpStoreOptions store;
  store.host = env.master_addr;
  store.port = env.master_port;
  store.is_server = env.rank == 0 && !env.store_hosted;
  store.timeout = options.group.timeout;
  store.token = options.group.job_token;
  std::shared_ptr<Store> job_store = std::make_shared<TcpStore>(store);
  if (!env.store_prefix.empty()) {
    job_store = std::make_shared<PrefixStore>(env.store_prefix, std::move(job_store));
  }
  return Group::create(std::move(job_store), env.rank, env.world_size, options.group);
}

}  // namespace cohort
