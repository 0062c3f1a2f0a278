#include "cohort/comm/init.h"

#include "cohort/comm/job_store.h"
#include "cohort/comm/memory_store.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"

namespace cohort {

std::shared_ptr<Group> init(InitOptions options) {
  return init(read_launch_env(), options);
}

Backend parse_backend(const std::string& text) {
  if (text == "auto") return Backend::kAuto;
  if (text == "native") return Backend::kNative;
  if (text == "mpi") return Backend::kMpi;
  if (text == "nccl") {
    throw ConfigError(
        "COHORT_BACKEND='nccl': init() makes host groups; make an NCCL group over one with "
        "cohort::create_nccl_group (docs/backends.md), and set COHORT_BACKEND to auto, native "
        "or mpi");
  }
  throw ConfigError("COHORT_BACKEND='" + text +
                    "': use auto, native (cohort's shared memory and TCP) or mpi");
}

namespace {

Backend resolve_backend(Backend requested, const LaunchEnv& env) {
  if (requested == Backend::kAuto) {
    requested = parse_backend(env_string("COHORT_BACKEND").value_or("auto"));
  }
  if (requested == Backend::kNccl) {
    throw ConfigError(
        "InitOptions::backend is Backend::kNccl: init() makes host groups; make an NCCL group "
        "over one with cohort::create_nccl_group (docs/backends.md)");
  }
  if (requested != Backend::kAuto) return requested;
  const bool mpi_launcher = env.launcher == "openmpi" || env.launcher == "mpich";
  return mpi_launcher && mpi_backend_built() ? Backend::kMpi : Backend::kNative;
}

bool is_loopback_name(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

std::shared_ptr<Group> init(const LaunchEnv& env, InitOptions options) {
  if (resolve_backend(options.backend, env) == Backend::kMpi) {
    return create_mpi_group(options.group, options.mpi);
  }
  options.group = options.group.resolved();
  if (env.world_size == 1) {
    return Group::create(std::make_shared<MemoryStore>(), 0, 1, options.group);
  }
  // Every rank on this machine (the launcher says so, or the store is only reachable from
  // here): peers reach each other over loopback, and rank listeners listen there only.
  if (options.group.host.empty() &&
      (env.local_world_size == env.world_size ||
       (env.rdzv_backend == "tcp" && is_loopback_name(env.master_addr)))) {
    options.group.host = "127.0.0.1";
  }
  const bool serve = env.rank == 0 && !env.store_hosted;
  return Group::create(connect_job_store(env, options.group, serve), env.rank, env.world_size,
                       options.group);
}

}  // namespace cohort
