// EtcdStore (cohort/comm/etcd_store.h) against a 3-member etcd cluster started by the test
// (support/etcd_cluster.h): the Store contract as the TCP store keeps it, atomic counters under
// contention, a member's death, the quorum's loss, another job's token, the job's lease, and a
// group formed through it.
#include "cohort/comm/etcd_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cohort/comm/buffer.h"
#include "cohort/comm/group.h"
#include "cohort/core/deadline.h"
#include "cohort/core/error.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/etcd_lease.h"
#include "support/etcd_cluster.h"
#include "support/test_support.h"

namespace cohort::testing {
namespace {

EtcdStoreOptions options_for(const EtcdCluster& cluster, const std::string& prefix) {
  EtcdStoreOptions options;
  options.endpoints = cluster.endpoint_list();
  options.prefix = prefix;
  options.token = "etcd-test-token";
  return options;
}

TEST(EtcdStore, KeepsTheStoreContract) {
  EtcdCluster cluster;
  EtcdStore store(options_for(cluster, "/cohort/contract/"));
  store.set("a", std::string("one"));
  EXPECT_EQ(to_string(store.get("a", std::chrono::seconds(5))), "one");
  store.set("empty", Bytes{});
  EXPECT_EQ(store.get("empty", std::chrono::seconds(5)), Bytes{});
  EXPECT_EQ(store.add("counter", 5), 5);
  EXPECT_EQ(store.add("counter", -2), 3);
  EXPECT_THROW(store.add("a", 1), InvalidArgument);  // "one" is not a counter
  // compare_set: an absent key matches an empty expectation; a mismatch leaves the value.
  EXPECT_EQ(to_string(store.compare_set("cas", {}, to_bytes("x"))), "x");
  EXPECT_EQ(to_string(store.compare_set("cas", to_bytes("y"), to_bytes("z"))), "x");
  EXPECT_EQ(to_string(store.compare_set("cas", to_bytes("x"), to_bytes("z"))), "z");
  EXPECT_EQ(store.num_keys(), 4);  // a, empty, counter, cas: not the token
  EXPECT_TRUE(store.delete_key("a"));
  EXPECT_FALSE(store.delete_key("a"));
  EXPECT_EQ(store.num_keys(), 3);
  std::thread later([&] {
    EtcdStore other(options_for(cluster, "/cohort/contract/"));
    other.set("late", std::string("here"));
  });
  store.wait({"counter", "late"}, std::chrono::seconds(30));
  later.join();
  try {
    store.get("never", std::chrono::milliseconds(200));
    ADD_FAILURE() << "no TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EtcdStore apart(options_for(cluster, "/cohort/another-job/"));
  EXPECT_EQ(apart.num_keys(), 0);
}

TEST(EtcdStore, CountersAndCompareSetAreAtomicAcrossClients) {
  EtcdCluster cluster;
  constexpr int kClients = 4, kAdds = 25;
  std::vector<std::thread> clients;
  std::vector<int> won(kClients, 0);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      EtcdStore store(options_for(cluster, "/cohort/atomic/"));
      for (int i = 0; i < kAdds; ++i) store.add("sum", 1);
      const std::string me = std::to_string(c);
      if (to_string(store.compare_set("winner", {}, to_bytes(me))) == me) won[c] = 1;
    });
  }
  for (auto& c : clients) c.join();
  EtcdStore store(options_for(cluster, "/cohort/atomic/"));
  EXPECT_EQ(store.add("sum", 0), kClients * kAdds);
  EXPECT_EQ(won[0] + won[1] + won[2] + won[3], 1) << "compare_set let two clients win";
}

// The store goes on through the death of the member it was talking to (an election follows).
TEST(EtcdStore, GoesOnWhenAMemberDies) {
  EtcdCluster cluster;
  EtcdStore store(options_for(cluster, "/cohort/member-dies/"));
  store.set("before", std::string("1"));
  cluster.kill(0);
  store.set("after", std::string("2"));
  EXPECT_EQ(store.add("counter", 7), 7);
  EXPECT_EQ(to_string(store.get("before", std::chrono::seconds(5))), "1");
}

// Without a quorum no member answers: a call throws StoreError naming etcd, its endpoints and
// the likely cause, after unavailable_timeout, instead of hanging.
TEST(EtcdStore, LosingTheQuorumIsAStoreErrorNamingEtcd) {
  EtcdCluster cluster;
  EtcdStoreOptions options = options_for(cluster, "/cohort/quorum/");
  options.unavailable_timeout = std::chrono::seconds(3);
  options.request_timeout = std::chrono::milliseconds(500);
  EtcdStore store(options);
  store.set("before", std::string("1"));
  cluster.kill(0);
  cluster.kill(1);
  try {
    store.set("after", std::string("2"));
    ADD_FAILURE() << "no StoreError";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("etcd"), std::string::npos) << what;
    EXPECT_NE(what.find("quorum"), std::string::npos) << what;
    EXPECT_NE(what.find(cluster.endpoint_list()[2]), std::string::npos) << what;
  }
}

