// Device buffers (Buffer::device >= 0) on groups of cohort's own algorithms: every collective
// refuses them on the caller's thread with InvalidArgument that points to an NCCL group, and the
// group stays usable (nothing was queued). No GPU is needed: the pointers are never touched.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

// A stand-in for device memory: never dereferenced, because the group must refuse it first.
float g_fake_device_memory[8];

Buffer on_device(size_t count, int device = 0) {
  return Buffer{g_fake_device_memory, count, DType::kFloat32, device};
}

void expect_refused(const std::function<void()>& call, const std::string& what) {
  try {
    call();
    ADD_FAILURE() << what << " accepted a device buffer";
  } catch (const InvalidArgument& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("CUDA device"), std::string::npos) << what << ": " << text;
    EXPECT_NE(text.find("NCCL group"), std::string::npos) << what << ": " << text;
  }
}

TEST(DeviceBuffer, BraceInitialisedBuffersAreHostMemory) {
  std::vector<float> v(3);
  const Buffer b{v.data(), v.size(), DType::kFloat32};
  EXPECT_EQ(b.device, kHostMemory);
  EXPECT_FALSE(b.on_device());
  const ConstBuffer c = b;
  EXPECT_EQ(c.device, kHostMemory);
  EXPECT_EQ(ConstBuffer(on_device(1, 3)).device, 3);
  EXPECT_EQ(make_buffer(v).device, kHostMemory);
}

TEST(DeviceBuffer, NativeGroupsRefuseDeviceBuffersAndStayUsable) {
  auto groups = make_inproc_groups(2, testing::quick_options());
  run_ranks(2, [&](int rank) {
    Group& group = *groups[rank];
    std::vector<float> host(8, 1.0f);
    const Buffer h{host.data(), 2, DType::kFloat32};
    expect_refused([&] { group.allreduce(on_device(4)); }, "allreduce");
    expect_refused([&] { group.allreduce_async(on_device(4)); }, "allreduce_async");
    expect_refused([&] { group.broadcast(on_device(4)); }, "broadcast");
    expect_refused([&] { group.reduce(on_device(4)); }, "reduce");
    expect_refused([&] { group.allgather(on_device(2), on_device(4)); }, "allgather");
    expect_refused([&] { group.reduce_scatter(on_device(4), on_device(2)); }, "reduce_scatter");
    expect_refused([&] { group.gather(on_device(2), on_device(4)); }, "gather");
    expect_refused([&] { group.scatter(on_device(4), on_device(2)); }, "scatter");
    expect_refused(
        [&] {
          group.all_to_all(on_device(4), Buffer{host.data(), 4, DType::kFloat32, 0});
        },
        "all_to_all");
    expect_refused([&] { group.send(on_device(2), 1 - rank); }, "send");
    expect_refused([&] { group.recv(on_device(2), 1 - rank); }, "recv");
    // Mixed host and device buffers are a mistake of their own.
    EXPECT_THROW(group.allreduce(ConstBuffer(h), on_device(2)), InvalidArgument);
    // Nothing was queued: the group still reduces host memory.
    group.allreduce(make_buffer(host));
    EXPECT_EQ(host[0], 2.0f);
  });
}

}  // namespace
}  // namespace cohort
