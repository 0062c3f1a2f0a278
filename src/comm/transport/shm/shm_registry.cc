#include "transport/shm/shm_registry.h"

#include <algorithm>
#include <optional>
#include <string>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "transport/shm/shm_window.h"

namespace cohort {

ShmRegion::ShmRegion(std::shared_ptr<ShmRegistry> registry, uint32_t id, size_t bytes,
                     std::vector<ShmSegment> copies, int own_rank)
    : registry_(std::move(registry)),
      id_(id),
      bytes_(bytes),
      copies_(std::move(copies)),
      own_rank_(own_rank) {}

ShmRegion::~ShmRegion() = default;

namespace {

constexpr const char* kWhat = "registering shared memory";

// Rank `me`'s copy, or nullopt (with the reason in `why`) when it cannot be made.
std::optional<ShmSegment> make_own_copy(size_t bytes, std::string& why) {
  try {
    return ShmSegment::create_anonymous(std::max<size_t>(bytes, 1));
  } catch (const ConfigError& e) {
    why = e.what();
    return std::nullopt;
  }
}

// Maps every peer's offered copy into `copies`; false (with the reason in `why`) when one
// cannot be mapped or has none.
bool map_peers(const ShmWindow& window, uint64_t round, uint32_t id, size_t bytes,
               std::vector<ShmSegment>& copies, std::string& why) {
  for (int r = 0; r < window.size(); ++r) {
    if (r == window.rank()) continue;
    const ShmOffer offer = window.offer(r, round);
    COHORT_INTERNAL_ASSERT(offer.region == id, "local rank ", r, " registered region ",
                           offer.region, " while this rank registered ", id);
    if (offer.fd < 0) {
      why = detail::concat("rank ", window.group_rank(r), " could not make its copy");
      return false;
    }
    try {
      copies[static_cast<size_t>(r)] =
          ShmSegment::open_peer(window.pid(r), offer.fd, std::max<size_t>(bytes, 1));
    } catch (const ConfigError& e) {
      why = e.what();
      return false;
    }
  }
  return true;
}

}  // namespace

// Note [Registered buffers].
std::shared_ptr<ShmRegion> ShmRegistry::allocate(ShmWindow& window, size_t bytes,
                                                 const ShmRoundCall& call, Deadline deadline) {
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
  }
  std::vector<ShmSegment> copies(static_cast<size_t>(window.size()));
  std::string why;
  std::optional<ShmSegment> own = make_own_copy(bytes, why);

  const uint64_t offered = window.next_round();
  window.set_offer(offered, ShmOffer{id, own ? own->fd() : -1, bytes, 0});
  window.post_and_wait(offered, call, deadline, kWhat);
  const bool mapped_all = own && map_peers(window, offered, id, bytes, copies, why);

  const uint64_t answered = window.next_round();
  window.set_offer(answered, ShmOffer{id, -1, bytes, mapped_all ? 1 : 0});
  window.post_and_wait(answered, call, deadline, kWhat);
  bool shared = true;
  for (int r = 0; r < window.size(); ++r) shared = shared && window.offer(r, answered).mapped_all;
  // Every peer that will ever map this rank's copy has: only the mappings hold it from now on.
  if (own) own->close_fd();
  if (!shared) {
    if (!why.empty()) {
      COHORT_LOG(kWarn,
                 "registered memory is private on this node (its collectives stay "
                 "staged): ",
                 why);
    }
    return nullptr;
  }
  copies[static_cast<size_t>(window.rank())] = std::move(*own);
  auto region =
      std::make_shared<ShmRegion>(shared_from_this(), id, bytes, std::move(copies), window.rank());
  return region;
}

}  // namespace cohort
