#include "engines/mpi/mpi_transport.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <thread>

#include "backends/host_collectives.h"
#include "engines/mpi/mpi_call.h"
#include "backends/polling.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "transport/wire_error.h"

namespace cohort {

namespace {

// Messages above INT_MAX bytes cannot be one MPI call: they go as parts of at most this size,
// with the same tag, which MPI delivers in order.
constexpr size_t kMaxPartBytes = size_t{1} << 30;
constexpr int kAbortTag = 0;
// How long abort() lets its notices leave before giving up on them.
constexpr Milliseconds kAbortSendGrace{1000};

// Polls until every request is done. `between` runs between polls and may throw (abort
// notices, the group's failure).
template <typename Between>
void poll(std::vector<MPI_Request>& requests, MPI_Status* statuses, Deadline deadline,
          const std::string& what, Between between) {
  const auto start = Clock::now();
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, statuses);
    if (rc == MPI_ERR_IN_STATUS) {
      for (size_t i = 0; i < requests.size(); ++i) {
        const int error = statuses[i].MPI_ERROR;
        if (error != MPI_SUCCESS && error != MPI_ERR_PENDING) mpi::check(error, what.c_str());
      }
    }
    mpi::check(rc, what.c_str());
    if (done) return;
    between();
    if (deadline.expired()) {
      throw TimeoutError(what + " did not complete by its deadline");
    }
    pause_between_polls(start);
  }
}

// MPI caches MPI_TAG_UB on MPI_COMM_WORLD only (duplicates copy it, splits do not), and it
// holds for every communicator.
int tag_upper_bound() {
  void* value = nullptr;
  int found = 0;
  mpi::check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found),
             "MPI_Comm_get_attr(MPI_TAG_UB)");
  return found ? *static_cast<int*>(value) : 32767;
}

int rank_of(MPI_Comm comm) {
  int rank = 0;
  mpi::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 0;
  mpi::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  return size;
}

std::string peer_text(const char* call, const char* direction, int peer) {
  return std::string(call) + " " + direction + " rank " + std::to_string(peer);
}

}  // namespace

// One send or receive, in parts when it is larger than kMaxPartBytes.
class MpiRequest final : public Request {
 public:
  MpiRequest(MpiTransport& transport, bool receive, int peer, size_t bytes, Deadline deadline)
      : transport_(transport), receive_(receive), peer_(peer), bytes_(bytes), deadline_(deadline) {}

  ~MpiRequest() override {
    // Dropped unfinished (an error elsewhere unwound the algorithm): a receive must not land
    // in memory that is about to be freed, so cancel it; a send is left to finish on its own.
    for (MPI_Request& part : parts_) {
      if (part == MPI_REQUEST_NULL) continue;
      if (receive_) {
        MPI_Cancel(&part);
        MPI_Wait(&part, MPI_STATUS_IGNORE);  // returns at once for a cancelled receive
      } else {
        MPI_Request_free(&part);
      }
    }
  }

  std::vector<MPI_Request>& parts() { return parts_; }
  std::vector<size_t>& part_bytes() { return part_bytes_; }

  // Waiting again returns at once: algorithms may wait for a request, then for all of them.
  void wait() override {
    if (done_) return;
    std::vector<MPI_Status> statuses(parts_.size());
    const std::string what =
        peer_text(receive_ ? "MPI_Irecv" : "MPI_Isend", receive_ ? "from" : "to", peer_);
    transport_.wait(parts_, statuses.data(), deadline_, what);
    done_ = true;
    if (!receive_) return;
    for (size_t i = 0; i < statuses.size(); ++i) {
      int received = 0;
      mpi::check(MPI_Get_count(&statuses[i], MPI_BYTE, &received), "MPI_Get_count");
      if (static_cast<size_t>(received) != part_bytes_[i]) {
        throw ProtocolError("rank " + std::to_string(peer_) + " sent " + std::to_string(received) +
                            " bytes where " + std::to_string(part_bytes_[i]) +
                            " were expected (message of " + std::to_string(bytes_) +
                            " bytes): the ranks disagree on a collective's count or dtype");
      }
    }
  }

 private:
  MpiTransport& transport_;
  bool receive_;
  int peer_;
  size_t bytes_;
  Deadline deadline_;
  std::vector<MPI_Request> parts_;
  std::vector<size_t> part_bytes_;
  bool done_ = false;
};

