#include "engines/mpi/mpi_call.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "cohort/core/error.h"

namespace cohort::mpi {

namespace {

std::string error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(length));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

void require_thread_multiple(int provided, const char* who) {
  if (provided >= MPI_THREAD_MULTIPLE) return;
  throw ConfigError(std::string("MPI gives ") + thread_level_name(provided) + " (" + who +
                    ") but cohort needs MPI_THREAD_MULTIPLE: a Group calls MPI from its worker "
                    "thread (async collectives, DDP's communication thread) while the program "
                    "may call it too. Initialize MPI with MPI_Init_thread(..., "
                    "MPI_THREAD_MULTIPLE, ...) or let cohort do it, with an MPI built with "
                    "thread support (OpenMPI: `ompi_info | grep THREAD_MULTIPLE`)");
}

// MPI itself is process-wide state, so this bookkeeping is too (docs/architecture.md allows no other).
std::mutex runtime_mutex;
bool initialized_by_cohort = false;
int open_groups = 0;

void finalize_at_exit() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || open_groups > 0) return;
  MPI_Finalize();
}

}  // namespace

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  int error_class = rc;
  MPI_Error_class(rc, &error_class);
  const std::string message = std::string(call) + " failed: " + error_text(rc);
  if (error_class == MPI_ERR_TRUNCATE) throw ProtocolError(message);
  throw Error(message);
}

MPI_Datatype datatype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return MPI_FLOAT;
    case DType::kFloat64: return MPI_DOUBLE;
    case DType::kInt8: return MPI_INT8_T;
    case DType::kUInt8: return MPI_UINT8_T;
    case DType::kInt32: return MPI_INT32_T;
    case DType::kInt64: return MPI_INT64_T;
    case DType::kFloat16:
    case DType::kBFloat16: return MPI_DATATYPE_NULL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    case ReduceOp::kAvg: return MPI_OP_NULL;
  }
  return MPI_OP_NULL;
}

void ensure_initialized() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    throw ConfigError(
        "MPI was already finalized: MPI cannot be initialized twice in one process, "
        "so make MPI groups before MPI_Finalize");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
    require_thread_multiple(provided, "the program initialized it");
    return;
  }
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  initialized_by_cohort = true;
  std::atexit(finalize_at_exit);
  require_thread_multiple(provided, "MPI_Init_thread asked for MPI_THREAD_MULTIPLE");
}

void group_opened() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  ++open_groups;
}

void group_closed() {
  std::lock_guard<std::mutex> lock(runtime_mutex);
  --open_groups;
}

}  // namespace cohort::mpi
