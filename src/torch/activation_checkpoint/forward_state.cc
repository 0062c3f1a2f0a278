// The generator and autocast snapshots of a checkpointed region (forward_state.h).

#include "activation_checkpoint/forward_state.h"

#include <ATen/Context.h>

#include <algorithm>
#include <mutex>

#include "amp/autocast_compat.h"

namespace cohort::activation_checkpoint {

namespace {

at::Tensor state_of(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

}  // namespace

RngSnapshot RngSnapshot::take(bool defaults, const std::vector<at::Tensor>& inputs,
                              const std::vector<at::Generator>& extra) {
  RngSnapshot snapshot;
  for (at::Generator generator : extra) snapshot.saved_.push_back({generator, state_of(generator)});
  if (!defaults) return snapshot;
  std::vector<c10::DeviceIndex> cuda_devices;
  for (const auto& input : inputs) {
    if (!input.defined() || !input.is_cuda()) continue;
    const c10::DeviceIndex index = input.device().index();
    if (std::find(cuda_devices.begin(), cuda_devices.end(), index) == cuda_devices.end())
      cuda_devices.push_back(index);
  }
  at::Generator cpu = at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CPU));
  snapshot.saved_.push_back({cpu, state_of(cpu)});
  for (c10::DeviceIndex index : cuda_devices) {
    at::Generator cuda =
        at::globalContext().defaultGenerator(c10::Device(c10::DeviceType::CUDA, index));
    snapshot.saved_.push_back({cuda, state_of(cuda)});
  }
  return snapshot;
}

void RngSnapshot::restore() const {
  for (const Saved& s : saved_) {
    at::Generator generator = s.generator;
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(s.state);
  }
}

RngSnapshot RngSnapshot::current() const {
  RngSnapshot now;
  for (const Saved& s : saved_) {
    at::Generator generator = s.generator;
    now.saved_.push_back({generator, state_of(generator)});
  }
  return now;
}

AutocastSnapshot AutocastSnapshot::take() {
  using namespace amp::compat;
  return {is_enabled(c10::DeviceType::CPU), get_dtype(c10::DeviceType::CPU),
          is_enabled(c10::DeviceType::CUDA), get_dtype(c10::DeviceType::CUDA)};
}

namespace {
void apply(const AutocastSnapshot& s) {
  using namespace amp::compat;
  set_enabled(c10::DeviceType::CPU, s.cpu_enabled);
  set_dtype(c10::DeviceType::CPU, s.cpu_dtype);
  set_enabled(c10::DeviceType::CUDA, s.cuda_enabled);
  set_dtype(c10::DeviceType::CUDA, s.cuda_dtype);
}
}  // namespace

AutocastRestore::AutocastRestore(const AutocastSnapshot& snapshot)
    : previous_(AutocastSnapshot::take()) {
  apply(snapshot);
  amp::compat::enter();
}

AutocastRestore::~AutocastRestore() {
  amp::compat::leave();
  apply(previous_);
}

}  // namespace cohort::activation_checkpoint
