#include "cohort/comm/inproc_transport.h"

#include <cstring>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "kernels/copy_kernel.h"
#include "transport/wire_error.h"

namespace cohort {

// A receive waiting for its message. Filled by the sender's thread under the mailbox lock.
struct InprocFabric::Posted {
  void* data = nullptr;
  size_t bytes = 0;
  bool done = false;
  std::exception_ptr error;
};

namespace {
std::exception_ptr size_mismatch(int src, int dst, size_t sent, size_t expected) {
  return std::make_exception_ptr(ProtocolError(
      "message size mismatch: rank " + std::to_string(src) + " sent " + std::to_string(sent) +
      " bytes but rank " + std::to_string(dst) + " expected " + std::to_string(expected) +
      " (the ranks called different collectives or counts; COHORT_DEBUG=detail names them)"));
}
}  // namespace

InprocFabric::InprocFabric(int size) : size_(size), store_(std::make_shared<MemoryStore>()) {
  COHORT_CHECK(size >= 1, "an in-process fabric needs at least one rank, got ", size);
  for (int i = 0; i < size; ++i) mailboxes_.push_back(std::make_unique<Mailbox>());
}

std::shared_ptr<InprocFabric> InprocFabric::child(const std::string& key, int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = children_[key];
  if (!slot) slot = std::make_shared<InprocFabric>(size);
  COHORT_CHECK_EQ(slot->size(), size, "subgroup '", key, "' was created with another size");
  return slot;
}

void InprocFabric::abort(int reporting_rank, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (original_error_) return;  // the first failure is the one everyone reports
    original_error_ = error;
    reporting_rank_ = reporting_rank;
    wire_error_ = std::make_shared<const WireError>(WireError::from(error));
  }
  for (auto& box : mailboxes_) {
    std::lock_guard<std::mutex> lock(box->mutex);
    box->arrived.notify_all();
  }
}

std::exception_ptr InprocFabric::failure_for(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!original_error_) return nullptr;
  if (rank == reporting_rank_) return original_error_;
  return wire_error_->as_exception(reporting_rank_);
}

class InprocTransport::RecvRequest final : public Request {
 public:
  RecvRequest(InprocTransport* transport, int peer, Tag tag,
              std::shared_ptr<InprocFabric::Posted> posted, Deadline deadline)
      : transport_(transport),
        peer_(peer),
        tag_(tag),
        posted_(std::move(posted)),
        deadline_(deadline) {}

  // Dropped without wait() (an error unwound past it): withdraw the receive so that a later
  // message is not copied into memory the caller has freed.
  ~RecvRequest() override {
    auto& box = *transport_->fabric_->mailboxes_[transport_->rank_];
    std::lock_guard<std::mutex> lock(box.mutex);
    if (!posted_->done) unpost(box);
  }

  void wait() override {
    auto& fabric = *transport_->fabric_;
    auto& box = *fabric.mailboxes_[transport_->rank_];
    std::unique_lock<std::mutex> lock(box.mutex);
    for (;;) {
      if (posted_->done) {
        if (posted_->error) std::rethrow_exception(posted_->error);
        return;
      }
      if (auto failure = fabric.failure_for(transport_->rank_)) {
        unpost(box);
        std::rethrow_exception(failure);
      }
      if (deadline_.expired()) {
        unpost(box);
        throw TimeoutError("receive from rank " + std::to_string(peer_) + " timed out");
      }
      box.arrived.wait_until(lock, deadline_.at());
    }
  }

 private:
  void unpost(InprocFabric::Mailbox& box) {
    auto it = box.posted.find({peer_, tag_});
    if (it == box.posted.end()) return;
    auto& queue = it->second;
    for (auto q = queue.begin(); q != queue.end(); ++q) {
      if (*q == posted_) {
        queue.erase(q);
        break;
      }
    }
    if (queue.empty()) box.posted.erase(it);
  }

  InprocTransport* transport_;
  int peer_;
  Tag tag_;
  std::shared_ptr<InprocFabric::Posted> posted_;
  Deadline deadline_;
};

InprocTransport::InprocTransport(std::shared_ptr<InprocFabric> fabric, int rank)
    : fabric_(std::move(fabric)), rank_(rank) {
  COHORT_CHECK(fabric_ != nullptr, "InprocTransport needs a fabric");
  COHORT_CHECK(rank >= 0 && rank < fabric_->size(), "rank ", rank, " is outside [0, ",
               fabric_->size(), ")");
}

void InprocTransport::check_peer(int peer) const {
  COHORT_CHECK(peer >= 0 && peer < size() && peer != rank_, "invalid peer ", peer, " for rank ",
               rank_, " of ", size());
}

void InprocTransport::throw_if_failed() const {
  if (auto failure = fabric_->failure_for(rank_)) std::rethrow_exception(failure);
}

std::unique_ptr<Request> InprocTransport::isend(int peer, Tag tag, const void* data, size_t bytes,
                                                Deadline deadline) {
  check_peer(peer);
  throw_if_failed();
  auto& box = *fabric_->mailboxes_[peer];
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    auto it = box.posted.find({rank_, tag});
    if (it != box.posted.end()) {
      auto posted = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) box.posted.erase(it);
      if (posted->bytes == bytes) {
        if (bytes > 0) kernels::copy(posted->data, data, bytes);
      } else {
        posted->error = size_mismatch(rank_, peer, bytes, posted->bytes);
      }
      posted->done = true;
    } else {
      const auto* p = static_cast<const uint8_t*>(data);
      box.unexpected[{rank_, tag}].emplace_back(p, p + bytes);
    }
  }
  box.arrived.notify_all();
  return std::make_unique<CompletedRequest>();
}

std::unique_ptr<Request> InprocTransport::irecv(int peer, Tag tag, void* data, size_t bytes,
                                                Deadline deadline) {
  check_peer(peer);
  throw_if_failed();
  auto& box = *fabric_->mailboxes_[rank_];
  std::lock_guard<std::mutex> lock(box.mutex);
  auto it = box.unexpected.find({peer, tag});
  if (it != box.unexpected.end()) {
    std::vector<uint8_t> message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) box.unexpected.erase(it);
    if (message.size() != bytes)
      std::rethrow_exception(size_mismatch(peer, rank_, message.size(), bytes));
    if (bytes > 0) kernels::copy(data, message.data(), bytes);
    return std::make_unique<CompletedRequest>();
  }
  auto posted = std::make_shared<InprocFabric::Posted>();
  posted->data = data;
  posted->bytes = bytes;
  box.posted[{peer, tag}].push_back(posted);
  return std::make_unique<RecvRequest>(this, peer, tag, std::move(posted), deadline);
}

void InprocTransport::abort(std::exception_ptr error) noexcept {
  try {
    fabric_->abort(rank_, error);
  } catch (...) {
    // abort() is the last resort of error handling; it must not throw.
  }
}

std::unique_ptr<Transport> InprocTransport::split(const SplitSpec& spec) {
  return std::make_unique<InprocTransport>(fabric_->child(spec.key, spec.new_size()),
                                           spec.new_rank(rank_));
}

}  // namespace cohort
