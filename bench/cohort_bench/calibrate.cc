#include "calibrate.h"

#include <cstdio>
#include <string>

#include "cohort/comm/calibration.h"
#include "cohort/core/error.h"

namespace cohort::bench {

void run_calibration(Group& group, const BenchConfig& config, bool report,
                     Watchdog::Slot& progress) {
  if (group.size() < 2) throw InvalidArgument("--calibrate needs at least 2 ranks");
  CalibrationProgress watch;
  watch.enter = [&](const char* what, size_t bytes) { progress.enter(what, bytes); };
  watch.tick = [&] { progress.tick(); };
  const Calibration c = calibrate(group, watch);
  if (!report) return;
  std::printf("# cost model measured over %d ranks\n", group.size());
  std::printf("#  tcp    alpha %8.2f us   beta %6.3f GB/s\n", c.tcp_alpha_s * 1e6,
              1e-9 / c.tcp_beta_s_per_byte);
  std::printf("#  shm    alpha %8.2f us   beta %6.3f GB/s%s\n", c.shm_alpha_s * 1e6,
              1e-9 / c.shm_beta_s_per_byte,
              c.shm_measured ? "" : "   (defaults: the ranks share no memory window)");
  std::printf("#  reduce                   gamma %6.3f GB/s\n", 1e-9 / c.gamma_s_per_byte);
  std::printf("%s", c.choice_table().c_str());
  const std::string path =
      config.calibrate_path.empty() ? cost_model_path() : config.calibrate_path;
  write_calibration(c, path);
  std::printf("# written to %s (groups read it when made; COHORT_COST_MODEL names another)\n",
              path.c_str());
  std::fflush(stdout);
}

}  // namespace cohort::bench
