#include "checkpoint/checkpoint_collectives.h"

#include <optional>
#include <utility>

#include "checkpoint/checkpoint_file.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

// Tells these messages apart from a program's own point-to-point ones ("ckpt").
constexpr uint32_t kOutcomeTag = 0x636b7074;

CollectiveOptions options_of(CallSite site, int root = 0) {
  CollectiveOptions options;
  options.site = site;
  options.root = root;
  options.tag = kOutcomeTag;
  return options;
}

Buffer bytes_buffer(std::string& bytes) {
  return make_buffer(reinterpret_cast<uint8_t*>(&bytes[0]), bytes.size());
}

}  // namespace

void read_file_outcome(const std::string& path, int64_t& status, std::string& bytes) {
  try {
    std::optional<std::string> payload = read_checkpoint_file(path);
    status = payload ? kStatusOk : kStatusMissing;
    if (payload) bytes = std::move(*payload);
  } catch (const std::exception& error) {
    status = kStatusFailed;
    bytes = error.what();
  }
}

void broadcast_outcome(Group& group, int64_t& status, std::string& bytes, int root, CallSite site) {
  const CollectiveOptions options = options_of(site, root);
  std::vector<int64_t> header = {status, static_cast<int64_t>(bytes.size())};
  group.broadcast(make_buffer(header), options);
  status = header[0];
  bytes.resize(static_cast<size_t>(header[1]));
  if (!bytes.empty()) group.broadcast(bytes_buffer(bytes), options);
}

void send_outcome(Group& group, int peer, int64_t status, const std::string& bytes, CallSite site) {
  const CollectiveOptions options = options_of(site);
  std::vector<int64_t> header = {status, static_cast<int64_t>(bytes.size())};
  group.send(make_buffer(header), peer, options);
  if (!bytes.empty()) {
    group.send(ConstBuffer{bytes.data(), bytes.size(), DType::kUInt8}, peer, options);
  }
}

void recv_outcome(Group& group, int peer, int64_t& status, std::string& bytes, CallSite site) {
  const CollectiveOptions options = options_of(site);
  std::vector<int64_t> header(2);
  group.recv(make_buffer(header), peer, options);
  status = header[0];
  bytes.assign(static_cast<size_t>(header[1]), '\0');
  if (!bytes.empty()) group.recv(bytes_buffer(bytes), peer, options);
}

JobCheck broadcast_job_check(Group& group, const JobCheck& mine, CallSite site) {
  int64_t any_job = mine.any_job ? 1 : 0;
  std::string job_id = mine.job_id;
  broadcast_outcome(group, any_job, job_id, /*root=*/0, site);
  return {job_id, any_job != 0};
}

std::vector<torch::Tensor> gather_generator_states(const std::string& path, Group& group,
                                                   CallSite site) {
  const CollectiveOptions options = options_of(site);
  const torch::Tensor mine = cpu_generator_state().contiguous();
  int64_t my_size = mine.numel();
  std::vector<int64_t> sizes(static_cast<size_t>(group.size()));
  group.allgather(make_buffer(&my_size, 1), make_buffer(sizes), options);
  // Every rank sees the same sizes, so either every rank throws here or none does.
  for (int64_t size : sizes) {
    if (size == sizes[0]) continue;
    throw CheckpointError(concat(
        "cannot write checkpoint '", path, "': the ranks' random generator states differ in size (",
        sizes[0], " and ", size, " bytes), so they run different libtorch builds; run every rank ",
        "with the same build, or set TrainingState::rng = false"));
  }
  torch::Tensor all = torch::empty({group.size(), my_size}, torch::kUInt8);
  group.allgather(tensor_buffer(mine), tensor_buffer(all), options);
  std::vector<torch::Tensor> states;
  // Cloned: an archive stores a view's whole storage, which would be every rank's state again.
  for (int r = 0; r < group.size(); ++r) states.push_back(all[r].clone());
  return states;
}

std::exception_ptr first_failure_on_any_rank(Group& group, std::exception_ptr error,
                                             CallSite site) {
  enum Kind : int64_t { kNone = 0, kInvalidArgument = 1, kOther = 2 };
  int64_t kind = kNone;
  std::string message;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const InvalidArgument& e) {
      kind = kInvalidArgument;
      message = e.what();
    } catch (const std::exception& e) {
      kind = kOther;
      message = e.what();
    }
  }
  std::vector<int64_t> kinds(static_cast<size_t>(group.size()));
  group.allgather(make_buffer(&kind, 1), make_buffer(kinds), options_of(site));
  for (int r = 0; r < group.size(); ++r) {
    if (kinds[static_cast<size_t>(r)] == kNone) continue;
    int64_t status = kinds[static_cast<size_t>(r)];
    broadcast_outcome(group, status, message, /*root=*/r, site);
    if (status == kInvalidArgument) return std::make_exception_ptr(InvalidArgument(message));
    return std::make_exception_ptr(CheckpointError(message));
  }
  return nullptr;
}

void rethrow_on_every_rank(Group& group, std::exception_ptr error, CallSite site) {
  if (auto failure = first_failure_on_any_rank(group, std::move(error), site)) {
    std::rethrow_exception(failure);
  }
}

}  // namespace cohort::detail
