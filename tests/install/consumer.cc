// Built against an installed cohort: two in-process ranks allreduce and check the result.
#include <cohort/cohort.h>

#include <cstdio>
#include <thread>

int main() {
  auto fabric = std::make_shared<cohort::InprocFabric>(2);
  std::vector<float> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto group = cohort::Group::create_inproc(fabric, r);
      std::vector<float> data(10, static_cast<float>(r + 1));
      group->allreduce(cohort::make_buffer(data));
      results[r] = data[9];
    });
  }
  for (auto& t : ranks) t.join();
  std::printf("consumer: %g %g\n", results[0], results[1]);
  return results[0] == 3.0f && results[1] == 3.0f ? 0 : 1;
}
