#include "transport/wire_error.h"

#include "cohort/core/error.h"

namespace cohort {

WireError WireError::from(std::exception_ptr error) {
  WireError out;
  try {
    std::rethrow_exception(error);
  } catch (const PeerError& e) {
    out = {kPeer, e.failed_rank(), e.what()};
  } catch (const TimeoutError& e) {
    out = {kTimeout, -1, e.what()};
  } catch (const ProtocolError& e) {
    out = {kProtocol, -1, e.what()};
  } catch (const MismatchError& e) {
    out = {kMismatch, -1, e.what()};
  } catch (const InvalidArgument& e) {
    out = {kInvalid, -1, e.what()};
  } catch (const StoreError& e) {
    out = {kStore, -1, e.what()};
  } catch (const ConfigError& e) {
    out = {kConfig, -1, e.what()};
  } catch (const std::exception& e) {
    out = {kGeneric, -1, e.what()};
  } catch (...) {
    out = {kGeneric, -1, "unknown error"};
  }
  return out;
}

std::string WireError::encode() const {
  std::string out(5, '\0');
  out[0] = static_cast<char>(kind);
  const uint32_t rank = static_cast<uint32_t>(failed_rank);
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((rank >> (8 * i)) & 0xff);
  out += message.substr(0, kMaxEncodedBytes - out.size());
  return out;
}

WireError WireError::decode(const std::string& payload) {
  if (payload.size() < 5 || static_cast<uint8_t>(payload[0]) > kLastKind) {
    throw ProtocolError("malformed abort frame (" + std::to_string(payload.size()) + " bytes)");
  }
  WireError out;
  out.kind = static_cast<Kind>(payload[0]);
  uint32_t rank = 0;
  for (int i = 0; i < 4; ++i)
    rank |= static_cast<uint32_t>(static_cast<uint8_t>(payload[1 + i])) << (8 * i);
  out.failed_rank = static_cast<int32_t>(rank);
  out.message = payload.substr(5);
  return out;
}

void WireError::rethrow(int reporting_rank) const {
  std::rethrow_exception(as_exception(reporting_rank));
}

namespace {
constexpr const char* kRelayMark = " aborted the group: ";
}

bool WireError::is_relayed(const std::string& text) {
  return text.rfind("rank ", 0) == 0 && text.find(kRelayMark) != std::string::npos;
}

std::exception_ptr WireError::as_exception(int reporting_rank) const {
  // Errors that came from another rank already say so; do not stack the prefix.
  const std::string text = is_relayed(message)
                               ? message
                               : "rank " + std::to_string(reporting_rank) + kRelayMark + message;
  switch (kind) {
    case kPeer: return std::make_exception_ptr(PeerError(failed_rank, text));
    case kTimeout: return std::make_exception_ptr(TimeoutError(text));
    case kProtocol: return std::make_exception_ptr(ProtocolError(text));
    case kInvalid: return std::make_exception_ptr(InvalidArgument(text));
    case kMismatch: return std::make_exception_ptr(MismatchError(text));
    case kStore: return std::make_exception_ptr(StoreError(text));
    case kConfig: return std::make_exception_ptr(ConfigError(text));
    case kGeneric: break;
  }
  return std::make_exception_ptr(Error(text));
}

}  // namespace cohort
