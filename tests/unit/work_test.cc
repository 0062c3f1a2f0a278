// Work handles: errors from the worker thread come back from wait(); wait(timeout) does not
// block past its timeout.
#include "cohort/comm/work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "cohort/core/error.h"
#include "support/sync.h"

namespace cohort {
namespace {

TEST(WorkTest, CompletesWithoutError) {
  Work work("allreduce #1 (4 x float32, sum)");
  EXPECT_FALSE(work.is_completed());
  EXPECT_EQ(work.description(), "allreduce #1 (4 x float32, sum)");
  work.mark_done();
  EXPECT_TRUE(work.is_completed());
  EXPECT_NO_THROW(work.wait());
  EXPECT_NO_THROW(work.wait(Milliseconds(0)));
}

TEST(WorkTest, WaitRethrowsTheStoredExceptionWithItsType) {
  Work work("broadcast #3");
  work.mark_done(std::make_exception_ptr(PeerError(2, "rank 2 closed its connection")));
  EXPECT_TRUE(work.is_completed());
  for (int attempt = 0; attempt < 2; ++attempt) {  // every wait sees it, not just the first
    try {
      work.wait();
      FAIL() << "wait returned";
    } catch (const PeerError& e) {
      EXPECT_EQ(e.failed_rank(), 2);
      EXPECT_STREQ(e.what(), "rank 2 closed its connection");
    }
  }
  EXPECT_THROW(work.wait(Milliseconds(10)), PeerError);
}

TEST(WorkTest, WaitWithTimeoutThrowsTimeoutErrorWhileRunning) {
  Work work("allgather #7");
  const auto start = std::chrono::steady_clock::now();
  try {
    work.wait(Milliseconds(30));
    FAIL() << "wait returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("allgather #7"), std::string::npos) << e.what();
  }
  // The contract, not a speed: a wait(timeout) never gives up before its timeout.
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
  EXPECT_FALSE(work.is_completed());
}

TEST(WorkTest, WaitReturnsWhenAnotherThreadFinishes) {
  Work work("reduce #2");
  // Its own 60 s timeout is far from the 10 s this test waits: only mark_done ends it in time.
  testing::BackgroundCall<void> waiter([&] { work.wait(Milliseconds(60'000)); });
  ASSERT_TRUE(waiter.wait_until_blocked(std::chrono::seconds(10)));
  ASSERT_NE(waiter.result().wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "wait returned before the work was done";
  work.mark_done(std::make_exception_ptr(PeerError(1, "rank 1 closed its connection")));
  ASSERT_EQ(waiter.result().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_THROW(waiter.result().get(), PeerError);
  EXPECT_TRUE(work.is_completed());
}

}  // namespace
}  // namespace cohort
