// The job's store, as the launch environment names it (LaunchEnv::rdzv_backend): what
// cohort::init and cohort::init_elastic make their groups over, for a program that needs the
// store itself (its own keys, a rendezvous of its own). docs/store.md.
#pragma once

#include <memory>
#include <string>

#include "cohort/comm/group.h"
#include "cohort/comm/launch_env.h"
#include "cohort/comm/store.h"

namespace cohort {

// etcd (COHORT_RDZV_BACKEND=etcd: the endpoints, under /cohort/<job id>/), else the TCP store at
// master_addr:master_port, which this process serves when `serve`; under env.store_prefix
// either way. `group` gives the timeout (0: the store's default, 300 s) and the job token
// (empty: COHORT_JOB_TOKEN).
std::shared_ptr<Store> connect_job_store(const LaunchEnv& env, const GroupOptions& group,
                                         bool serve);

// Where job `job_id`'s keys live in etcd: "/cohort/<job id>/" (its ranks' and its cohortruns').
std::string etcd_job_prefix(const std::string& job_id);

}  // namespace cohort
