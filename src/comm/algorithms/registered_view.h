// Every local rank's copy of a registered buffer (Note [Registered buffers] in
// transport/shm/shm_registry.h), for the shared-memory collectives that work in place:
// allreduce_registered.cc, reduce_scatter_registered.cc, allgather_registered.cc,
// broadcast_registered.cc and the hierarchical allreduce's phases inside a node.
//
// Such a collective is two window rounds around plain loads and stores:
//   ready: each rank posts where its buffer is (region, offset) once its data is in it; after
//          the wait every rank's buffer is ready and at buffer(r);
//   ...    ranks read and write the peers' buffers directly, each touching parts that no
//          other rank touches in the meantime (every algorithm's comment says which);
//   done:  each rank posts that it is done with the others' buffers; after the wait nobody
//          touches this rank's buffer again, so the caller may.
// No byte goes through the window's slots.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/context.h"

namespace cohort {
class ShmRegion;
}

namespace cohort::algo {

class RegisteredView {
 public:
  // [data, data + bytes) in place where it lies in the call's registered memory
  // (ctx.registered(), shared on the node: Buffer::registered), else not registered
  // (ctx.shm() must be set).
  RegisteredView(Context& ctx, const void* data, size_t bytes);
  ~RegisteredView();

  // Whether the buffer is registered (every local rank must then pass a buffer of the same
  // region: the ready round checks it).
  bool registered() const { return region_ != nullptr; }
  void post_ready(const char* what);
  void post_done(const char* what);
  // Local rank r's buffer, after post_ready.
  uint8_t* buffer(int r) const { return buffers_[static_cast<size_t>(r)]; }
  int rank() const;
  int size() const;

 private:
  Context& ctx_;
  std::shared_ptr<const ShmRegion> region_;
  uint64_t offset_ = 0;
  size_t bytes_ = 0;
  std::vector<uint8_t*> buffers_;
};

// dst[i] = op over sources[0..n)[i], combined in rank order so that every rank that reduces
// the same elements computes the same bits. dst may be sources[0] or sources[1] or memory of
// its own; any other aliasing goes through `scratch` (a block at a time).
void reduce_in_rank_order(const std::vector<const uint8_t*>& sources, uint8_t* dst, size_t count,
                          DType dtype, ReduceOp op, Context& ctx);

// Elements per block of the in-place loops: a block's result is still in L1 when it is
// copied out to the peers.
size_t registered_block_elems(DType dtype);

}  // namespace cohort::algo
