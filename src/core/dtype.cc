#include "cohort/core/dtype.h"

#include <algorithm>
#include <cctype>

#include "cohort/core/check.h"

namespace cohort {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  COHORT_INTERNAL_ASSERT(false, "unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown-dtype";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown-op";
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

DType parse_dtype(const std::string& name) {
  const std::string n = lower(name);
  if (n == "float32" || n == "float" || n == "fp32" || n == "f32") return DType::kFloat32;
  if (n == "float64" || n == "double" || n == "fp64" || n == "f64") return DType::kFloat64;
  if (n == "float16" || n == "half" || n == "fp16" || n == "f16") return DType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DType::kBFloat16;
  if (n == "int8" || n == "i8") return DType::kInt8;
  if (n == "uint8" || n == "u8") return DType::kUInt8;
  if (n == "int32" || n == "int" || n == "i32") return DType::kInt32;
  if (n == "int64" || n == "long" || n == "i64") return DType::kInt64;
  throw InvalidArgument("unknown dtype '" + name +
                        "': use float32, float64, float16, bfloat16, int8, uint8, int32 or int64");
}

ReduceOp parse_reduce_op(const std::string& name) {
  const std::string n = lower(name);
  if (n == "sum") return ReduceOp::kSum;
  if (n == "avg" || n == "mean") return ReduceOp::kAvg;
  if (n == "min") return ReduceOp::kMin;
  if (n == "max") return ReduceOp::kMax;
  if (n == "product" || n == "prod") return ReduceOp::kProduct;
  throw InvalidArgument("unknown reduce op '" + name + "': use sum, avg, min, max or product");
}

}  // namespace cohort
