#include "operator_observer.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <memory>
#include <mutex>

namespace cohort {
namespace {

struct Registration {
  UnitWatcher* watcher;
  uint64_t thread;  // RecordFunction::currentThreadId() of the registering thread
};

// Copy on write: the observer reads a snapshot without locking.
std::mutex registry_mutex;
std::shared_ptr<const std::vector<Registration>> registry =
    std::make_shared<const std::vector<Registration>>();

thread_local bool unwatched = false;
thread_local int watchers_on_thread = 0;
thread_local at::CallbackHandle handle = 0;

std::shared_ptr<const std::vector<Registration>> snapshot() {
  return std::atomic_load(&registry);
}

void add_storage(const at::Tensor& tensor, const UnitWatcher& watcher, std::vector<int>& units) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  const int unit = watcher.unit_of(tensor.storage().unsafeGetStorageImpl());
  if (unit >= 0 && std::find(units.begin(), units.end(), unit) == units.end()) {
    units.push_back(unit);
  }
}

std::vector<int> units_read(c10::ArrayRef<const c10::IValue> inputs, const UnitWatcher& watcher) {
  std::vector<int> units;
  for (const c10::IValue& input : inputs) {
    if (input.isTensor()) {
      add_storage(input.toTensor(), watcher, units);
    } else if (input.isTensorList()) {
      for (const at::Tensor& t : input.toTensorVector()) add_storage(t, watcher, units);
    } else if (input.isList()) {
      for (const c10::IValue& element : input.toListRef()) {
        if (element.isTensor()) add_storage(element.toTensor(), watcher, units);
      }
    }
  }
  std::sort(units.begin(), units.end());
  return units;
}

struct OperatorContext : at::ObserverContext {
  std::vector<std::pair<UnitWatcher*, std::vector<int>>> reads;
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (unwatched) return nullptr;
  const UnwatchedScope inside;  // the watchers' own operators
  const auto watchers = snapshot();
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    for (const Registration& r : *watchers) {
      if (r.thread == fn.forwardThreadId()) r.watcher->before_backward_node(fn.seqNr());
    }
    return nullptr;
  }
  const uint64_t thread = at::RecordFunction::currentThreadId();
  std::unique_ptr<OperatorContext> context;
  for (const Registration& r : *watchers) {
    if (r.thread != thread) continue;
    std::vector<int> units = units_read(fn.inputs(), *r.watcher);
    if (units.empty()) continue;
    r.watcher->before_operator(units);
    if (!context) context = std::make_unique<OperatorContext>();
    context->reads.emplace_back(r.watcher, std::move(units));
  }
  return context;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (context == nullptr) return;
  const UnwatchedScope inside;
  const auto end = static_cast<int64_t>(at::sequence_number::peek());
  for (auto& [watcher, units] : static_cast<OperatorContext*>(context)->reads) {
    watcher->after_operator(units, fn.seqNr(), end);
  }
}

}  // namespace

void watch_operators(UnitWatcher* watcher) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto next = std::make_shared<std::vector<Registration>>(*registry);
    next->push_back({watcher, at::RecordFunction::currentThreadId()});
    std::atomic_store(&registry, std::shared_ptr<const std::vector<Registration>>(next));
  }
  if (watchers_on_thread++ == 0) {
    handle = at::addThreadLocalCallback(
        at::RecordFunctionCallback(&on_start, &on_end)
            .needsInputs(true)
            .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }
}

void unwatch_operators(UnitWatcher* watcher) {
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto next = std::make_shared<std::vector<Registration>>();
    for (const Registration& r : *registry) {
      if (r.watcher != watcher) next->push_back(r);
    }
    std::atomic_store(&registry, std::shared_ptr<const std::vector<Registration>>(next));
  }
  if (--watchers_on_thread == 0) at::removeCallback(handle);
}

bool storage_is_watched(const c10::StorageImpl* storage) {
  const auto current = std::atomic_load(&registry);
  for (const Registration& r : *current) {
    if (r.watcher->unit_of(storage) >= 0) return true;
  }
  return false;
}

UnwatchedScope::UnwatchedScope() : was_(unwatched) {
  unwatched = true;
}
UnwatchedScope::~UnwatchedScope() {
  unwatched = was_;
}

}  // namespace cohort
