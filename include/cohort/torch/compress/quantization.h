// Quantizing gradient-compression hooks: every gradient is sent, in a few bits, with one
// float32 scale per bucket and rank. QSGD and TernGrad round stochastically and are unbiased;
// the sign hook is biased and relies on error feedback (Note [Error feedback],
// compression_hook.h). docs/compression.md.
//
//   ddp_options.comm_hook = cohort::sign_hook();
//
// Every rank of a group needs its own hook object (residuals and random streams are its own).
// Each rank's payload of p bytes travels in one allgather, which sends (W - 1) p per rank where
// a ring allreduce of the bucket's n float32 sends 8n (W - 1) / W: they pay while p < 8n / W.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/compress/compression_hook.h"

namespace cohort {

struct QsgdOptions {
  int levels = 16;  // s, in 1..127: |g| / ||g|| is rounded to a multiple of 1 / s
  uint64_t seed = 0;
  bool error_feedback = false;
};

// Sends ||c||_2 as float32 and each element as a signed int8 level: 4 + n bytes per rank.
// Unbiased (stochastic rounding), variance <= ||c||^2 / (4 s^2) per element. Pays at W < 8
// where bandwidth bounds the step; more levels (up to 127) cost no bytes and lower the variance.
class QsgdHook : public CompressionHook {
 public:
  // Throws InvalidArgument naming the hook for levels outside 1..127.
  explicit QsgdHook(QsgdOptions options = {});
  PendingReduction start(Group& group, GradBucket& bucket) override;
  std::string name() const override { return "qsgd"; }
  const QsgdOptions& options() const { return options_; }

 private:
  QsgdOptions options_;
};
std::shared_ptr<QsgdHook> qsgd_hook(QsgdOptions options = {});

struct TernGradOptions {
  uint64_t seed = 0;
  bool error_feedback = false;
};

// Sends max|c| as float32 and each element as -1, 0 or +1 in 2 bits: 4 + ceil(n / 4) bytes per
// rank. Unbiased, with variance up to max|c|^2 / 4 per element: pays at W < 32 when gradients
// are of similar size (a few large ones make every other element noisy).
class TernGradHook : public CompressionHook {
 public:
  explicit TernGradHook(TernGradOptions options = {});
  PendingReduction start(Group& group, GradBucket& bucket) override;
  std::string name() const override { return "terngrad"; }
  const TernGradOptions& options() const { return options_; }

 private:
  TernGradOptions options_;
};
std::shared_ptr<TernGradHook> terngrad_hook(TernGradOptions options = {});

struct SignOptions {
  bool error_feedback = true;
};

// EF-SignSGD: sends mean|c| as float32 and one sign bit per element (0 counts as +):
// 4 + ceil(n / 8) bytes per rank, the fewest here. Biased: pays at W < 64 with error feedback
// (on by default), without which it can fail to converge (Karimireddy et al., 2019).
class SignHook : public CompressionHook {
 public:
  explicit SignHook(SignOptions options = {});
  PendingReduction start(Group& group, GradBucket& bucket) override;
  std::string name() const override { return "sign"; }
  const SignOptions& options() const { return options_; }

 private:
  SignOptions options_;
};
std::shared_ptr<SignHook> sign_hook(SignOptions options = {});

}  // namespace cohort
