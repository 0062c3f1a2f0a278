// The contract of cohort::Store (include/cohort/comm/store.h) as a value-parameterized suite:
// every store implementation runs the same tests. The TEST_P bodies live in store_test.cc; any
// test file can add an implementation with one line:
//
//   INSTANTIATE_TEST_SUITE_P(Tcp, StoreSemantics,
//                            ::testing::Values(StoreFactory{"tcp", [] { return make_tcp(); }}),
//                            StoreFactory::name_of);
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "cohort/comm/store.h"

namespace cohort::testing {

struct StoreFactory {
  std::string name;  // [A-Za-z0-9_] only: it becomes part of the test name
  std::function<std::shared_ptr<Store>()> make;

  static std::string name_of(const ::testing::TestParamInfo<StoreFactory>& info) {
    return info.param.name;
  }
};

class StoreSemantics : public ::testing::TestWithParam<StoreFactory> {
 protected:
  // Timeouts: kShort for calls that must time out (keeps the suite fast), kLong for calls that
  // must succeed (so that a broken store fails the test instead of hanging it).
  static constexpr Milliseconds kShort{50};
  static constexpr Milliseconds kLong{10'000};

  void SetUp() override {
    store_ = GetParam().make();
    ASSERT_NE(store_, nullptr);
  }

  Store& store() { return *store_; }
  std::shared_ptr<Store> store_;
};

}  // namespace cohort::testing
