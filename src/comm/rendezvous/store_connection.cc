#include "rendezvous/store_connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cohort {

using namespace store_wire;

namespace {

// What one recv() asks for when no large frame is under way. It is also all that a peer can
// make the server hold before its frame header has been checked.
constexpr size_t kReadChunk = 16 << 10;
// A buffer larger than this is freed once emptied, so that an idle connection does not keep
// the memory of the large value it once sent or fetched.
constexpr size_t kKeepCapacity = 64 << 10;

uint32_t announced_length(const uint8_t* header) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(header[6 + i]) << (8 * i);
  return v;
}

// The time a frame of `bytes` may take on top of the frame timeout: a second per MiB.
Milliseconds allowance(size_t bytes) {
  return Milliseconds(1000) * static_cast<int64_t>(bytes >> 20);
}

}  // namespace

// ---------------------------------------------------------------- ByteQueue

uint8_t* ByteQueue::reserve(size_t bytes) {
  if (capacity_ - end_ >= bytes) return storage_.get() + end_;
  const size_t used = size();
  if (capacity_ - used >= bytes) {
    std::memmove(storage_.get(), data(), used);
  } else {
    const size_t capacity = std::max(used + bytes, kReadChunk);
    std::unique_ptr<uint8_t[]> grown(new uint8_t[capacity]);
    if (used > 0) std::memcpy(grown.get(), data(), used);
    storage_ = std::move(grown);
    capacity_ = capacity;
  }
  begin_ = 0;
  end_ = used;
  return storage_.get() + end_;
}

void ByteQueue::append(const uint8_t* data, size_t bytes) {
  if (bytes == 0) return;
  std::memcpy(reserve(bytes), data, bytes);
  commit(bytes);
}

void ByteQueue::consume(size_t bytes) {
  begin_ += bytes;
  if (begin_ < end_) return;
  begin_ = end_ = 0;
  if (capacity_ > kKeepCapacity) {
    storage_.reset();
    capacity_ = 0;
  }
}

// ---------------------------------------------------------------- StoreConnection

StoreConnection::StoreConnection(uint64_t id, net::Socket socket, Clock::time_point now)
    : id_(id), socket_(std::move(socket)), peer_(socket_.peer_name()), accepted_(now) {}

bool StoreConnection::receive() {
  // A large frame under way is read in steps that double with what has arrived, never
  // straight to the size its header announces.
  size_t want = kReadChunk;
  if (input_.size() >= kHeaderBytes) {
    const size_t frame = kHeaderBytes + announced_length(input_.data());
    if (frame > input_.size() + kReadChunk) {
      want = std::min(frame - input_.size(), std::max(input_.size(), kReadChunk));
    }
  }
  uint8_t* space = input_.reserve(want);
  for (;;) {
    const ssize_t n = ::recv(socket_.fd(), space, want, MSG_DONTWAIT);
    if (n > 0) {
      input_.commit(static_cast<size_t>(n));
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    throw net::NetError(std::string("receive failed: ") + std::strerror(errno), errno);
  }
}

bool StoreConnection::next_frame(uint32_t max_payload, FrameView* frame) {
  if (input_.size() < kHeaderBytes) return false;
  const Header h = decode_header(input_.data(), max_payload);
  if (input_.size() - kHeaderBytes < h.length) return false;
  frame->op = h.op;
  frame->payload = input_.data() + kHeaderBytes;
  frame->size = h.length;
  return true;
}

void StoreConnection::consume_frame(const FrameView& frame) {
  input_.consume(kHeaderBytes + frame.size);
  frame_started_ = Clock::time_point::max();
}

void StoreConnection::note_input_time() {
  if (input_.empty()) {
    frame_started_ = Clock::time_point::max();
  } else if (frame_started_ == Clock::time_point::max()) {
    frame_started_ = Clock::now();
  }
}

void StoreConnection::send(Op op, const uint8_t* payload, size_t size) {
  uint8_t header[kHeaderBytes];
  encode_header(op, static_cast<uint32_t>(size), header);
  iovec parts[2] = {{header, kHeaderBytes}, {const_cast<uint8_t*>(payload), size}};
  iovec* left = parts;
  int count = 2;
  if (output_.empty() && socket_.write_available(left, count)) return;
  const bool was_empty = output_.empty();
  for (int i = 0; i < count; ++i) {
    output_.append(static_cast<const uint8_t*>(left[i].iov_base), left[i].iov_len);
  }
  if (was_empty) {
    output_since_ = Clock::now();
    output_allowance_bytes_ = output_.size();
  }
}

bool StoreConnection::flush() {
  iovec part{const_cast<uint8_t*>(output_.data()), output_.size()};
  iovec* left = &part;
  int count = 1;
  const bool done = socket_.write_available(left, count);
  output_.consume(output_.size() - (done ? 0 : left->iov_len));
  if (done) output_since_ = Clock::time_point::max();
  return done;
}

Clock::time_point StoreConnection::deadline(Milliseconds frame_timeout) const {
  auto at = Clock::time_point::max();
  if (!authenticated) at = accepted_ + frame_timeout;
  if (frame_started_ != Clock::time_point::max() && !parked) {
    const size_t length = input_.size() >= kHeaderBytes ? announced_length(input_.data()) : 0;
    at = std::min(at, frame_started_ + frame_timeout + allowance(length));
  }
  if (output_since_ != Clock::time_point::max()) {
    at = std::min(at, output_since_ + frame_timeout + allowance(output_allowance_bytes_));
  }
  return at;
}

std::string StoreConnection::stall_reason(Milliseconds frame_timeout) const {
  const std::string within = " within " + std::to_string(frame_timeout.count()) + " ms";
  if (output_pending()) return "it did not read its replies" + within + " (and 1 s per MiB)";
  if (!authenticated && input_.empty()) return "it sent no HELLO" + within;
  return "it stalled in the middle of a frame (not whole" + within + ", and 1 s per MiB)";
}

void StoreConnection::close() noexcept {
  socket_.shutdown();
  socket_.close();
}

}  // namespace cohort
