#include "elastic/buddy_refresh.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "call_sites.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint/piece_install.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"
#include "elastic/buddy_copy.h"

namespace cohort::detail {
namespace {

constexpr int64_t kAlignment = 64;

int64_t aligned(int64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

int64_t bytes_of(int64_t elements, torch::ScalarType dtype) {
  return aligned(elements * static_cast<int64_t>(torch::elementSize(dtype)));
}

// What one direction carries: the header, and the tensors it describes, in buffer order.
struct Refresh {
  nlohmann::json header = nlohmann::json::array();
  std::vector<torch::Tensor> tensors;  // of `own`, flattened: values, then state fields
  int64_t bytes = 0;
};

Refresh describe_own(const HeldPieces& own, bool values_travel) {
  const OptimizerCodec* codec = codec_of(*own.optimizer);
  Refresh refresh;
  for (const auto& shard : own.holdings.shards) {
    nlohmann::json entry = {{"state", false}};
    if (values_travel) refresh.tensors.push_back(shard.tensor.detach().reshape({-1}));
    if (const auto* state = state_of(*own.optimizer, shard.tensor)) {
      const FlatState flat = codec->read_state(*state);
      entry["state"] = true;
      if (flat.has_step) entry["step"] = flat.step;
      nlohmann::json fields = nlohmann::json::array();
      for (const auto& [name, tensor] : flat.fields) {
        fields.push_back({name, static_cast<int>(tensor.scalar_type())});
        refresh.tensors.push_back(tensor.detach().reshape({-1}));
      }
      entry["fields"] = std::move(fields);
    }
    refresh.header.push_back(std::move(entry));
  }
  for (const auto& tensor : refresh.tensors) {
    refresh.bytes += bytes_of(tensor.numel(), tensor.scalar_type());
  }
  return refresh;
}

// A byte buffer of `bytes`: the start of `kept` where that is large enough.
torch::Tensor buffer_of(int64_t bytes, torch::Tensor& kept) {
  if (!kept.defined() || kept.numel() < bytes) kept = torch::empty({bytes}, torch::kUInt8);
  return kept.narrow(0, 0, bytes);
}

void pack(const Refresh& refresh, const torch::Tensor& buffer) {
  int64_t at = 0;
  for (const auto& tensor : refresh.tensors) {
    const int64_t length = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    buffer.narrow(0, at, length).view(tensor.scalar_type()).copy_(tensor);
    at += bytes_of(tensor.numel(), tensor.scalar_type());
  }
}

// The bytes `header` says follow, for `copy`'s tensors.
int64_t expected_bytes(const nlohmann::json& header, const RankHoldings& copy, bool values_travel) {
  COHORT_INTERNAL_ASSERT(header.size() == copy.shards.size(), "a buddy refresh of ", header.size(),
                         " tensors for a copy of ", copy.shards.size());
  int64_t bytes = 0;
  for (size_t i = 0; i < copy.shards.size(); ++i) {
    const auto& shard = copy.shards[i];
    if (values_travel) bytes += bytes_of(shard.length, shard.dtype);
    if (!header[i].at("state").get<bool>()) continue;
    for (const auto& field : header[i].at("fields")) {
      bytes += bytes_of(shard.length, static_cast<torch::ScalarType>(field.at(1).get<int>()));
    }
  }
  return bytes;
}

// The copy's state, and its values where they travel, become views of `buffer`; values that
// stay home are copied from `own`'s whole parameters.
void install(const nlohmann::json& header, const torch::Tensor& buffer, bool values_travel,
             const HeldPieces& own, HeldPieces& copy) {
  const OptimizerCodec* codec = codec_of(*copy.optimizer);
  int64_t at = 0;
  auto take = [&](int64_t elements, torch::ScalarType dtype, const torch::Tensor& like) {
    const int64_t length = elements * static_cast<int64_t>(torch::elementSize(dtype));
    // A view where the copy lives in host memory (the buffer's), a copy on its device elsewhere.
    torch::Tensor view =
        buffer.narrow(0, at, length).view(dtype).view(like.sizes()).to(like.device());
    at += bytes_of(elements, dtype);
    return view;
  };
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < copy.holdings.shards.size(); ++i) {
    auto& shard = copy.holdings.shards[i];
    if (values_travel) {
      shard.tensor.set_data(take(shard.length, shard.dtype, shard.tensor));
    } else {
      const torch::Tensor whole = own.holdings.shards[i].full_parameter.detach().reshape({-1});
      shard.tensor.detach().copy_(
          whole.narrow(0, shard.offset, shard.length).view(shard.tensor.sizes()));
    }
    const nlohmann::json& entry = header[i];
    if (!entry.at("state").get<bool>()) {
      set_state_of(*copy.optimizer, shard.tensor, nullptr);
      continue;
    }
    FlatState flat;
    flat.has_step = entry.contains("step");
    if (flat.has_step) flat.step = entry.at("step").get<int64_t>();
    for (const auto& field : entry.at("fields")) {
      const auto dtype = static_cast<torch::ScalarType>(field.at(1).get<int>());
      flat.fields.emplace_back(field.at(0).get<std::string>(),
                               take(shard.length, dtype, shard.tensor));
    }
    set_state_of(*copy.optimizer, shard.tensor, codec->make_state(flat));
  }
}

// The message of a refresh, one ring_shift: the header's length (int64), the header, then at
// kAlignment past the largest member's header the tensors' bytes. Every member's message is
// padded to the largest (a ring shift moves the same count everywhere).
struct MessageLayout {
  int64_t payload_offset = 0;
  int64_t bytes = 0;
};

MessageLayout agree_layout(Group& group, int64_t header_bytes, int64_t payload_bytes,
                           CallSite site) {
  int64_t largest[2] = {header_bytes, payload_bytes};
  CollectiveOptions options;
  options.site = site;
  options.op = ReduceOp::kMax;
  group.allreduce(Buffer{largest, 2, DType::kInt64}, options);
  MessageLayout layout;
  layout.payload_offset = aligned(static_cast<int64_t>(sizeof(int64_t)) + largest[0]);
  layout.bytes = layout.payload_offset + largest[1];
  return layout;
}

}  // namespace

void BuddyRefresher::refresh(Group& group, const HeldPieces& own, HeldPieces& copy, BuddyLog& log) {
  const CallSite site = call_sites::kElasticBuddy;
  const bool values_travel = !keeps_full_parameters(own.holdings);
  const Refresh refresh = describe_own(own, values_travel);
  const std::string header = refresh.header.dump();
  const MessageLayout layout =
      agree_layout(group, static_cast<int64_t>(header.size()), refresh.bytes, site);
  const torch::Tensor& outgoing = outgoing_buffer(group, layout.bytes);
  auto* out = outgoing.data_ptr<uint8_t>();
  const auto header_bytes = static_cast<int64_t>(header.size());
  std::memcpy(out, &header_bytes, sizeof header_bytes);
  std::memcpy(out + sizeof header_bytes, header.data(), header.size());
  pack(refresh, outgoing.narrow(0, layout.payload_offset, refresh.bytes));
  const torch::Tensor incoming = buffer_of(layout.bytes, spare_);
  CollectiveOptions options;
  options.site = site;
  group.ring_shift(outgoing_memory_->buffer(out, static_cast<size_t>(layout.bytes), DType::kUInt8),
                   tensor_buffer(incoming), options);
  // Nothing of the copy changed before the whole message was in.
  const auto* in = incoming.data_ptr<uint8_t>();
  int64_t received_header_bytes = 0;
  std::memcpy(&received_header_bytes, in, sizeof received_header_bytes);
  const nlohmann::json received = nlohmann::json::parse(
      std::string(reinterpret_cast<const char*>(in) + sizeof received_header_bytes,
                  static_cast<size_t>(received_header_bytes)));
  const int64_t payload = expected_bytes(received, copy.holdings, values_travel);
  COHORT_INTERNAL_ASSERT(layout.payload_offset + payload <= layout.bytes, "a buddy refresh of ",
                         payload, " bytes in a message of ", layout.bytes);
  install(received, incoming.narrow(0, layout.payload_offset, payload), values_travel, own, copy);
  log.clear();
  std::swap(spare_, installed_);  // spare_: the buffer the copy was a view of until now
}

// Registered memory of the group, so that a successor on this host reads it in place; it grows
// (collectively: every member sees the same agreed size) and is kept otherwise.
const torch::Tensor& BuddyRefresher::outgoing_buffer(Group& group, int64_t bytes) {
  if (outgoing_.defined() && outgoing_.numel() >= bytes) return outgoing_;
  outgoing_memory_ = group.allocate_registered(static_cast<size_t>(bytes));
  outgoing_ = torch::from_blob(outgoing_memory_->data(), {bytes}, torch::kUInt8);
  return outgoing_;
}

void BuddyRefresher::reset() {
  outgoing_ = installed_ = spare_ = torch::Tensor();
  outgoing_memory_.reset();
}

}  // namespace cohort::detail
