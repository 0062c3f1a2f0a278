// The wire format between two ranks of a TCP group.
//
// Handshake (connector -> acceptor, once per connection): Hello{magic, version, world size,
// connector rank, 16-byte group secret}; the acceptor answers one byte (1 = accepted) or closes.
// Then frames in both directions: FrameHeader + payload. kData carries a message for (channel,
// step) and the call that sent it; kAbort carries an encoded WireError; kGoodbye says the sender
// closed its group.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "cohort/comm/transport.h"
#include "transport/call_stamp.h"
#include "transport/wire_error.h"

namespace cohort::tcp {

inline constexpr uint32_t kHelloMagic = 0x43485448;  // "CHTH"
inline constexpr uint32_t kFrameMagic = 0x43484652;  // "CHFR"
inline constexpr uint16_t kProtocolVersion = 2;      // 2: frames carry a CallStamp
inline constexpr size_t kSecretBytes = 16;
// Largest message a frame may announce (1 TiB): larger is corruption, not data.
inline constexpr uint64_t kMaxMessageBytes = 1ULL << 40;
inline constexpr uint64_t kMaxAbortBytes = WireError::kMaxEncodedBytes;

using Secret = std::array<uint8_t, kSecretBytes>;

#pragma pack(push, 1)
struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  int32_t world_size;
  int32_t rank;
  uint8_t secret[kSecretBytes];
};

enum FrameType : uint8_t { kData = 1, kAbort = 2, kGoodbye = 3 };

struct FrameHeader {
  uint32_t magic;
  uint8_t type;
  uint8_t reserved[3];
  uint64_t channel;
  uint64_t step;
  uint64_t bytes;
  CallStamp stamp;  // kData: the sender's call (Note [Call stamps] in transport/call_stamp.h)
};
#pragma pack(pop)

// Abort payload: kind (1 byte), failed rank (4), message (rest), little-endian.

Secret random_secret();
bool secrets_equal(const uint8_t* a, const uint8_t* b);  // constant time

}  // namespace cohort::tcp
