// NativeBackend (Note [Backends]): it runs what its table has and refuses the rest by name,
// instead of running another algorithm than the one chosen.
#include "backends/native_backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "choice/algorithm_choice.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/core/error.h"

namespace cohort {
namespace {

std::string error_of(const CollectiveCall& call, Algorithm algorithm) {
  auto fabric = std::make_shared<InprocFabric>(1);
  InprocTransport transport(fabric, 0);
  std::vector<uint8_t> scratch;
  algo::Context ctx(transport, 0, Deadline::after(Milliseconds(5000)), scratch);
  try {
    NativeBackend().run(call, Plan{algorithm}, ctx);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

CollectiveCall allgather_of(std::vector<float>& in, std::vector<float>& out) {
  CollectiveCall call;
  call.kind = CollectiveKind::kAllgather;
  call.in = in.data();
  call.out = out.data();
  call.count = in.size();
  call.dtype = DType::kFloat32;
  return call;
}

TEST(NativeBackend, RunsTheChosenAlgorithm) {
  std::vector<float> in{1, 2, 3}, out(3);
  EXPECT_EQ(error_of(allgather_of(in, out), Algorithm::kRing), "");
  EXPECT_EQ(out, in);
}

TEST(NativeBackend, RefusesAnAlgorithmTheCollectiveLacksByName) {
  std::vector<float> in{1, 2, 3}, out(3);
  const std::string error = error_of(allgather_of(in, out), Algorithm::kTree);
  EXPECT_NE(error.find("allgather(count=3, dtype=float32"), std::string::npos) << error;
  EXPECT_NE(error.find("cohort has no tree algorithm for it (it has: "), std::string::npos)
      << error;
  EXPECT_EQ(out, std::vector<float>(3, 0.0f)) << "nothing ran";
  EXPECT_NE(error_of(allgather_of(in, out), Algorithm::kAuto), "");
  EXPECT_NE(error_of(allgather_of(in, out), Algorithm::kEngine), "");
}

TEST(NativeBackend, RefusesDeviceBuffers) {
  std::vector<float> in{1, 2, 3}, out(3);
  CollectiveCall call = allgather_of(in, out);
  call.device = 0;
  EXPECT_NE(error_of(call, Algorithm::kRing).find("host memory only"), std::string::npos);
}

// The automatic choice asks the same table, so it never picks what the backend lacks.
TEST(NativeBackend, TheChoiceNeverPicksWhatTheTableLacks) {
  const CostModel model = CostModel::defaults();
  for (int world : {2, 3, 8}) {
    for (int shm = 0; shm < 4; ++shm) {
      GroupShape shape;
      shape.world = world;
      shape.nodes = shm < 2 ? 1 : 2;
      shape.local_size = world / shape.nodes;
      shape.shared_memory = shm % 2 != 0;
      for (int k = 0; k <= static_cast<int>(CollectiveKind::kBarrier); ++k) {
        const auto kind = static_cast<CollectiveKind>(k);
        for (int a = 0; a <= static_cast<int>(Algorithm::kEngine); ++a) {
          for (size_t bytes : {size_t{0}, size_t{100}, size_t{1} << 22}) {
            const Algorithm chosen =
                choose_algorithm(kind, static_cast<Algorithm>(a), bytes, shape, model);
            EXPECT_TRUE(NativeBackend::has(kind, chosen))
                << collective_name(kind) << " asked " << algorithm_name(static_cast<Algorithm>(a))
                << " got " << algorithm_name(chosen);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cohort