std::unique_ptr<MpiTransport> MpiTransport::create(MPI_Comm comm, Deadline deadline) {
  // First a barrier under the deadline, so that a rank that never makes its group is a
  // TimeoutError; then blocking duplicates, which no longer wait for anyone. (MPI_Comm_idup
  // would do both, but crashes OpenMPI 4.1 inside MPI_Testall.)
  std::vector<MPI_Request> arrived(1, MPI_REQUEST_NULL);
  mpi::check(MPI_Ibarrier(comm, &arrived[0]), "MPI_Ibarrier");
  std::vector<MPI_Status> statuses(1);
  poll(arrived, statuses.data(), deadline,
       "MPI_Ibarrier (making the group: every rank of the communicator must make it)", [] {});
  std::vector<MPI_Comm> copies(3, MPI_COMM_NULL);
  for (MPI_Comm& copy : copies) mpi::check(MPI_Comm_dup(comm, &copy), "MPI_Comm_dup");
  for (MPI_Comm copy : copies) {
    mpi::check(MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  return std::unique_ptr<MpiTransport>(new MpiTransport(copies[0], copies[1], copies[2]));
}

MpiTransport::MpiTransport(MPI_Comm collectives, MPI_Comm p2p, MPI_Comm control)
    : collectives_(collectives),
      p2p_(p2p),
      control_(control),
      rank_(rank_of(collectives)),
      size_(size_of(collectives)),
      tags_(tag_upper_bound()),
      abort_inbox_(WireError::kMaxEncodedBytes) {
  post_abort_receive();
  mpi::group_opened();
}

MpiTransport::~MpiTransport() {
  const bool broken = failed_.load();
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (abort_receive_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&abort_receive_);
      MPI_Wait(&abort_receive_, MPI_STATUS_IGNORE);
    }
  }
  // A broken group may still have requests in flight on its communicators: leave them.
  if (!broken) {
    MPI_Comm_free(&collectives_);
    MPI_Comm_free(&p2p_);
    MPI_Comm_free(&control_);
  }
  mpi::group_closed();
}

void MpiTransport::post_abort_receive() {
  mpi::check(MPI_Irecv(abort_inbox_.data(), static_cast<int>(abort_inbox_.size()), MPI_BYTE,
                       MPI_ANY_SOURCE, kAbortTag, control_, &abort_receive_),
             "MPI_Irecv (abort notices)");
}

MPI_Comm MpiTransport::communicator_for(Tag tag) const {
  return (tag.channel & kP2PChannelBit) != 0 ? p2p_ : collectives_;
}

int MpiTransport::mpi_tag(Tag tag) const {
  if ((tag.channel & kP2PChannelBit) == 0) return tags_.collective_tag(tag.step);
  const uint64_t user_tag = tag.channel & ~kP2PChannelBit;
  if (user_tag > static_cast<uint64_t>(tags_.max_tag())) {
    throw InvalidArgument("send/recv tag " + std::to_string(user_tag) +
                          " is above this MPI's largest tag (" + std::to_string(tags_.max_tag()) +
                          ")");
  }
  return static_cast<int>(user_tag);
}

std::unique_ptr<Request> MpiTransport::isend(int peer, Tag tag, const void* data, size_t bytes,
                                             Deadline deadline) {
  check_notices();
  auto request = std::make_unique<MpiRequest>(*this, false, peer, bytes, deadline);
  const auto* begin = static_cast<const char*>(data);
  size_t offset = 0;
  do {
    const size_t part = std::min(kMaxPartBytes, bytes - offset);
    request->parts().push_back(MPI_REQUEST_NULL);
    mpi::check(MPI_Isend(begin + offset, static_cast<int>(part), MPI_BYTE, peer, mpi_tag(tag),
                         communicator_for(tag), &request->parts().back()),
               peer_text("MPI_Isend", "to", peer).c_str());
    offset += part;
  } while (offset < bytes);
  return request;
}

std::unique_ptr<Request> MpiTransport::irecv(int peer, Tag tag, void* data, size_t bytes,
                                             Deadline deadline) {
  check_notices();
  auto request = std::make_unique<MpiRequest>(*this, true, peer, bytes, deadline);
  auto* begin = static_cast<char*>(data);
  size_t offset = 0;
  do {
    const size_t part = std::min(kMaxPartBytes, bytes - offset);
    request->parts().push_back(MPI_REQUEST_NULL);
    request->part_bytes().push_back(part);
    mpi::check(MPI_Irecv(begin + offset, static_cast<int>(part), MPI_BYTE, peer, mpi_tag(tag),
                         communicator_for(tag), &request->parts().back()),
               peer_text("MPI_Irecv", "from", peer).c_str());
    offset += part;
  } while (offset < bytes);
  return request;
}

