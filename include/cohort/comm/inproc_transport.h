// In-process transport: ranks are threads of one process sharing an InprocFabric. Used for fast
// tests (tests/inproc) and for single-process multi-rank experiments.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/transport.h"

namespace cohort {

struct WireError;  // src/comm/transport/wire_error.h

// The shared medium of `size` in-process ranks: their mailboxes, a store they all see, and the
// fabrics of subgroups split from them.
class InprocFabric {
 public:
  explicit InprocFabric(int size);

  int size() const { return size_; }
  const std::shared_ptr<MemoryStore>& store() const { return store_; }
  // The fabric of a subgroup: the same object for every caller using the same key.
  std::shared_ptr<InprocFabric> child(const std::string& key, int size);

 private:
  friend class InprocTransport;
  struct Posted;
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable arrived;
    std::map<std::pair<int, Tag>, std::deque<std::vector<uint8_t>>> unexpected;
    std::map<std::pair<int, Tag>, std::deque<std::shared_ptr<Posted>>> posted;
  };

  void abort(int reporting_rank, std::exception_ptr error);
  // The error a rank sees after an abort, or nullptr.
  std::exception_ptr failure_for(int rank);

  const int size_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
  std::shared_ptr<MemoryStore> store_;

  std::mutex mutex_;  // guards the fields below
  std::map<std::string, std::shared_ptr<InprocFabric>> children_;
  std::exception_ptr original_error_;
  int reporting_rank_ = -1;
  std::shared_ptr<const WireError> wire_error_;  // what the other ranks rethrow
};

class InprocTransport final : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocFabric> fabric, int rank);

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size(); }
  const char* name() const override { return "inproc"; }
  std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                 Deadline deadline) override;
  std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                 Deadline deadline) override;
  void abort(std::exception_ptr error) noexcept override;
  std::unique_ptr<Transport> split(const SplitSpec& spec) override;

  const std::shared_ptr<InprocFabric>& fabric() const { return fabric_; }

 private:
  class RecvRequest;
  void check_peer(int peer) const;
  void throw_if_failed() const;

  std::shared_ptr<InprocFabric> fabric_;
  int rank_;
};

}  // namespace cohort
