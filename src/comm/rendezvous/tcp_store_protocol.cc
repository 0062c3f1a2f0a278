// Encoding and validated decoding of TCP store frames (the format is described in
// tcp_store_protocol.h). Decoding never trusts a length before checking it against both the
// bytes actually present and the field's limit, so a hostile peer can cause a ProtocolError
// but not an out-of-bounds read, a huge allocation or a hang.
#include "rendezvous/tcp_store_protocol.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstdio>

#include "cohort/core/error.h"

namespace cohort::store_wire {

namespace {

void put_u32(uint8_t* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t get_u32(const uint8_t* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(in[i]) << (8 * i);
  return v;
}

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

[[noreturn]] void too_big(const char* what, size_t size, size_t limit) {
  throw InvalidArgument(std::string("store ") + what + " of " + std::to_string(size) +
                        " bytes exceeds the limit of " + std::to_string(limit) + " bytes");
}

// Fields of a request, without the limits checks (those differ between sides).
void write_request_fields(const Request& r, Writer& w) {
  switch (r.op) {
    case Op::kHello: w.bytes(r.token); break;
    case Op::kSet: w.bytes(r.key); w.bytes(r.value); break;
    case Op::kGet: w.bytes(r.key); w.u64(r.timeout_ms); break;
    case Op::kAdd: w.bytes(r.key); w.i64(r.delta); break;
    case Op::kCompareSet: w.bytes(r.key); w.bytes(r.expected); w.bytes(r.value); break;
    case Op::kWait:
      w.u32(static_cast<uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) w.bytes(k);
      w.u64(r.timeout_ms);
      break;
    case Op::kDeleteKey: w.bytes(r.key); break;
    case Op::kNumKeys: break;
    default: throw InvalidArgument(std::string("not a store request: ") + op_name(r.op));
  }
}

void check_request_limits(const Request& r) {
  check_key(r.key);
  check_value(r.value);
  check_value(r.expected);
  if (r.token.size() > kMaxTokenBytes) too_big("job token", r.token.size(), kMaxTokenBytes);
  if (r.keys.size() > kMaxWaitKeys) {
    throw InvalidArgument("store wait() on " + std::to_string(r.keys.size()) +
                          " keys exceeds the limit of " + std::to_string(kMaxWaitKeys) + " keys");
  }
  for (const auto& k : r.keys) check_key(k);
}

}  // namespace

void check_key(const std::string& key) {
  if (key.size() > kMaxKeyBytes) too_big("key", key.size(), kMaxKeyBytes);
}

void check_value(const Bytes& value) {
  if (value.size() > kMaxValueBytes) too_big("value", value.size(), kMaxValueBytes);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kCompareSet: return "COMPARE_SET";
    case Op::kWait: return "WAIT";
    case Op::kDeleteKey: return "DELETE_KEY";
    case Op::kNumKeys: return "NUM_KEYS";
    case Op::kOk: return "OK";
    case Op::kError: return "ERROR";
  }
  return "unknown op";
}

bool is_request(Op op) {
  const auto v = static_cast<uint8_t>(op);
  return v >= static_cast<uint8_t>(Op::kHello) && v <= static_cast<uint8_t>(Op::kNumKeys);
}

// ---------------------------------------------------------------- header

void encode_header(Op op, uint32_t length, uint8_t out[kHeaderBytes]) {
  put_u32(out, kMagic);
  out[4] = kProtocolVersion;
  out[5] = static_cast<uint8_t>(op);
  put_u32(out + 6, length);
}

Header decode_header(const uint8_t in[kHeaderBytes], uint32_t max_payload) {
  const uint32_t magic = get_u32(in);
  if (magic != kMagic) {
    throw ProtocolError("bad frame magic " + hex(magic) + " (expected " + hex(kMagic) +
                        "): the peer is not a cohort store client or server");
  }
  if (in[4] != kProtocolVersion) {
    throw ProtocolError("store protocol version " + std::to_string(in[4]) +
                        ", but this build speaks version " + std::to_string(kProtocolVersion) +
                        ": mixed cohort versions in one job?");
  }
  Header h;
  h.op = static_cast<Op>(in[5]);
  if (!is_request(h.op) && h.op != Op::kOk && h.op != Op::kError) {
    throw ProtocolError("unknown frame op " + std::to_string(in[5]));
  }
  h.length = get_u32(in + 6);
  if (h.length > max_payload) {
    throw ProtocolError(std::string(op_name(h.op)) + " frame announces a payload of " +
                        std::to_string(h.length) + " bytes, over the limit of " +
                        std::to_string(max_payload) + " bytes");
  }
  return h;
}

// ---------------------------------------------------------------- Writer / Reader

void Writer::u32(uint32_t v) {
  uint8_t b[4];
  put_u32(b, v);
  out_.insert(out_.end(), b, b + 4);
}

void Writer::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void Writer::bytes(const uint8_t* data, size_t size) {
  u32(static_cast<uint32_t>(size));
  out_.insert(out_.end(), data, data + size);
}

void Writer::bytes(const std::string& s) {
  bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

Reader::Reader(const uint8_t* data, size_t size, std::string context)
    : data_(data), size_(size), context_(std::move(context)) {}

void Reader::fail(const std::string& what) const { throw ProtocolError(context_ + ": " + what); }

void Reader::need(size_t n, const char* field) const {
  const size_t left = size_ - offset_;
  if (n > left) {
    fail(std::string("truncated ") + field + " (needs " + std::to_string(n) + " bytes, " +
         std::to_string(left) + " left)");
  }
}

uint8_t Reader::u8(const char* field) {
  need(1, field);
  return data_[offset_++];
}

uint32_t Reader::u32(const char* field) {
  need(4, field);
  const uint32_t v = get_u32(data_ + offset_);
  offset_ += 4;
  return v;
}

uint64_t Reader::u64(const char* field) {
  need(8, field);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(data_[offset_ + i]) << (8 * i);
  offset_ += 8;
  return v;
}

Bytes Reader::bytes(const char* field, size_t limit) {
  const uint32_t size = u32(field);
  if (size > limit) {
    fail(std::string(field) + " of " + std::to_string(size) + " bytes exceeds the limit of " +
         std::to_string(limit) + " bytes");
  }
  need(size, field);
  const uint8_t* begin = data_ + offset_;
  offset_ += size;
  return Bytes(begin, begin + size);
}

std::string Reader::string(const char* field, size_t limit) {
  const Bytes b = bytes(field, limit);
  return std::string(b.begin(), b.end());
}

void Reader::finish() {
  if (offset_ != size_) {
    fail(std::to_string(size_ - offset_) + " unexpected bytes after the last field");
  }
}

// ---------------------------------------------------------------- requests and errors

Bytes encode_request(const Request& request) {
  check_request_limits(request);
  Writer w;
  write_request_fields(request, w);
  Bytes out = w.take();
  if (out.size() > kMaxPayloadBytes) {
    throw InvalidArgument(std::string("store ") + op_name(request.op) + " request of " +
                          std::to_string(out.size()) + " bytes exceeds the frame limit of " +
                          std::to_string(kMaxPayloadBytes) + " bytes (too many or too long keys?)");
  }
  return out;
}

Request decode_request(Op op, const uint8_t* payload, size_t size) {
  Reader r(payload, size, std::string(op_name(op)) + " request");
  Request out;
  out.op = op;
  switch (op) {
    case Op::kHello: out.token = r.string("job token", kMaxTokenBytes); break;
    case Op::kSet:
      out.key = r.string("key", kMaxKeyBytes);
      out.value = r.bytes("value", kMaxValueBytes);
      break;
    case Op::kGet:
      out.key = r.string("key", kMaxKeyBytes);
      out.timeout_ms = r.u64("timeout");
      break;
    case Op::kAdd:
      out.key = r.string("key", kMaxKeyBytes);
      out.delta = r.i64("delta");
      break;
    case Op::kCompareSet:
      out.key = r.string("key", kMaxKeyBytes);
      out.expected = r.bytes("expected value", kMaxValueBytes);
      out.value = r.bytes("desired value", kMaxValueBytes);
      break;
    case Op::kWait: {
      const uint32_t count = r.u32("key count");
      if (count > kMaxWaitKeys) {
        throw ProtocolError("WAIT request: " + std::to_string(count) +
                            " keys exceeds the limit of " + std::to_string(kMaxWaitKeys));
      }
      // Every key takes at least its 4-byte length, so a lying count fails the reads below
      // long before the vector could grow beyond what the (bounded) payload holds.
      for (uint32_t i = 0; i < count; ++i) out.keys.push_back(r.string("key", kMaxKeyBytes));
      out.timeout_ms = r.u64("timeout");
      break;
    }
    case Op::kDeleteKey: out.key = r.string("key", kMaxKeyBytes); break;
    case Op::kNumKeys: break;
    default:
      throw ProtocolError(std::string("expected a request, got a ") + op_name(op) + " frame");
  }
  r.finish();
  return out;
}

Bytes encode_error(ErrorCode code, const std::string& message) {
  Writer w;
  w.u8(static_cast<uint8_t>(code));
  w.bytes(message.substr(0, kMaxErrorMessageBytes));
  return w.take();
}

std::pair<ErrorCode, std::string> decode_error(const Bytes& payload) {
  Reader r(payload, "ERROR reply");
  const uint8_t code = r.u8("error code");
  std::string message = r.string("message", kMaxErrorMessageBytes);
  r.finish();
  if (code < static_cast<uint8_t>(ErrorCode::kProtocol) ||
      code > static_cast<uint8_t>(ErrorCode::kInternal)) {
    throw ProtocolError("ERROR reply: unknown error code " + std::to_string(code));
  }
  return {static_cast<ErrorCode>(code), std::move(message)};
}

uint64_t clamp_timeout_ms(Milliseconds timeout) {
  return static_cast<uint64_t>(std::clamp(timeout, Milliseconds(0), kMaxTimeout).count());
}

bool tokens_equal(const std::string& expected, const std::string& presented) {
  // Every byte of `expected` is visited whatever `presented` holds; volatile keeps the
  // compiler from turning the loop back into an early exit.
  volatile uint8_t diff = expected.size() == presented.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const uint8_t theirs = i < presented.size() ? static_cast<uint8_t>(presented[i]) : 0;
    diff = static_cast<uint8_t>(diff | (static_cast<uint8_t>(expected[i]) ^ theirs));
  }
  return diff == 0;
}

// ---------------------------------------------------------------- frames on a socket

void write_frame(net::Socket& socket, Op op, const Bytes& payload, Deadline deadline) {
  uint8_t header[kHeaderBytes];
  encode_header(op, static_cast<uint32_t>(payload.size()), header);
  iovec parts[2] = {{header, kHeaderBytes},
                    {const_cast<uint8_t*>(payload.data()), payload.size()}};
  socket.write_all(parts, 2, deadline);
}

Frame read_frame(net::Socket& socket, uint32_t max_payload, Deadline header_deadline,
                 Milliseconds body_timeout) {
  uint8_t header[kHeaderBytes];
  socket.read_all(header, kHeaderBytes, header_deadline);
  const Header h = decode_header(header, max_payload);
  const Deadline body_deadline =
      Deadline::after(body_timeout + Milliseconds(1000) * (h.length >> 20));
  Frame frame;
  frame.op = h.op;
  // Grow by doubling with what has arrived, never straight to the announced size.
  constexpr size_t kFirstChunk = 64 << 10;
  size_t got = 0;
  while (got < h.length) {
    const size_t step = std::min<size_t>(h.length - got, std::max(got, kFirstChunk));
    frame.payload.resize(got + step);
    socket.read_all(frame.payload.data() + got, step, body_deadline);
    got += step;
  }
  return frame;
}

}  // namespace cohort::store_wire
