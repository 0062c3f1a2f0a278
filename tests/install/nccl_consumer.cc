// Built against an installed cohort with its nccl component: links the NCCL backend and makes
// an NCCL group of one rank. Without a GPU that is the ConfigError create_nccl_group promises,
// which still shows the program linked and ran.
#include <cohort/cohort.h>
#include <cohort/comm/nccl.h>

#include <cstdio>

int main() {
  if (!cohort::nccl_backend_built()) {
    std::printf("nccl_consumer: nccl_backend_built() is false in a build with the component\n");
    return 1;
  }
  auto fabric = std::make_shared<cohort::InprocFabric>(1);
  auto world = cohort::Group::create_inproc(fabric, 0);
  try {
    auto gpus = cohort::create_nccl_group(world);
    std::printf("nccl_consumer: NCCL group of %d rank(s)\n", gpus->size());
  } catch (const cohort::ConfigError& e) {
    std::printf("nccl_consumer: no GPU here: %s\n", e.what());
  }
  return 0;
}
