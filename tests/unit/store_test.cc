// Store semantics for every implementation (store_semantics.h), plus what is particular to
// MemoryStore (shutdown) and PrefixStore (isolation).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/error.h"
#include "store_semantics.h"
#include "support/sync.h"

namespace cohort::testing {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using testing::BackgroundCall;
constexpr std::chrono::seconds kBlockDeadline{10};

// ---- the contract, for every store

TEST_P(StoreSemantics, SetThenGetReturnsTheLatestValue) {
  store().set("key", to_bytes("one"));
  EXPECT_EQ(to_string(store().get("key", kLong)), "one");
  store().set("key", std::string("two"));
  EXPECT_EQ(store().get_string("key", kLong), "two");
  const Bytes binary = {0, 255, 10, 0};
  store().set("bin", binary);
  EXPECT_EQ(store().get("bin", kLong), binary);
  store().set("empty", Bytes{});
  EXPECT_EQ(store().get("empty", kLong), Bytes{});
}

TEST_P(StoreSemantics, GetBlocksUntilAnotherThreadSets) {
  BackgroundCall<std::string> getter([&] { return store().get_string("late", kLong); });
  ASSERT_TRUE(getter.wait_until_blocked(kBlockDeadline));
  ASSERT_NE(getter.result().wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "get returned before the key was set";
  store().set("late", to_bytes("here"));
  ASSERT_EQ(getter.result().wait_for(kBlockDeadline), std::future_status::ready);
  EXPECT_EQ(getter.result().get(), "here");
}

TEST_P(StoreSemantics, GetTimesOutNamingTheKey) {
  try {
    store().get("never_set_key", kShort);
    FAIL() << "get returned";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "never_set_key")) << e.what();
  }
  store().set_timeout(kShort);  // the default-timeout overloads use it
  EXPECT_THROW(store().get("never_set_key"), TimeoutError);
  EXPECT_THROW(store().wait({"never_set_key"}), TimeoutError);
}

TEST_P(StoreSemantics, WaitReturnsOnceEveryKeyExists) {
  store().set("first", to_bytes("1"));
  BackgroundCall<void> waiter([&] { store().wait({"first", "second"}, kLong); });
  ASSERT_TRUE(waiter.wait_until_blocked(kBlockDeadline));
  ASSERT_NE(waiter.result().wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "wait returned while \"second\" was missing";
  store().set("second", to_bytes("2"));
  ASSERT_EQ(waiter.result().wait_for(kBlockDeadline), std::future_status::ready);
  EXPECT_NO_THROW(waiter.result().get());
  EXPECT_NO_THROW(store().wait({}, kShort));
}

TEST_P(StoreSemantics, WaitTimesOutNamingOnlyTheMissingKeys) {
  store().set("present_key", to_bytes("x"));
  try {
    store().wait({"present_key", "missing_key_a", "missing_key_b"}, kShort);
    FAIL() << "wait returned";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "missing_key_a")) << e.what();
    EXPECT_TRUE(contains(e.what(), "missing_key_b")) << e.what();
    EXPECT_FALSE(contains(e.what(), "present_key")) << e.what();
  }
}

TEST_P(StoreSemantics, AddCountsFromAbsentAndTakesNegativeDeltas) {
  EXPECT_EQ(store().add("counter", 5), 5);
  EXPECT_EQ(store().add("counter", 3), 8);
  EXPECT_EQ(store().add("counter", -10), -2);
  EXPECT_EQ(store().add("counter", 0), -2);
  EXPECT_EQ(store().get_string("counter", kLong), "-2");  // stored as decimal text
  EXPECT_EQ(store().add("negative_start", -1), -1);
  store().set("preset", std::string("40"));
  EXPECT_EQ(store().add("preset", 2), 42);
}

