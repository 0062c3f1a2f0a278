// Call stamps (Note [Call stamps] in src/comm/transport/call_stamp.h): what must agree across
// ranks, what may differ, and how a mismatch reads.
#include "transport/call_stamp.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

// Sites of an upper layer, as src/torch/call_sites.h defines its own (Note [Call site names]).
constexpr CallSite kGradients{2};
constexpr CallSite kJoin{4};
constexpr CallSite kConstructor{1};
const bool kRegistered = [] {
  register_call_site(kConstructor, "DistributedDataParallel's constructor");
  return true;
}();

CallStamp allreduce(size_t count, ReduceOp op = ReduceOp::kSum, CallSite site = CallSite::kUser) {
  return make_stamp(CollectiveKind::kAllreduce, count, DType::kFloat32, op, 0, site);
}

TEST(CallStamp, EveryPartOfTheCallCounts) {
  const CallStamp base = allreduce(100);
  EXPECT_TRUE(base.same_call(allreduce(100)));
  EXPECT_FALSE(base.same_call(allreduce(101)));
  EXPECT_FALSE(base.same_call(allreduce(100, ReduceOp::kMax)));
  EXPECT_FALSE(base.same_call(make_stamp(CollectiveKind::kAllgather, 100, DType::kFloat32,
                                         ReduceOp::kSum, 0, CallSite::kUser)));
  EXPECT_FALSE(base.same_call(make_stamp(CollectiveKind::kAllreduce, 100, DType::kInt32,
                                         ReduceOp::kSum, 0, CallSite::kUser)));
  const auto broadcast = [](int root) {
    return make_stamp(CollectiveKind::kBroadcast, 8, DType::kUInt8, ReduceOp::kSum, root,
                      CallSite::kUser);
  };
  EXPECT_FALSE(broadcast(0).same_call(broadcast(1)));
}

// join() stands in for the gradient allreduces from another site; an op or root that a
// collective does not use must not make two calls differ.
TEST(CallStamp, SitesAndUnusedPartsDoNotCount) {
  EXPECT_TRUE(
      allreduce(64, ReduceOp::kAvg, kGradients).same_call(allreduce(64, ReduceOp::kAvg, kJoin)));
  const auto gather = [](ReduceOp op, int root) {
    return make_stamp(CollectiveKind::kAllgather, 8, DType::kFloat32, op, root, CallSite::kUser);
  };
  EXPECT_TRUE(gather(ReduceOp::kSum, 0).same_call(gather(ReduceOp::kMax, 3)));
  EXPECT_EQ(call_fingerprint(7, allreduce(64, ReduceOp::kAvg, kGradients)),
            call_fingerprint(7, allreduce(64, ReduceOp::kAvg, kJoin)));
}

TEST(CallStamp, FingerprintSeesTheSequenceAndTheCall) {
  EXPECT_NE(call_fingerprint(7, allreduce(64)), call_fingerprint(8, allreduce(64)));
  EXPECT_NE(call_fingerprint(7, allreduce(64)), call_fingerprint(7, allreduce(65)));
  EXPECT_NE(call_fingerprint(7, allreduce(64)), call_fingerprint(7, allreduce(64, ReduceOp::kMin)));
}

TEST(CallStamp, MismatchNamesBothCallsBothRanksAndTheSite) {
  const MismatchError same = call_mismatch(
      3, 0,
      make_stamp(CollectiveKind::kAllgather, 2, DType::kInt64, ReduceOp::kSum, 0, kConstructor), 3,
      1, allreduce(1));
  EXPECT_NE(
      std::string(same.what())
          .find("at collective #3 of the group: rank 0 called allgather(count=2, dtype=int64) in "
                "DistributedDataParallel's constructor but rank 1 called allreduce(count=1, "
                "dtype=float32, op=sum)"),
      std::string::npos)
      << same.what();
  const MismatchError skipped = call_mismatch(4, 1, allreduce(1), 5, 2, allreduce(1));
  EXPECT_NE(std::string(skipped.what())
                .find("rank 1 called allreduce(count=1, dtype=float32, op=sum) as its collective "
                      "#4 but rank 2 called allreduce(count=1, dtype=float32, op=sum) as its "
                      "collective #5"),
            std::string::npos)
      << skipped.what();
}

TEST(CallStamp, SiteNamesAreRegisteredByTheLayerAbove) {
  EXPECT_TRUE(kRegistered);
  EXPECT_STREQ(call_site_name(kConstructor), "DistributedDataParallel's constructor");
  EXPECT_STREQ(call_site_name(CallSite::kUser), "");
  EXPECT_STREQ(call_site_name(CallSite::kRegisteredMemory), "Group::allocate_registered");
  EXPECT_STREQ(call_site_name(CallSite{200}), "");  // nobody registered it
  register_call_site(kConstructor, "DistributedDataParallel's constructor");  // again: harmless
  EXPECT_THROW(register_call_site(kConstructor, "another name"), Error);
  EXPECT_THROW(register_call_site(CallSite::kGroupSetup, "mine"), Error);
}

TEST(CallStamp, AGarbledStampIsDescribedWithoutCrashing) {
  CallStamp garbled;
  garbled.kind = 200;
  EXPECT_EQ(describe_call(garbled), "an unknown call");
  EXPECT_EQ(describe_call(CallStamp{}), "an unknown call");
}

}  // namespace
}  // namespace cohort
