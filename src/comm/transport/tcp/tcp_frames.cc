#include "transport/tcp/tcp_frames.h"

#include <cstring>
#include <fstream>
#include <random>

#include "cohort/core/error.h"

namespace cohort::tcp {

std::string encode_abort(const WireError& error) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(error.kind);
  const uint32_t rank = static_cast<uint32_t>(error.failed_rank);
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((rank >> (8 * i)) & 0xff);
  out += error.message.substr(0, kMaxAbortBytes - out.size());
  return out;
}

WireError decode_abort(const std::string& payload) {
  if (payload.size() < 5 || static_cast<uint8_t>(payload[0]) > WireError::kLastKind) {
    throw ProtocolError("malformed abort frame (" + std::to_string(payload.size()) + " bytes)");
  }
  WireError out;
  out.kind = static_cast<WireError::Kind>(payload[0]);
  uint32_t rank = 0;
  for (int i = 0; i < 4; ++i) rank |= static_cast<uint32_t>(static_cast<uint8_t>(payload[1 + i])) << (8 * i);
  out.failed_rank = static_cast<int32_t>(rank);
  out.message = payload.substr(5);
  return out;
}

Secret random_secret() {
  Secret secret{};
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(secret.data()), secret.size())) {
    std::random_device device;  // fallback; still unpredictable on Linux
    for (auto& b : secret) b = static_cast<uint8_t>(device());
  }
  return secret;
}

bool secrets_equal(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace cohort::tcp
