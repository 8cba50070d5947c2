#include "client/http_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

namespace kvgov::client::internal {
namespace {

using std::chrono::steady_clock;

bool IsRequestLineSafe(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

bool ContainsTokenIgnoreCase(std::string_view list, std::string_view token) {
  // Connection: keep-alive, close -- a comma-separated token list.
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (EqualsIgnoreCase(item, token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

int RemainingMs(steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

std::string Errno(std::string_view what) { return std::string(what) + ": " + std::strerror(errno); }

// A parsed status line and the headers kvgov's answer handling needs.
struct ResponseHead {
  int status = 0;
  bool http11 = false;
  std::optional<size_t> content_length;
  bool chunked = false;
  bool close = false;
  bool keep_alive = false;  // HTTP/1.0 asked for it
};

Result<ResponseHead> ParseHead(std::string_view head) {
  ResponseHead parsed;
  size_t eol = head.find("\r\n");
  const std::string_view status_line = head.substr(0, eol);
  // "HTTP/1.1 200 OK"
  if (status_line.size() < 12 || status_line.substr(0, 7) != "HTTP/1." ||
      (status_line[7] != '0' && status_line[7] != '1') || status_line[8] != ' ') {
    return Status::Unavailable("answer is not HTTP/1.x");
  }
  parsed.http11 = status_line[7] == '1';
  const std::string_view code = status_line.substr(9, 3);
  if (std::from_chars(code.data(), code.data() + 3, parsed.status).ptr != code.data() + 3 ||
      parsed.status < 100 || parsed.status > 599) {
    return Status::Unavailable("answer has a bad status code");
  }
  std::string_view rest = eol == std::string_view::npos ? "" : head.substr(eol + 2);
  while (!rest.empty()) {
    eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? "" : rest.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return Status::Unavailable("answer has a bad header line");
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (EqualsIgnoreCase(name, "content-length")) {
      size_t length = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
      if (ec != std::errc() || end != value.data() + value.size() ||
          (parsed.content_length && *parsed.content_length != length)) {
        return Status::Unavailable("answer has a bad Content-Length");
      }
      parsed.content_length = length;
    } else if (EqualsIgnoreCase(name, "transfer-encoding")) {
      // Only "chunked" (last) is meaningful to us; anything else we cannot
      // frame, so the connection cannot be trusted for a next request.
      if (!ContainsTokenIgnoreCase(value, "chunked")) {
        return Status::Unavailable("answer has an unsupported Transfer-Encoding");
      }
      parsed.chunked = true;
    } else if (EqualsIgnoreCase(name, "connection")) {
      parsed.close = ContainsTokenIgnoreCase(value, "close");
      parsed.keep_alive = ContainsTokenIgnoreCase(value, "keep-alive");
    }
  }
  return parsed;
}

}  // namespace

Result<HttpEndpoint> ParseHttpUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.size() < kScheme.size() || !EqualsIgnoreCase(url.substr(0, kScheme.size()), kScheme)) {
    if (url.size() >= 8 && EqualsIgnoreCase(url.substr(0, 8), "https://")) {
      return Status::InvalidArgument(
          "url: https is not supported by the SDK's built-in client; reach kvgov through a "
          "local TLS proxy, or write a spool (SpoolSink)");
    }
    return Status::InvalidArgument("url: want http://HOST[:PORT][/PREFIX]");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return Status::InvalidArgument("url: user info is not supported; pass a bearer token");
  }
  if (path.find_first_of("?#") != std::string_view::npos || !IsRequestLineSafe(path)) {
    return Status::InvalidArgument(
        "url: the path must be a plain prefix (no query, fragment, "
        "spaces or control bytes)");
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);

  HttpEndpoint endpoint;
  std::string_view port = "80";
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos)
      return Status::InvalidArgument("url: unclosed '[' in host");
    endpoint.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Status::InvalidArgument("url: junk after ']'");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    endpoint.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (endpoint.host.empty() || !IsRequestLineSafe(endpoint.host)) {
    return Status::InvalidArgument("url: missing or bad host");
  }
  unsigned port_number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || port_number == 0 ||
      port_number > 65535) {
    return Status::InvalidArgument("url: port must be in 1..65535");
  }
  endpoint.port = std::to_string(port_number);
  const bool v6 = endpoint.host.find(':') != std::string::npos;
  endpoint.host_header = (v6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" + endpoint.port;
  endpoint.path_prefix = std::string(path);
  return endpoint;
}

Interrupter::Interrupter() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
  }
}

Interrupter::~Interrupter() {
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
}

void Interrupter::Interrupt() noexcept {
  interrupted_.store(true, std::memory_order_release);
  // Never drained: once interrupted the read end stays readable, which is
  // what a sticky interrupt needs. A full pipe (EAGAIN) is as good.
  if (write_fd_ >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t ignored = ::write(write_fd_, &byte, 1);
  }
}

HttpConnection::HttpConnection(HttpEndpoint endpoint, HttpTimeouts timeouts,
                               const Interrupter* interrupter)
    : endpoint_(std::move(endpoint)), timeouts_(timeouts), interrupter_(interrupter) {}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
}

