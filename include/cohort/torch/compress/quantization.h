// Quantizing gradient-compression hooks: every gradient is sent, in a few bits, with one
// float32 scale per bucket and rank. QSGD and TernGrad round stochastically and are unbiased;
// the sign hook is biased and relies on error feedback (Note [Error feedback],
// compression_hook.h). docs/compression.md.
//
//   ddp_options.comm_hook = cohort::sign_hook();
//
// Every rank of a group needs its own hook object (residuals and random streams are its own).
// Each rank's payload travels in one allgather: every rank receives W payloads, so these pay
// while W times the payload stays below the 4n bytes of a bucket's allreduce.
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

// Sends ||c||_2 as float32 and each element as a signed level in int8: 4 + n bytes per rank, a
// quarter of float32. Unbiased (stochastic rounding between neighbouring levels, random numbers
// differing per rank), with per-element variance at most ||c||^2 / (4 s^2). Pays at W < 4 or
// so; more levels cost nothing on the wire (up to 127) and lower the variance.
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
// rank, a sixteenth of float32. Unbiased (c_i's sign with probability |c_i| / max|c|), but the
// variance grows with max|c|: buckets with a few large gradients pay for it in steps.
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
// 4 + ceil(n / 8) bytes per rank, a thirty-second of float32, the fewest here. Biased: without
// error feedback it can fail to converge (Karimireddy et al., 2019); with it, it pays wherever
// bandwidth bounds the step and W stays below about 32.
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
