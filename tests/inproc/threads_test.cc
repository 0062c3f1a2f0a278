// The threads a group starts (docs/architecture.md, "Threads"): one stall watcher for every
// group of the process (Note [One stall watcher]), and a group's worker only with its first
// queued operation (Note [Worker on demand]). A group of one rank: its calls need no peer, so
// the test's own threads are the only others.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/inproc_transport.h"
#include "support/sync.h"

namespace cohort {
namespace {

std::shared_ptr<Group> group_of_one(const std::string& name) {
  GroupOptions options;
  options.name = name;
  return Group::create_inproc(std::make_shared<InprocFabric>(1), 0, options);
}

// A joined thread leaves /proc a moment after join() returns: polls, with a deadline.
bool thread_count_reaches(int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (testing::thread_count() != expected) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(GroupThreads, BlockingCallsStartNoWorkerAndGroupsShareOneWatcher) {
  // A first thread, so that helper threads of the runtime (TSan's) are counted in `before`.
  std::thread([] {}).join();
  ASSERT_TRUE(thread_count_reaches(testing::thread_count()));
  const int before = testing::thread_count();
  ASSERT_GT(before, 0) << "cannot count this process's threads";
  auto first = group_of_one("first");
  const int with_one_group = testing::thread_count();
  EXPECT_EQ(with_one_group, before + 1) << "the stall watcher, and no worker";

  std::vector<float> data(16, 1.0f);
  first->allreduce(make_buffer(data));
  first->barrier();
  EXPECT_EQ(testing::thread_count(), with_one_group) << "blocking calls ran on this thread";

  auto second = group_of_one("second");
  second->allreduce(make_buffer(data));
  EXPECT_EQ(testing::thread_count(), with_one_group) << "the second group shares the watcher";

  first->allreduce_async(make_buffer(data))->wait();
  EXPECT_EQ(testing::thread_count(), with_one_group + 1) << "the first queued call starts a worker";
  first->allreduce_async(make_buffer(data))->wait();
  EXPECT_EQ(testing::thread_count(), with_one_group + 1) << "one worker per group";

  first.reset();
  second.reset();
  EXPECT_TRUE(thread_count_reaches(before))
      << "the last group stops the watcher: " << testing::thread_count() << " threads, not "
      << before;
}

}  // namespace
}  // namespace cohort
