#include "transport/tcp/tcp_frames.h"

#include <cstring>
#include <fstream>
#include <random>

#include "cohort/core/error.h"

namespace cohort::tcp {

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
