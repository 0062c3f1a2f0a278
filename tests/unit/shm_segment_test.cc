// Shared-memory segments and windows refuse what is not theirs with a ConfigError that says
// what went wrong (transport/shm/).
#include "transport/shm/shm_segment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "cohort/comm/memory_store.h"
#include "cohort/core/error.h"
#include "transport/shm/shm_window.h"

namespace cohort {
namespace {

std::string unique_name(const char* what) {
  return std::string("/cohort-test-") + what + "-" + std::to_string(::getpid());
}

TEST(ShmSegment, ANameInUseOrMissingIsAConfigError) {
  const std::string name = unique_name("taken");
  ShmSegment first = ShmSegment::create(name, 4096);
  EXPECT_THROW(ShmSegment::create(name, 4096), ConfigError);
  EXPECT_THROW(ShmSegment::open(name, 1 << 20), ConfigError);  // smaller than expected
  first.unlink();
  EXPECT_THROW(ShmSegment::open(name, 4096), ConfigError);  // gone
}

TEST(ShmWindow, ASegmentOfAnotherJobIsRefused) {
  const std::string name = unique_name("foreign");
  ShmSegment foreign = ShmSegment::create(name, 8 << 20);  // zero-filled: no magic, no nonce
  MemoryStore store;
  store.set("shm/pid", std::to_string(::getpid()));
  store.set("shm/name", name);
  store.set("shm/nonce", std::string("12345"));
  try {
    ShmWindow::create(store, 1, 2, {0, 1}, {}, "token", 4096,
                      Deadline::after(std::chrono::seconds(5)));
    ADD_FAILURE() << "a foreign segment was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to another job"), std::string::npos) << e.what();
  }
  foreign.unlink();
}

}  // namespace
}  // namespace cohort