void MpiTransport::wait(std::vector<MPI_Request>& requests, MPI_Status* statuses, Deadline deadline,
                        const std::string& what) {
  std::vector<MPI_Status> own;
  if (statuses == nullptr) {
    own.resize(requests.size());
    statuses = own.data();
  }
  check_notices();
  poll(requests, statuses, deadline, what, [this] {
    poll_abort_notice();
    throw_if_failed();
  });
}

void MpiTransport::wait(MPI_Request& request, Deadline deadline, const std::string& what) {
  std::vector<MPI_Request> one{request};
  wait(one, nullptr, deadline, what);
  request = one[0];
}

void MpiTransport::check_notices() {
  poll_abort_notice();
  throw_if_failed();
}

void MpiTransport::throw_if_failed() {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(failure_mutex_);
  std::rethrow_exception(failure_);
}

void MpiTransport::fail(std::exception_ptr error) {
  failure_ = error;
  failed_.store(true, std::memory_order_release);
}

// Another rank's abort notice fails this rank with the same error, saying who reported it.
void MpiTransport::poll_abort_notice() {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (abort_receive_ == MPI_REQUEST_NULL || failure_) return;
  int arrived = 0;
  MPI_Status status;
  mpi::check(MPI_Test(&abort_receive_, &arrived, &status), "MPI_Test (abort notices)");
  if (!arrived) return;
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  const WireError notice =
      WireError::decode(std::string(abort_inbox_.data(), static_cast<size_t>(bytes)));
  fail(notice.as_exception(status.MPI_SOURCE));
}

void MpiTransport::abort(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (failure_) return;
    fail(error);
  }
  try {
    abort_outbox_ = WireError::from(error).encode();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      abort_sends_.push_back(MPI_REQUEST_NULL);
      MPI_Isend(abort_outbox_.data(), static_cast<int>(abort_outbox_.size()), MPI_BYTE, peer,
                kAbortTag, control_, &abort_sends_.back());
    }
    // Every peer has a receive posted for notices, so they leave at once; the grace only
    // bounds the wait when a peer is gone.
    std::vector<MPI_Status> statuses(abort_sends_.size());
    poll(abort_sends_, statuses.data(), Deadline::after(kAbortSendGrace), "abort notices", [] {});
  } catch (...) {
    // Best effort: the peers still fail by their own deadlines.
  }
}

std::unique_ptr<Transport> MpiTransport::split(const SplitSpec& spec) {
  throw_if_failed();
  MPI_Group parent = MPI_GROUP_NULL;
  MPI_Group members = MPI_GROUP_NULL;
  mpi::check(MPI_Comm_group(collectives_, &parent), "MPI_Comm_group");
  const int included = MPI_Group_incl(parent, spec.new_size(), spec.members.data(), &members);
  MPI_Group_free(&parent);
  mpi::check(included, "MPI_Group_incl");
  // Subgroups made at the same time from this communicator must differ in tag; the key is
  // unique per subgroup and the same on its members.
  const int tag =
      static_cast<int>(std::hash<std::string>{}(spec.key) % static_cast<size_t>(tags_.max_tag()));
  MPI_Comm part = MPI_COMM_NULL;
  // Blocking, but Group::split has just all-gathered the colors, so every member is here.
  const int created = MPI_Comm_create_group(collectives_, members, tag, &part);
  MPI_Group_free(&members);
  mpi::check(created, "MPI_Comm_create_group");
  std::unique_ptr<Transport> transport;
  try {
    transport = create(part, spec.deadline);
  } catch (...) {
    MPI_Comm_free(&part);
    throw;
  }
  MPI_Comm_free(&part);
  return transport;
}

std::shared_ptr<CollectiveEngine> MpiTransport::for_subgroup(HostCollectives& subgroup, Deadline) {
  auto engine = std::dynamic_pointer_cast<MpiTransport>(subgroup.transport());
  COHORT_INTERNAL_ASSERT(engine != nullptr, "a subgroup of an MPI group runs on MPI");
  return engine;
}

}  // namespace cohort
