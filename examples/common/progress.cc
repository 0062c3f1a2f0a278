#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace cohort_examples {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBarWidth = 30;
constexpr auto kRedrawEvery = std::chrono::milliseconds(200);

std::string clock_time(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, seconds));
  char text[32];
  std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  return text;
}

}  // namespace

Progress::Progress(bool enabled, int64_t line_every)
    : enabled_(enabled), terminal_(::isatty(STDOUT_FILENO) == 1), line_every_(line_every) {}

void Progress::start_epoch(int64_t epoch, int64_t epochs, int64_t steps_in_epoch) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps_in_epoch;
  samples_ = 0;
  loss_sum_ = 0;
  loss_count_ = 0;
  started_ = last_draw_ = Clock::now();
}

void Progress::update(int64_t step, int64_t samples, double loss) {
  if (!enabled_) return;
  samples_ += samples;
  loss_sum_ += loss;
  ++loss_count_;
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  const double rate = elapsed > 0 ? double(samples_) / elapsed : 0;
  const double eta = step > 0 ? elapsed / double(step) * double(steps_ - step) : 0;
  const double mean_loss = loss_sum_ / double(loss_count_);
  if (terminal_) {
    if (now - last_draw_ < kRedrawEvery && step != steps_) return;
    last_draw_ = now;
    draw_bar(step, rate, mean_loss, eta);
  } else if (step % line_every_ == 0 || step == steps_) {
    print_line(step, rate, mean_loss, eta);
    loss_sum_ = 0;
    loss_count_ = 0;
  }
}

void Progress::finish_epoch() {
  if (enabled_ && terminal_) std::printf("\n");
  std::fflush(stdout);
}

void Progress::draw_bar(int64_t step, double rate, double loss, double eta_s) {
  const int filled = steps_ > 0 ? int(kBarWidth * step / steps_) : kBarWidth;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBarWidth)
    bar += '>' + std::string(static_cast<size_t>(kBarWidth - filled - 1), ' ');
  std::printf("\repoch %lld/%lld [%s] %3d%% %lld/%lld  %.0f samples/s  loss %.4f  ETA %s   ",
              (long long)epoch_, (long long)epochs_, bar.c_str(),
              steps_ > 0 ? int(100 * step / steps_) : 100, (long long)step, (long long)steps_, rate,
              loss, clock_time(eta_s).c_str());
  std::fflush(stdout);
}

void Progress::print_line(int64_t step, double rate, double loss, double eta_s) {
  std::printf("epoch %lld/%lld step %lld/%lld  %.0f samples/s  loss %.4f  ETA %s\n",
              (long long)epoch_, (long long)epochs_, (long long)step, (long long)steps_, rate, loss,
              clock_time(eta_s).c_str());
  std::fflush(stdout);
}

}  // namespace cohort_examples
