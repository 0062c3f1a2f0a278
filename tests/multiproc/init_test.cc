// cohort::init from a launcher's environment: a world of one with no launcher, and a job of
// ranks that meet at MASTER_ADDR:MASTER_PORT, where rank 0 hosts the store.
#include "cohort/comm/init.h"

#include <gtest/gtest.h>

#include "net/socket.h"
#include "support/test_support.h"

namespace cohort {
namespace {

TEST(Init, WithoutALauncherAWorldOfOne) {
  auto group = init(LaunchEnv{});
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
  std::vector<float> data(10, 2.0f);
  group->allreduce(make_buffer(data));
  EXPECT_EQ(data[9], 2.0f);
}

TEST(Init, RanksMeetAtTheMasterAddress) {
  const uint16_t port = net::Listener::bind("127.0.0.1", 0).port();  // free a moment ago
  const int world = 3;
  testing::run_ranks(world, [&](int rank) {
    LaunchEnv env;
    env.launcher = "torchrun";
    env.rank = rank;
    env.world_size = world;
    env.local_rank = rank;
    env.local_world_size = world;
    env.master_addr = "127.0.0.1";
    env.master_port = port;
    InitOptions options;
    options.group = testing::quick_options();
    auto group = init(env, options);
    EXPECT_EQ(group->rank(), rank);
    EXPECT_EQ(group->size(), world);
    EXPECT_EQ(group->local_size(), world);
    std::vector<int32_t> data(1000, rank + 1);
    group->allreduce(make_buffer(data));
    EXPECT_EQ(data[999], 1 + 2 + 3);
    group->barrier();  // rank 0 hosts the store: nobody leaves while others still use it
  });
}

}  // namespace
}  // namespace cohort