TEST(EtcdStore, AnotherJobsTokenIsRefused) {
  EtcdCluster cluster;
  EtcdStore first(options_for(cluster, "/cohort/token/"));
  EtcdStoreOptions other = options_for(cluster, "/cohort/token/");
  other.token = "another-token";
  try {
    EtcdStore second(other);
    ADD_FAILURE() << "no StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("another job token"), std::string::npos) << e.what();
  }
}

// The job's keys hang on one lease that its stores renew (Note [etcd lease] in etcd_store.cc):
// they outlive three TTLs while a store lives and are gone within a few once none does, which
// frees the prefix for another job (until then its token is refused).
TEST(EtcdStore, TheKeysLiveAsLongAsAStoreOfTheJobDoes) {
  EtcdCluster cluster;
  EtcdStoreOptions options = options_for(cluster, "/cohort/lease/");
  options.lease_ttl = std::chrono::seconds(1);
  auto job = std::make_unique<EtcdStore>(options);
  job->set("x", std::string("kept"));
  // Three TTLs of reads (an expired lease would make them a StoreError), then the key is there.
  EXPECT_THROW(job->get("never", std::chrono::milliseconds(3500)), TimeoutError);
  ASSERT_EQ(to_string(job->get("x", std::chrono::milliseconds(100))), "kept");
  EtcdStoreOptions watcher = options;  // the same job's token, on no lease: renews nothing
  watcher.lease_ttl = Milliseconds(0);
  EtcdStore observer(watcher);
  job.reset();
  EtcdStoreOptions next_job = options;
  next_job.token = "the-next-job";
  EXPECT_THROW(EtcdStore{next_job}, StoreError);  // within the TTL: the keys are still there
  const Deadline expiry = Deadline::after(std::chrono::seconds(15));
  // The expiry is etcd's own event, which cohort's client cannot watch: it is polled, paced so
  // as not to take the 3-member cluster's cores (a leader election renews every lease).
  while (observer.num_keys() > 0 && !expiry.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(observer.num_keys(), 0) << "the job's keys outlived its last store by 15 s";
  EtcdStore next(next_job);  // the prefix is free: its token is gone with the keys
  EXPECT_EQ(next.num_keys(), 0);
}

// A store whose lease is gone (here revoked, as etcd does to one no process renewed for its
// TTL) says so at its next call, instead of waiting for keys that went with it.
TEST(EtcdStore, AStoreWhoseLeaseExpiredSaysSo) {
  EtcdCluster cluster;
  EtcdStoreOptions options = options_for(cluster, "/cohort/expired/");
  options.lease_ttl = std::chrono::seconds(3);
  EtcdStore job(options);
  job.set("x", std::string("gone"));
  detail::EtcdClient client(cluster.endpoint_list(), std::chrono::seconds(2),
                            std::chrono::seconds(15));
  const nlohmann::json lease = client.post(
      "/v3/kv/range", {{"key", detail::base64_encode("/cohort/expired/lease")}}, "the test");
  detail::revoke_etcd_lease(
      client, detail::base64_decode(lease.at("kvs").at(0).at("value").get<std::string>()));
  try {
    job.get("x", std::chrono::seconds(10));  // renewed within a third of the TTL: found expired
    ADD_FAILURE() << "no StoreError";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("the job's lease"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expired"), std::string::npos) << e.what();
  }
}

TEST(EtcdStore, BadOptionsAreConfigErrors) {
  EXPECT_THROW(parse_etcd_endpoints("h1:2379,,h2:2379"), ConfigError);
  EXPECT_EQ(parse_etcd_endpoints("h1:2379, h2:2379"),
            (std::vector<std::string>{"h1:2379", "h2:2379"}));
  EtcdStoreOptions none;
  none.prefix = "/cohort/x/";
  EXPECT_THROW(EtcdStore{none}, ConfigError);
  EtcdStoreOptions no_prefix;
  no_prefix.endpoints = {"127.0.0.1:1"};
  EXPECT_THROW(EtcdStore{no_prefix}, ConfigError);
  EtcdStoreOptions part_second = no_prefix;
  part_second.prefix = "/cohort/x/";
  part_second.lease_ttl = std::chrono::milliseconds(1500);
  EXPECT_THROW(EtcdStore{part_second}, ConfigError);
}

// Ranks rendezvous through etcd as through the TCP store: a group forms and allreduces.
TEST(EtcdStore, AGroupFormsThroughIt) {
  EtcdCluster cluster;
  constexpr int kWorld = 3;
  std::vector<float> sums(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      auto store = std::make_shared<EtcdStore>(options_for(cluster, "/cohort/group/"));
      GroupOptions options;
      options.host = "127.0.0.1";
      auto group = Group::create(store, r, kWorld, options);
      float value = static_cast<float>(r + 1);
      group->allreduce(make_buffer(&value, 1));
      sums[r] = value;
    });
  }
  for (auto& r : ranks) r.join();
  EXPECT_EQ(sums, (std::vector<float>(kWorld, 6.0f)));
}

}  // namespace
}  // namespace cohort::testing
