#include "group/group_impl.h"

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "group/group_report.h"
#include "transport/call_stamp.h"
#include "transport/wire_error.h"

namespace cohort {

Group::Impl::Impl(std::shared_ptr<Transport> transport, std::shared_ptr<Store> store,
                  GroupOptions options)
    : transport_(std::move(transport)),
      store_(std::move(store)),
      options_(std::move(options)),
      layout_(Topology::one_rank_per_node(transport_->rank(), transport_->size())),
      dispatcher_(transport_->size(), transport_->name(), options_),
      scheduler_([this](Operation& op) { return run(op); }) {
  // Without a store (the MPI backend) there is nowhere to report stalls.
  if (store_) {
    stalls_ = std::make_unique<StallReporter>(store_, rank(), size(), options_.timeout);
  }
  // No worker yet: Note [Worker on demand] in scheduler.h.
}

Group::Impl::~Impl() = default;  // the scheduler goes first (its declaration is last)

std::shared_ptr<Work> Group::Impl::point_to_point(const CollectiveCall& call, int peer,
                                                  const CollectiveOptions& opts, bool blocking) {
  Scheduler::P2PBody body = dispatcher_.point_to_point_body(call, peer);
  Operation op;
  op.collective = false;
  op.signature = {call.kind, call.count, call.dtype, opts.op, 0, peer};
  op.channel = kP2PChannelBit | opts.tag;
  op.timeout = timeout_for(opts);
  if (blocking) {
    scheduler_.run_p2p_blocking(std::move(op), std::move(body));
    return nullptr;
  }
  return scheduler_.submit_p2p(std::move(op), std::move(body));
}

GroupSetup Group::Impl::setup() const {
  return GroupSetup(rank(), size(), store_, engine(), options_);
}

void Group::Impl::install(GroupLayout layout) {
  layout_ = std::move(layout);
  dispatcher_.set_layout(layout_.topology, layout_.shared_memory_everywhere, layout_.cost_model);
}

void Group::Impl::discover_topology() {
  install(setup().discover());
  report_creation();
}

void Group::Impl::discover_topology_through_engine() {
  install(setup().discover_through_engine());
  report_creation();
}

void Group::Impl::share_one_process() {
  install(setup().one_process());
  report_creation();
}

void Group::Impl::inherit(const Impl& parent, const std::vector<int>& members, Deadline deadline) {
  install(setup().inherit(parent.layout_, members, deadline));
}

void Group::Impl::report_creation() {
  GroupReport report;
  report.name = options_.name;
  report.transport = transport_->name();
  if (engine() != nullptr) {
    report.engine = engine()->engine_name();
    report.device_engine = !engine()->handles_host_memory();
  }
  report.shared_memory_asked = options_.shared_memory;
  report.debug_checks = options_.debug_checks;
  report.algorithm = options_.algorithm;
  report.timeout = options_.timeout;
  report.topology = layout_.topology;
  report.shape = dispatcher_.shape();
  report.cost_model = layout_.cost_model;
  log_group_created(report);
}

// The scheduler's executor (it has checked that the group has not failed).
std::exception_ptr Group::Impl::run(Operation& op) noexcept {
  try {
    const Deadline deadline = Deadline::after(op.timeout);
    if (!op.collective) {
      algo::Context ctx(*transport_, op.channel, deadline, scratch_);
      op.body(ctx);
      return nullptr;
    }
    if (stalls_) stalls_->started(op.sequence);
    if (options_.debug_checks) check_signatures(op, deadline);
    const CallStamp stamp = options_.check_calls ? op.signature.stamp() : CallStamp{};
    if (stamp.stamped() && checks_calls_through_engine()) {
      check_call_through_engine(op.sequence, stamp, deadline);
    }
    algo::Context ctx(*transport_, op.sequence, deadline, scratch_, layout_.shm.get(),
                      &layout_.topology, stamp);
    op.body(ctx);
    if (stalls_) stalls_->finished(op.sequence);
    return nullptr;
  } catch (...) {
    std::exception_ptr error = explain_failure(op, std::current_exception());
    abort(error);
    return error;
  }
}

void Group::Impl::abort(std::exception_ptr error) noexcept {
  if (!scheduler_.fail(error)) return;
  transport_->abort(error);
  // Idempotent where the engine is the transport (MPI).
  if (engine() != nullptr) engine()->abort(error);
  if (layout_.shm) layout_.shm->abort(error);
}

// A local timeout becomes a TimeoutError that names the collective, its sequence number and
// the ranks that never started it. Errors relayed from other ranks already say all that.
std::exception_ptr Group::Impl::explain_failure(const Operation& op, std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    if (WireError::is_relayed(e.what())) return error;
    std::string text = op.describe() + " timed out after " + std::to_string(op.timeout.count()) +
                       " ms on rank " + std::to_string(rank()) + " (" + e.what() + ")";
    if (op.collective) {
      text += "; " + (stalls_ ? stalls_->ranks_behind(op.sequence)
                              : "this group has no store to tell which ranks joined it (MPI "
                                "backend)");
    }
    return std::make_exception_ptr(TimeoutError(text));
  } catch (const PeerError& e) {
    if (WireError::is_relayed(e.what())) return error;
    return std::make_exception_ptr(
        PeerError(e.failed_rank(),
                  op.describe() + " failed on rank " + std::to_string(rank()) + ": " + e.what()));
  } catch (...) {
    return error;
  }
}

}  // namespace cohort