TEST_P(StoreSemantics, AddOnANonIntegerIsInvalidArgumentAndLeavesTheValue) {
  store().set("text", std::string("hello"));
  EXPECT_THROW(store().add("text", 1), InvalidArgument);
  store().set("partly", std::string("12abc"));
  EXPECT_THROW(store().add("partly", 1), InvalidArgument);
  EXPECT_EQ(store().get_string("text", kLong), "hello");
  EXPECT_EQ(store().get_string("partly", kLong), "12abc");
}

TEST_P(StoreSemantics, ConcurrentAddsAreAtomic) {
  constexpr int kThreads = 4;
  constexpr int kAddsEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAddsEach; ++i) store().add("shared", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store().add("shared", 0), kThreads * kAddsEach);
}

TEST_P(StoreSemantics, AddWakesAWaiter) {
  BackgroundCall<void> waiter([&] { store().wait({"arrivals"}, kLong); });
  ASSERT_TRUE(waiter.wait_until_blocked(kBlockDeadline));
  store().add("arrivals", 1);
  ASSERT_EQ(waiter.result().wait_for(kBlockDeadline), std::future_status::ready);
  EXPECT_NO_THROW(waiter.result().get());
}

TEST_P(StoreSemantics, CompareSetOnAnAbsentKey) {
  // A non-empty expected value does not match an absent key: nothing is set.
  EXPECT_EQ(store().compare_set("slot", to_bytes("old"), to_bytes("new")), Bytes{});
  EXPECT_THROW(store().get("slot", kShort), TimeoutError);
  // An empty expected value matches an absent key.
  EXPECT_EQ(to_string(store().compare_set("slot", {}, to_bytes("first"))), "first");
  EXPECT_EQ(store().get_string("slot", kLong), "first");
}

TEST_P(StoreSemantics, CompareSetSwapsOnlyOnMatch) {
  store().set("slot", to_bytes("a"));
  EXPECT_EQ(to_string(store().compare_set("slot", to_bytes("a"), to_bytes("b"))), "b");
  EXPECT_EQ(store().get_string("slot", kLong), "b");
  // Mismatch: the value stays and the current one comes back.
  EXPECT_EQ(to_string(store().compare_set("slot", to_bytes("a"), to_bytes("c"))), "b");
  EXPECT_EQ(store().get_string("slot", kLong), "b");
  // An empty expected value does not match an existing key.
  EXPECT_EQ(to_string(store().compare_set("slot", {}, to_bytes("d"))), "b");
}

TEST_P(StoreSemantics, CompareSetElectsExactlyOneWinner) {
  constexpr int kThreads = 4;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Bytes mine = to_bytes("rank" + std::to_string(t));
      if (store().compare_set("leader", {}, mine) == mine) ++winners;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
}

TEST_P(StoreSemantics, DeleteKeyAndNumKeys) {
  const int64_t before = store().num_keys();
  store().set("d1", to_bytes("x"));
  store().set("d2", to_bytes("y"));
  store().set("d2", to_bytes("z"));  // overwriting adds no key
  EXPECT_EQ(store().num_keys(), before + 2);
  EXPECT_TRUE(store().delete_key("d1"));
  EXPECT_FALSE(store().delete_key("d1"));
  EXPECT_FALSE(store().delete_key("never_there"));
  EXPECT_EQ(store().num_keys(), before + 1);
  EXPECT_THROW(store().get("d1", kShort), TimeoutError);
  EXPECT_EQ(store().get_string("d2", kLong), "z");
  // A deleted counter starts again from zero.
  store().add("count", 7);
  EXPECT_TRUE(store().delete_key("count"));
  EXPECT_EQ(store().add("count", 1), 1);
}

std::shared_ptr<Store> make_memory() {
  return std::make_shared<MemoryStore>();
}
std::shared_ptr<Store> make_prefixed() {
  return std::make_shared<PrefixStore>("job", std::make_shared<MemoryStore>());
}
std::shared_ptr<Store> make_prefixed_twice() {
  auto inner = std::make_shared<PrefixStore>("job", std::make_shared<MemoryStore>());
  return std::make_shared<PrefixStore>("group", inner);
}