Status HttpConnection::Wait(short events, Deadline deadline) {
  pollfd fds[2] = {{fd_, events, 0}, {interrupter_ ? interrupter_->fd() : -1, POLLIN, 0}};
  for (;;) {
    if (interrupter_ && interrupter_->interrupted()) return Status::Unavailable("interrupted");
    const int timeout = RemainingMs(deadline);
    const int ready = ::poll(fds, fds[1].fd >= 0 ? 2 : 1, timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable(Errno("poll"));
    }
    if (fds[1].revents != 0) return Status::Unavailable("interrupted");
    if (fds[0].revents != 0) return Status::Ok();
    if (timeout == 0 || steady_clock::now() >= deadline) {
      return Status::Unavailable("timed out");
    }
  }
}

Status HttpConnection::Connect(Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  const int resolved =
      ::getaddrinfo(endpoint_.host.c_str(), endpoint_.port.c_str(), &hints, &addresses);
  if (resolved != 0) {
    return Status::Unavailable("resolve " + endpoint_.host + ": " + ::gai_strerror(resolved));
  }
  Status last = Status::Unavailable("resolve " + endpoint_.host + ": no address");
  for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd_ < 0) {
      last = Status::Unavailable(Errno("socket"));
      continue;
    }
    // One batch is one write and its answer one read: without NODELAY a
    // body split over two segments waits for the peer's delayed ACK.
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd_, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      last = Wait(POLLOUT, deadline);
      if (last.ok()) {
        int error = 0;
        socklen_t length = sizeof(error);
        ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error == 0) break;
        last =
            Status::Unavailable("connect " + endpoint_.host_header + ": " + std::strerror(error));
      }
    } else {
      last = Status::Unavailable(Errno("connect " + endpoint_.host_header));
    }
    ::close(fd_);
    fd_ = -1;
  }
  ::freeaddrinfo(addresses);
  return fd_ >= 0 ? Status::Ok() : last;
}

Status HttpConnection::SendAll(std::string_view head, std::string_view body, Deadline deadline,
                               Failure* failure) {
  iovec parts[2] = {{const_cast<char*>(head.data()), head.size()},
                    {const_cast<char*>(body.data()), body.size()}};
  size_t first = 0;
  while (first < 2) {
    msghdr message{};
    message.msg_iov = parts + first;
    message.msg_iovlen = 2 - first;
    // MSG_NOSIGNAL: a peer that closed must be an error here, not a SIGPIPE
    // that kills the host process.
    const ssize_t sent = ::sendmsg(fd_, &message, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        KVGOV_RETURN_IF_ERROR(Wait(POLLOUT, deadline));
        continue;
      }
      *failure = (errno == EPIPE || errno == ECONNRESET) ? Failure::kStale : Failure::kOther;
      return Status::Unavailable(Errno("send"));
    }
    size_t left = static_cast<size_t>(sent);
    while (first < 2 && left >= parts[first].iov_len) {
      left -= parts[first].iov_len;
      ++first;
    }
    if (first < 2) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + left;
      parts[first].iov_len -= left;
    }
  }
  return Status::Ok();
}

Result<size_t> HttpConnection::ReadSome(Deadline deadline) {
  char chunk[16384];
  for (;;) {
    const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (got > 0) {
      buffer_.append(chunk, static_cast<size_t>(got));
      return static_cast<size_t>(got);
    }
    // A reset is an end of stream like any other: before the first byte of
    // an answer both mean a kept-alive connection the server had dropped.
    if (got == 0 || errno == ECONNRESET) return size_t{0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      KVGOV_RETURN_IF_ERROR(Wait(POLLIN, deadline));
      continue;
    }
    return Status::Unavailable(Errno("recv"));
  }
}

