// Checks and typed errors: what users see when they pass something wrong, and how errors
// travel between ranks (WireError).
#include <gtest/gtest.h>

#include <string>

#include "cohort/comm/transport.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "transport/wire_error.h"

namespace cohort {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void check_positive(int count) {
  COHORT_CHECK(count > 0, "count must be positive, got ", count);
}

// The message is the user's to read: no condition or source line of cohort's (issue 35).
TEST(CheckTest, CheckThrowsInvalidArgumentWithTheMessageAlone) {
  EXPECT_NO_THROW(check_positive(3));
  try {
    check_positive(-4);
    FAIL() << "COHORT_CHECK did not throw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what, "count must be positive, got -4");
  }
}

TEST(CheckTest, CheckEqNamesBothValuesAndTheUserMessage) {
  const int world = 4;
  const size_t received = 7;
  EXPECT_NO_THROW(COHORT_CHECK_EQ(world, 4, "unused"));
  try {
    COHORT_CHECK_EQ(received, size_t{12}, "rank ", 2, " sent the wrong count");
    FAIL() << "COHORT_CHECK_EQ did not throw";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what, "rank 2 sent the wrong count (7 vs 12)");
  }
}

TEST(CheckTest, CheckEqEvaluatesEachArgumentOnce) {
  int calls = 0;
  auto next = [&] { return ++calls; };
  COHORT_CHECK_EQ(next(), 1, "");
  EXPECT_EQ(calls, 1);
}

TEST(CheckTest, InternalAssertSaysItIsABug) {
  try {
    COHORT_INTERNAL_ASSERT(1 + 1 == 3, "arithmetic broke: ", 42);
    FAIL() << "COHORT_INTERNAL_ASSERT did not throw";
  } catch (const InvalidArgument&) {
    FAIL() << "an internal failure is not the caller's mistake";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "this is a bug")) << what;
    EXPECT_TRUE(contains(what, "arithmetic broke: 42")) << what;
    EXPECT_TRUE(contains(what, "1 + 1 == 3")) << what;
  }
}

TEST(ErrorTest, HierarchyAndFailedRank) {
  const PeerError peer(5, "rank 5 closed its connection");
  EXPECT_EQ(peer.failed_rank(), 5);
  EXPECT_STREQ(peer.what(), "rank 5 closed its connection");
  EXPECT_EQ(PeerError(-1, "unknown").failed_rank(), -1);
  const Error* as_base = &peer;
  EXPECT_NE(dynamic_cast<const PeerError*>(as_base), nullptr);
  EXPECT_THROW(throw TimeoutError("t"), Error);
  EXPECT_THROW(throw ConfigError("c"), Error);
  EXPECT_THROW(throw StoreError("s"), Error);
  EXPECT_THROW(throw ProtocolError("p"), Error);
  EXPECT_THROW(throw InvalidArgument("i"), std::runtime_error);
}

// ---- WireError

template <typename E>
std::exception_ptr make(const E& e) {
  return std::make_exception_ptr(e);
}

TEST(WireErrorTest, EachKindSurvivesTheTrip) {
  struct Case {
    std::exception_ptr error;
    WireError::Kind kind;
  };
  const Case cases[] = {{make(PeerError(3, "peer gone")), WireError::kPeer},
                        {make(TimeoutError("too slow")), WireError::kTimeout},
                        {make(ProtocolError("bad frame")), WireError::kProtocol},
                        {make(InvalidArgument("bad count")), WireError::kInvalid},
                        {make(StoreError("store gone")), WireError::kStore},
                        {make(ConfigError("bad knob")), WireError::kConfig},
                        {make(std::runtime_error("other")), WireError::kGeneric}};
  for (const auto& c : cases) {
    const WireError wire = WireError::from(c.error);
    EXPECT_EQ(wire.kind, c.kind);
    const std::exception_ptr back = wire.as_exception(1);
    try {
      std::rethrow_exception(back);
    } catch (const PeerError& e) {
      EXPECT_EQ(c.kind, WireError::kPeer);
      EXPECT_EQ(e.failed_rank(), 3);
      EXPECT_TRUE(contains(e.what(), "peer gone")) << e.what();
    } catch (const TimeoutError& e) {
      EXPECT_EQ(c.kind, WireError::kTimeout);
    } catch (const ProtocolError& e) {
      EXPECT_EQ(c.kind, WireError::kProtocol);
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(c.kind, WireError::kInvalid);
    } catch (const StoreError& e) {
      EXPECT_EQ(c.kind, WireError::kStore);
    } catch (const ConfigError& e) {
      EXPECT_EQ(c.kind, WireError::kConfig);
    } catch (const Error& e) {
      EXPECT_EQ(c.kind, WireError::kGeneric);
      EXPECT_TRUE(contains(e.what(), "other")) << e.what();
    }
  }
}

TEST(WireErrorTest, SaysWhichRankReportedItOnce) {
  const WireError first = WireError::from(make(PeerError(2, "rank 2 died")));
  EXPECT_EQ(first.failed_rank, 2);
  const std::exception_ptr on_rank1 = first.as_exception(1);
  std::string text;
  try {
    std::rethrow_exception(on_rank1);
  } catch (const PeerError& e) {
    text = e.what();
  }
  EXPECT_EQ(text, "rank 1 aborted the group: rank 2 died");
  // Rank 1's error forwarded again by rank 0: the prefix is not stacked a second time.
  const WireError second = WireError::from(on_rank1);
  EXPECT_EQ(second.kind, WireError::kPeer);
  EXPECT_EQ(second.failed_rank, 2);
  try {
    second.rethrow(0);
    FAIL() << "rethrow returned";
  } catch (const PeerError& e) {
    EXPECT_EQ(std::string(e.what()), text);
    EXPECT_EQ(e.failed_rank(), 2);
  }
}

TEST(WireErrorTest, UnknownExceptionBecomesGeneric) {
  const WireError wire = WireError::from(std::make_exception_ptr(17));
  EXPECT_EQ(wire.kind, WireError::kGeneric);
  EXPECT_EQ(wire.failed_rank, -1);
  EXPECT_THROW(wire.rethrow(4), Error);
}

}  // namespace
}  // namespace cohort

namespace cohort {
namespace {

TEST(DeadlineTest, HugeTimeoutsSaturateToNever) {
  const Deadline d = Deadline::after(Milliseconds::max());
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.at(), Clock::time_point::max());
  EXPECT_GT(d.remaining().count(), 0);
  EXPECT_TRUE(Deadline::after(Milliseconds(0)).expired());
}

}  // namespace
}  // namespace cohort