INSTANTIATE_TEST_SUITE_P(Local, StoreSemantics,
                         ::testing::Values(StoreFactory{"memory", make_memory},
                                           StoreFactory{"prefix", make_prefixed},
                                           StoreFactory{"prefix_of_prefix", make_prefixed_twice}),
                         StoreFactory::name_of);

// ---- MemoryStore: shutdown

TEST(MemoryStoreTest, ShutdownWakesBlockedGetAndWaitWithStoreError) {
  MemoryStore store;
  // 60 s deadlines: the calls must end long before them, woken by the shutdown (at their own
  // deadline they see the shutdown too, so only the wait below tells the two apart).
  BackgroundCall<void> getter([&] { store.get("never", Milliseconds(60'000)); });
  BackgroundCall<void> waiter([&] { store.wait({"never", "nor_this"}, Milliseconds(60'000)); });
  ASSERT_TRUE(getter.wait_until_blocked(kBlockDeadline));
  ASSERT_TRUE(waiter.wait_until_blocked(kBlockDeadline));
  store.shutdown();
  ASSERT_EQ(getter.result().wait_for(kBlockDeadline), std::future_status::ready);
  ASSERT_EQ(waiter.result().wait_for(kBlockDeadline), std::future_status::ready);
  EXPECT_THROW(getter.result().get(), StoreError);
  EXPECT_THROW(waiter.result().get(), StoreError);
}

TEST(MemoryStoreTest, CallsAfterShutdownFailWithStoreError) {
  MemoryStore store;
  store.set("k", to_bytes("v"));
  store.shutdown();
  EXPECT_THROW(store.set("k", to_bytes("w")), StoreError);
  EXPECT_THROW(store.get("k", Milliseconds(10)), StoreError);
  EXPECT_THROW(store.add("n", 1), StoreError);
  EXPECT_THROW(store.compare_set("k", {}, {}), StoreError);
  EXPECT_THROW(store.wait({"k"}, Milliseconds(10)), StoreError);
  EXPECT_THROW(store.delete_key("k"), StoreError);
  EXPECT_THROW(store.num_keys(), StoreError);
}

// ---- PrefixStore: isolation

TEST(PrefixStoreTest, TwoPrefixesOverOneStoreDoNotSeeEachOther) {
  auto inner = std::make_shared<MemoryStore>();
  PrefixStore a("a", inner);
  PrefixStore b("b", inner);
  a.set("k", to_bytes("from a"));
  EXPECT_THROW(b.get("k", Milliseconds(30)), TimeoutError);
  b.set("k", to_bytes("from b"));
  EXPECT_EQ(a.get_string("k", Milliseconds(1000)), "from a");
  EXPECT_EQ(b.get_string("k", Milliseconds(1000)), "from b");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_EQ(a.add("n", 1), 2);
  EXPECT_TRUE(a.delete_key("k"));
  EXPECT_EQ(b.get_string("k", Milliseconds(1000)), "from b");
  // The inner store holds the prefixed keys.
  EXPECT_EQ(inner->get_string("b/k", Milliseconds(1000)), "from b");
  EXPECT_EQ(inner->get_string("a/n", Milliseconds(1000)), "2");
  EXPECT_EQ(a.prefix(), "a");
  EXPECT_EQ(a.inner(), inner);
}

TEST(PrefixStoreTest, TimeoutNamesThePrefixedKeyAndInheritsTheInnerTimeout) {
  auto inner = std::make_shared<MemoryStore>();
  inner->set_timeout(Milliseconds(40));
  PrefixStore view("grp", inner);
  EXPECT_EQ(view.timeout(), Milliseconds(40));
  try {
    view.get("missing");
    FAIL() << "get returned";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "grp/missing")) << e.what();
  }
}

TEST(PrefixStoreTest, NeedsAnInnerStore) {
  EXPECT_THROW(PrefixStore("p", nullptr), InvalidArgument);
}

}  // namespace
}  // namespace cohort::testing