Result<HttpResponse> HttpConnection::ReadResponse(Deadline deadline, Failure* failure) {
  bool got_any = false;
  for (;;) {  // past 1xx interim answers
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (buffer_.size() > kMaxResponseHeaderBytes) {
        return Status::Unavailable("answer headers over " +
                                   std::to_string(kMaxResponseHeaderBytes) + " bytes");
      }
      KVGOV_ASSIGN_OR_RETURN(const size_t got, ReadSome(deadline));
      if (got == 0) {
        // A kept-alive connection the server closed while idle ends before
        // a single byte of answer; a timeout never counts as that.
        if (!got_any) *failure = Failure::kStale;
        return Status::Unavailable("connection closed before the answer");
      }
      got_any = true;
    }
    if (head_end > kMaxResponseHeaderBytes) {
      return Status::Unavailable("answer headers over " + std::to_string(kMaxResponseHeaderBytes) +
                                 " bytes");
    }
    KVGOV_ASSIGN_OR_RETURN(const ResponseHead head,
                           ParseHead(std::string_view(buffer_).substr(0, head_end)));
    buffer_.erase(0, head_end + 4);
    if (head.status < 200) continue;

    HttpResponse response;
    response.status = head.status;
    bool keep = head.http11 ? !head.close : head.keep_alive;
    if (head.chunked) {
      for (;;) {
        size_t line_end;
        while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
          if (buffer_.size() > 1024) return Status::Unavailable("answer has a bad chunk header");
          KVGOV_ASSIGN_OR_RETURN(size_t got, ReadSome(deadline));
          if (got == 0) return Status::Unavailable("connection closed inside the answer");
        }
        size_t size = 0;
        const char* begin = buffer_.data();
        auto [end, ec] = std::from_chars(begin, begin + line_end, size, 16);
        if (ec != std::errc() || end == begin) {
          return Status::Unavailable("answer has a bad chunk size");
        }
        if (size > kMaxResponseBodyBytes - response.body.size()) {
          return Status::Unavailable("answer body over " + std::to_string(kMaxResponseBodyBytes) +
                                     " bytes");
        }
        buffer_.erase(0, line_end + 2);
        if (size == 0) {
          // Trailers, then the blank line that ends the message.
          size_t trailer_end;
          while ((trailer_end = buffer_.find("\r\n")) != 0) {
            if (trailer_end != std::string::npos) {
              buffer_.erase(0, trailer_end + 2);
              continue;
            }
            if (buffer_.size() > kMaxResponseHeaderBytes) {
              return Status::Unavailable("answer trailers too long");
            }
            KVGOV_ASSIGN_OR_RETURN(size_t got, ReadSome(deadline));
            if (got == 0) return Status::Unavailable("connection closed inside the answer");
          }
          buffer_.erase(0, 2);
          break;
        }
        while (buffer_.size() < size + 2) {
          KVGOV_ASSIGN_OR_RETURN(size_t got, ReadSome(deadline));
          if (got == 0) return Status::Unavailable("connection closed inside the answer");
        }
        if (buffer_.compare(size, 2, "\r\n") != 0) {
          return Status::Unavailable("answer has a bad chunk terminator");
        }
        response.body.append(buffer_, 0, size);
        buffer_.erase(0, size + 2);
      }
    } else if (head.content_length) {
      if (*head.content_length > kMaxResponseBodyBytes) {
        return Status::Unavailable("answer body over " + std::to_string(kMaxResponseBodyBytes) +
                                   " bytes");
      }
      while (buffer_.size() < *head.content_length) {
        KVGOV_ASSIGN_OR_RETURN(size_t got, ReadSome(deadline));
        if (got == 0) return Status::Unavailable("connection closed inside the answer");
      }
      response.body = buffer_.substr(0, *head.content_length);
      buffer_.erase(0, *head.content_length);
    } else if (head.status == 204 || head.status == 304) {
      // No body by definition.
    } else {
      // Framed by the end of the connection.
      for (;;) {
        if (buffer_.size() > kMaxResponseBodyBytes) {
          return Status::Unavailable("answer body over " + std::to_string(kMaxResponseBodyBytes) +
                                     " bytes");
        }
        KVGOV_ASSIGN_OR_RETURN(size_t got, ReadSome(deadline));
        if (got == 0) break;
      }
      response.body = std::move(buffer_);
      buffer_.clear();
      keep = false;
    }
    // Bytes past the answer mean the framing is not what we think; the
    // connection cannot be trusted for the next request.
    if (!keep || !buffer_.empty()) Close();
    return response;
  }
}

Result<HttpResponse> HttpConnection::Post(std::string_view path, std::string_view headers,
                                          std::string_view body) {
  const Deadline deadline = steady_clock::now() + timeouts_.request;
  std::string head;
  head.reserve(256 + headers.size());
  head += "POST ";
  head += endpoint_.path_prefix;
  head += path;
  head += " HTTP/1.1\r\nHost: ";
  head += endpoint_.host_header;
  head += "\r\nContent-Length: ";
  head += std::to_string(body.size());
  head += "\r\n";
  head += headers;
  head += "\r\n";

  for (int attempt = 0;; ++attempt) {
    const bool reused = fd_ >= 0;
    if (!reused) {
      Status connected = Connect(std::min(deadline, steady_clock::now() + timeouts_.connect));
      if (!connected.ok()) {
        Close();
        return connected;
      }
    }
    Failure failure = Failure::kNone;
    Status sent = SendAll(head, body, deadline, &failure);
    Result<HttpResponse> response =
        sent.ok() ? ReadResponse(deadline, &failure) : Result<HttpResponse>(sent);
    if (response.ok()) return response;
    Close();
    if (!(reused && failure == Failure::kStale && attempt == 0)) {
      return Status::Unavailable("POST " + endpoint_.host_header + endpoint_.path_prefix +
                                 std::string(path) + ": " + response.status().message());
    }
  }
}

}  // namespace kvgov::client::internal
