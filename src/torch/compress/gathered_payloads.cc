#include "compress/gathered_payloads.h"

#include "call_sites.h"
#include "cohort/torch/tensor_buffer.h"
#include "compress/bit_packing.h"

namespace cohort {

PendingReduction allgather_payloads(Group& group, GradBucket& bucket, torch::Tensor payload,
                                    AccumulatePayload accumulate) {
  payload = payload.contiguous();
  const int64_t length = payload.numel();
  auto gathered = torch::empty({group.size(), length}, payload.options());
  CollectiveOptions options;
  options.site = call_sites::kDdpGradients;
  options.stream = current_stream(bucket.buffer);
  auto work = group.allgather_async(tensor_buffer(payload), tensor_buffer(gathered), options);
  const int world = group.size();
  auto target = bucket.buffer;
  auto finish = [payload, gathered, target, world, accumulate = std::move(accumulate)]() {
    auto sum = torch::zeros({target.numel()}, target.options().dtype(torch::kFloat32));
    for (int r = 0; r < world; ++r) accumulate(gathered[r], sum);
    target.copy_(sum.div_(world));
  };
  return {std::move(work), std::move(finish), payload, static_cast<size_t>(length)};
}

torch::Tensor as_bytes(const torch::Tensor& tensor) {
  auto flat = tensor.contiguous().view({-1});
  return flat.view(torch::kUInt8);
}

torch::Tensor bytes_as(const torch::Tensor& bytes, torch::ScalarType type) {
  return bytes.contiguous().view(type);
}

torch::Tensor float_at(const torch::Tensor& bytes, int64_t offset) {
  return bytes.narrow(0, offset, sizeof(float)).clone().view(torch::kFloat32);
}

PendingReduction allgather_scaled_codes(Group& group, GradBucket& bucket,
                                        const torch::Tensor& scale, const torch::Tensor& codes,
                                        int bits, DecodeScaled decode) {
  const int64_t n = codes.numel();
  auto payload = torch::cat({as_bytes(scale), pack_codes(codes, bits)});
  return allgather_payloads(group, bucket, payload,
                            [n, bits, decode](const torch::Tensor& theirs, torch::Tensor& sum) {
                              auto packed = theirs.narrow(0, 4, theirs.numel() - 4);
                              sum.add_(decode(unpack_codes(packed, n, bits), float_at(theirs, 0)));
                            });
}

}  // namespace cohort
