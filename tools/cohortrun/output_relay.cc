#include "output_relay.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace cohort::run {

OutputRelay::OutputRelay(bool prefix, size_t tail_lines)
    : prefix_(prefix), tail_lines_(tail_lines) {}

OutputRelay::~OutputRelay() {
  for (Stream& s : streams_) close(s);
}

void OutputRelay::add(int source, const std::string& label, int fd, std::FILE* sink) {
  streams_.push_back(Stream{source, prefix_ ? "[" + label + "] " : "", fd, sink, {}});
}

void OutputRelay::pump(Milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<Stream*> polled;
  for (Stream& s : streams_) {
    if (s.fd < 0) continue;
    fds.push_back(pollfd{s.fd, POLLIN, 0});
    polled.push_back(&s);
  }
  if (fds.empty()) {
    ::usleep(static_cast<useconds_t>(timeout.count()) * 1000);  // EINTR ends it early
    return;
  }
  if (::poll(fds.data(), fds.size(), static_cast<int>(timeout.count())) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) read_from(*polled[i]);
  }
}

void OutputRelay::drain(Deadline deadline) {
  auto open = [&] {
    return std::any_of(streams_.begin(), streams_.end(), [](const Stream& s) { return s.fd >= 0; });
  };
  while (open() && !deadline.expired()) pump(std::min(deadline.remaining(), Milliseconds(100)));
  for (Stream& s : streams_) close(s);
}

void OutputRelay::finish(int source, Deadline deadline) {
  auto open = [&] {
    return std::any_of(streams_.begin(), streams_.end(),
                       [&](const Stream& s) { return s.source == source && s.fd >= 0; });
  };
  // pump() serves every stream, so the other ranks' output keeps flowing meanwhile.
  while (open() && !deadline.expired()) pump(std::min(deadline.remaining(), Milliseconds(10)));
}

std::vector<std::string> OutputRelay::tail(int source, size_t lines) const {
  const auto it = tails_.find(source);
  if (it == tails_.end()) return {};
  const auto& kept = it->second;
  return {kept.end() - static_cast<std::ptrdiff_t>(std::min(lines, kept.size())), kept.end()};
}

void OutputRelay::read_from(Stream& stream) {
  char buffer[65536];
  const ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    close(stream);
    return;
  }
  stream.partial.append(buffer, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t end; (end = stream.partial.find('\n', start)) != std::string::npos; start = end + 1) {
    emit(stream, stream.partial.substr(start, end - start));
  }
  stream.partial.erase(0, start);
  std::fflush(stream.sink);
}

void OutputRelay::emit(Stream& stream, const std::string& line) {
  std::fwrite(stream.prefix.data(), 1, stream.prefix.size(), stream.sink);
  std::fwrite(line.data(), 1, line.size(), stream.sink);
  std::fputc('\n', stream.sink);
  auto& tail = tails_[stream.source];
  tail.push_back(line);
  if (tail.size() > tail_lines_) tail.pop_front();
}

// Ends a stream, giving a last line that had no '\n' its own.
void OutputRelay::close(Stream& stream) {
  if (stream.fd < 0) return;
  ::close(stream.fd);
  stream.fd = -1;
  if (!stream.partial.empty()) emit(stream, stream.partial);
  stream.partial.clear();
  std::fflush(stream.sink);
}

}  // namespace cohort::run
