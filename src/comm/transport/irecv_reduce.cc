// The portable form of Transport::irecv_reduce: receive into a temporary buffer, combine in
// wait(). Transports that can combine while bytes arrive override it.
#include <vector>

#include "cohort/comm/transport.h"
#include "kernels/reduce_kernels.h"

namespace cohort {

namespace {
class BufferedReduceRequest final : public Request {
 public:
  BufferedReduceRequest(void* accumulate, size_t count, DType dtype, ReduceOp op)
      : accumulate_(accumulate), count_(count), dtype_(dtype), op_(op),
        landing_(count * dtype_size(dtype)) {}

  void start(Transport& transport, int peer, Tag tag, Deadline deadline) {
    request_ = transport.irecv(peer, tag, landing_.data(), landing_.size(), deadline);
  }
  void wait() override {
    request_->wait();
    kernels::reduce_into(accumulate_, landing_.data(), count_, dtype_, kernels::combine_op(op_));
  }

 private:
  void* accumulate_;
  size_t count_;
  DType dtype_;
  ReduceOp op_;
  std::vector<uint8_t> landing_;
  std::unique_ptr<Request> request_;
};
}  // namespace

std::unique_ptr<Request> Transport::irecv_reduce(int peer, Tag tag, void* accumulate, size_t count,
                                                 DType dtype, ReduceOp op, Deadline deadline) {
  auto request = std::make_unique<BufferedReduceRequest>(accumulate, count, dtype, op);
  request->start(*this, peer, tag, deadline);
  return request;
}

}  // namespace cohort
