// The wire format of the TCP store, shared by its server and its client.
//
// A connection carries frames. Every frame is a fixed 10-byte header and a payload:
//
//   offset 0  u32  magic    0x54534843 (the bytes "CHST")
//   offset 4  u8   version  kProtocolVersion
//   offset 5  u8   op       a request (kHello..kNumKeys) or a reply (kOk, kError)
//   offset 6  u32  length   payload bytes that follow
//
// Integers are little-endian whatever the host; byte strings are a u32 length and the bytes.
// The client sends one request and reads one reply; the first request of a connection is HELLO
// with the job token. Everything read from the network is untrusted: the header is checked
// before a byte of payload is allocated, payloads are checked field by field against the
// limits below, and anything malformed is a ProtocolError that says what was wrong. Values the
// caller passes that exceed a limit are an InvalidArgument raised before anything is sent.
//
// Request payloads                               OK reply payloads
//   HELLO        token                             (empty)
//   SET          key, value                        (empty)
//   GET          key, u64 timeout_ms               value
//   ADD          key, i64 delta                    i64 new value
//   COMPARE_SET  key, expected, desired            value afterwards
//   WAIT         u32 count, count keys, u64 ms     (empty)
//   DELETE_KEY   key                               u8 existed (0 or 1)
//   NUM_KEYS     (empty)                           i64 count
// ERROR reply: u8 ErrorCode, message (at most kMaxErrorMessageBytes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cohort/comm/store.h"
#include "cohort/core/deadline.h"
#include "net/socket.h"

namespace cohort::store_wire {

constexpr uint32_t kMagic = 0x54534843;  // "CHST" in memory order
constexpr uint8_t kProtocolVersion = 1;
constexpr size_t kHeaderBytes = 10;

constexpr size_t kMaxKeyBytes = 4 << 10;
constexpr size_t kMaxValueBytes = 64 << 20;
constexpr size_t kMaxWaitKeys = 65536;
constexpr size_t kMaxTokenBytes = 4 << 10;
constexpr size_t kMaxErrorMessageBytes = 16 << 10;
// COMPARE_SET is the largest request: two values and a key. WAIT's keys share this bound.
constexpr uint32_t kMaxPayloadBytes = 2 * kMaxValueBytes + (64 << 10);
// Until a connection has presented the token it may send nothing bigger than a HELLO.
constexpr uint32_t kMaxHelloPayloadBytes = 4 + kMaxTokenBytes;
// Timeouts on the wire are clamped here, so deadlines computed from them cannot overflow.
constexpr Milliseconds kMaxTimeout{30LL * 24 * 3600 * 1000};

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCompareSet = 5,
  kWait = 6,
  kDeleteKey = 7,
  kNumKeys = 8,
  kOk = 0x80,
  kError = 0x81,
};

// Why the server refused a request; the client turns each into the matching exception.
enum class ErrorCode : uint8_t {
  kProtocol = 1,         // malformed frame (ProtocolError); the server closes the connection
  kBadToken = 2,         // HELLO carried the wrong token, or none (StoreError)
  kTimeout = 3,          // get/wait deadline passed (TimeoutError)
  kInvalidArgument = 4,  // e.g. add() on a value that is not an integer (InvalidArgument)
  kClosed = 5,           // the server is shutting down (StoreError)
  kBusy = 6,             // the server is at its connection limit (StoreError)
  kInternal = 7,         // anything else (StoreError)
};

const char* op_name(Op op);
bool is_request(Op op);

struct Header {
  Op op = Op::kOk;
  uint32_t length = 0;
};

void encode_header(Op op, uint32_t length, uint8_t out[kHeaderBytes]);
// Validates magic, version, op and length (against `max_payload`); ProtocolError otherwise.
Header decode_header(const uint8_t in[kHeaderBytes], uint32_t max_payload);

// Appends little-endian fields to a payload.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void bytes(const uint8_t* data, size_t size);
  void bytes(const Bytes& b) { bytes(b.data(), b.size()); }
  void bytes(const std::string& s);
  Bytes take() { return std::move(out_); }

 private:
  Bytes out_;
};

// Reads fields of one payload, checking every length against what is left and its limit.
// `context` ("SET request") starts every error message.
class Reader {
 public:
  Reader(const Bytes& payload, std::string context)
      : Reader(payload.data(), payload.size(), std::move(context)) {}
  Reader(const uint8_t* data, size_t size, std::string context);
  uint8_t u8(const char* field);
  uint32_t u32(const char* field);
  uint64_t u64(const char* field);
  int64_t i64(const char* field) { return static_cast<int64_t>(u64(field)); }
  Bytes bytes(const char* field, size_t limit);
  std::string string(const char* field, size_t limit);
  // ProtocolError when bytes are left over.
  void finish();

 private:
  [[noreturn]] void fail(const std::string& what) const;
  void need(size_t n, const char* field) const;

  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
  std::string context_;
};

// A request, decoded or about to be encoded. Which fields matter depends on `op` (see top).
struct Request {
  Op op = Op::kNumKeys;
  std::string key;
  Bytes value;     // SET: the value; COMPARE_SET: the desired value
  Bytes expected;  // COMPARE_SET
  std::vector<std::string> keys;  // WAIT
  int64_t delta = 0;              // ADD
  uint64_t timeout_ms = 0;        // GET, WAIT
  std::string token;              // HELLO
};

// InvalidArgument when the key or value exceeds its limit (callers check before copying).
void check_key(const std::string& key);
void check_value(const Bytes& value);

// Client side: InvalidArgument when a key, value or key list exceeds the limits.
Bytes encode_request(const Request& request);
// Server side: ProtocolError naming the op and the field that was wrong.
Request decode_request(Op op, const uint8_t* payload, size_t size);
inline Request decode_request(Op op, const Bytes& payload) {
  return decode_request(op, payload.data(), payload.size());
}

Bytes encode_error(ErrorCode code, const std::string& message);
std::pair<ErrorCode, std::string> decode_error(const Bytes& payload);

// Clamps a caller's timeout to [0, kMaxTimeout].
uint64_t clamp_timeout_ms(Milliseconds timeout);

// Compares tokens in time that depends only on the length of `expected`, never on where the
// first difference is, so a peer cannot guess the secret byte by byte.
bool tokens_equal(const std::string& expected, const std::string& presented);

struct Frame {
  Op op = Op::kOk;
  Bytes payload;
};

// Writes header and payload (no copy of the payload) before `deadline`.
void write_frame(net::Socket& socket, Op op, const Bytes& payload, Deadline deadline);

// Reads one frame: the header by `header_deadline`, then the payload within `body_timeout`
// after the header (plus a second per MiB, so that a big value on a slow link still fits).
// The payload buffer grows with the bytes that actually arrive, so a header that announces a
// large payload and then stalls costs no memory. Throws ProtocolError for a bad header,
// NetError when the connection closes, TimeoutError at a deadline.
Frame read_frame(net::Socket& socket, uint32_t max_payload, Deadline header_deadline,
                 Milliseconds body_timeout);

}  // namespace cohort::store_wire
