#include "stoker/testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "stoker/core/fd_io.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"
#include "stoker/testing/loopback.h"

namespace stoker::testing {
namespace {

constexpr size_t kMaxHeadBytes = 64 << 10;

bool SendAll(int fd, std::string_view data) { return stoker::SendAll(fd, data) == 0; }

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A connected socket with a read buffer. Not thread-safe.
class Stream {
 public:
  explicit Stream(int fd) : fd_(fd) {}
  int fd() const { return fd_; }

  // Reads one message head, through the blank line ("\r\n\r\n"). False on EOF, error or an
  // oversized head.
  bool ReadHead(std::string* head) {
    while (true) {
      size_t end = buffer_.find("\r\n\r\n", pos_);
      if (end != std::string::npos) {
        *head = buffer_.substr(pos_, end + 4 - pos_);
        pos_ = end + 4;
        return true;
      }
      if (buffer_.size() - pos_ > kMaxHeadBytes || !Fill()) return false;
    }
  }

  // Reads one line including its "\r\n".
  bool ReadLine(std::string* line) {
    while (true) {
      size_t end = buffer_.find("\r\n", pos_);
      if (end != std::string::npos) {
        *line = buffer_.substr(pos_, end + 2 - pos_);
        pos_ = end + 2;
        return true;
      }
      if (buffer_.size() - pos_ > kMaxHeadBytes || !Fill()) return false;
    }
  }

  // Returns up to `max` bytes (buffered ones first); empty at EOF or on error.
  std::string_view ReadSome(size_t max) {
    if (pos_ == buffer_.size() && !Fill()) return {};
    size_t n = std::min(max, buffer_.size() - pos_);
    std::string_view out(buffer_.data() + pos_, n);
    pos_ += n;
    return out;
  }

 private:
  // Appends what the socket has; false on EOF or error.
  bool Fill() {
    if (pos_ == buffer_.size()) {
      buffer_.clear();
      pos_ = 0;
    }
    char chunk[64 << 10];
    while (true) {
      ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
  }

  int fd_;
  std::string buffer_;
  size_t pos_ = 0;
};

// A parsed message head. Header names are lower-cased; values are trimmed.
struct Head {
  std::string first_line;
  std::vector<std::pair<std::string, std::string>> headers;

  const std::string* Find(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return &v;
    }
    return nullptr;
  }
  bool HasToken(std::string_view name, std::string_view token) const {
    const std::string* value = Find(name);
    return value != nullptr &&
           absl::AsciiStrToLower(ToAbsl(*value)).find(std::string(token)) != std::string::npos;
  }
};

Head ParseHead(std::string_view text) {
  Head head;
  size_t eol = text.find("\r\n");
  head.first_line = std::string(text.substr(0, eol));
  text.remove_prefix(eol + 2);
  while (true) {
    eol = text.find("\r\n");
    if (eol == std::string_view::npos || eol == 0) break;
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    head.headers.emplace_back(
        absl::AsciiStrToLower(ToAbsl(line.substr(0, colon))),
        std::string(ToStd(absl::StripAsciiWhitespace(ToAbsl(line.substr(colon + 1))))));
  }
  return head;
}

// How a message body is delimited.
struct Framing {
  enum Kind { kNone, kLength, kChunked, kUntilClose } kind = kNone;
  uint64_t length = 0;
};

Framing RequestFraming(const Head& head) {
  if (head.HasToken("transfer-encoding", "chunked")) return {Framing::kChunked};
  if (const std::string* length = head.Find("content-length")) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(ToAbsl(*length), &n)) return {Framing::kLength, n};
  }
  return {Framing::kNone};
}

Framing ResponseFraming(const Head& head, int status, std::string_view request_method) {
  if (request_method == "HEAD" || status / 100 == 1 || status == 204 || status == 304) {
    return {Framing::kNone};
  }
  if (head.HasToken("transfer-encoding", "chunked")) return {Framing::kChunked};
  if (const std::string* length = head.Find("content-length")) {
    uint64_t n = 0;
    if (absl::SimpleAtoi(ToAbsl(*length), &n)) return {Framing::kLength, n};
  }
  return {Framing::kUntilClose};
}

// Receives body bytes exactly as they are on the wire; returns false to stop the relay.
using Sink = std::function<bool(std::string_view)>;

enum class RelayResult { kDone, kStopped, kReadError };

// Relays one body from `in` to `sink`, framing bytes (chunk sizes, trailers) included.
RelayResult RelayBody(Stream& in, const Framing& framing, const Sink& sink) {
  auto copy = [&](uint64_t n) {
    while (n > 0) {
      std::string_view data = in.ReadSome(std::min<uint64_t>(n, 1 << 20));
      if (data.empty()) return RelayResult::kReadError;
      if (!sink(data)) return RelayResult::kStopped;
      n -= data.size();
    }
    return RelayResult::kDone;
  };
  switch (framing.kind) {
    case Framing::kNone:
      return RelayResult::kDone;
    case Framing::kLength:
      return copy(framing.length);
    case Framing::kUntilClose:
      while (true) {
        std::string_view data = in.ReadSome(1 << 20);
        if (data.empty()) return RelayResult::kDone;
        if (!sink(data)) return RelayResult::kStopped;
      }
    case Framing::kChunked:
      while (true) {
        std::string line;
        if (!in.ReadLine(&line)) return RelayResult::kReadError;
        if (!sink(line)) return RelayResult::kStopped;
        uint64_t size = 0;
        std::string_view hex = std::string_view(line).substr(0, line.find_first_of(";\r"));
        if (!absl::SimpleHexAtoi(ToAbsl(hex), &size)) return RelayResult::kReadError;
        if (size == 0) {
          // Trailers, then the blank line.
          do {
            if (!in.ReadLine(&line)) return RelayResult::kReadError;
            if (!sink(line)) return RelayResult::kStopped;
          } while (line != "\r\n");
          return RelayResult::kDone;
        }
        RelayResult result = copy(size + 2);  // the data and its "\r\n"
        if (result != RelayResult::kDone) return result;
      }
  }
  return RelayResult::kDone;
}

std::string ErrorResponse(FaultKind kind) {
  const bool slow_down = kind == FaultKind::kSlowDown503;
  std::string body = StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>",
                            slow_down ? "SlowDown" : "InternalError", "</Code><Message>",
                            slow_down ? "Please reduce your request rate."
                                      : "We encountered an internal error. Please try again.",
                            "</Message><RequestId>stoker-fault-proxy</RequestId></Error>");
  return StrCat("HTTP/1.1 ", slow_down ? "503 Slow Down" : "500 Internal Server Error",
                "\r\nContent-Type: application/xml\r\nContent-Length: ", body.size(),
                "\r\nx-amz-request-id: stoker-fault-proxy\r\n\r\n", body);
}

// True if the idle keep-alive connection `fd` was closed by the peer (or has stray data).
bool IdleConnectionIsStale(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) != 0;
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kSlowDown503:
      return "SlowDown503";
    case FaultKind::kInternalError500:
      return "InternalError500";
    case FaultKind::kResetAfterBytes:
      return "ResetAfterBytes";
    case FaultKind::kTruncateBody:
      return "TruncateBody";
    case FaultKind::kStall:
      return "Stall";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(const Options& options) {
  in_addr upstream_addr{};
  if (inet_pton(AF_INET, options.upstream_host.c_str(), &upstream_addr) != 1) {
    return absl::InvalidArgumentError(StrCat("FaultProxy: upstream host '", options.upstream_host,
                                             "' is not a numeric IPv4 address"));
  }
  if (options.upstream_port <= 0 || options.upstream_port > 65535) {
    return absl::InvalidArgumentError(
        StrCat("FaultProxy: upstream port ", options.upstream_port, " is out of range"));
  }
  absl::StatusOr<LoopbackListener> listener = ListenOnLoopback(options.port);
  if (!listener.ok()) return Annotate(listener.status(), "FaultProxy");
  std::unique_ptr<FaultProxy> proxy(new FaultProxy(options, listener->fd, listener->port));
  proxy->accept_thread_ = StartThread("fault-accept", [p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

FaultProxy::FaultProxy(const Options& options, int listen_fd, int port)
    : options_(options),
      listen_fd_(listen_fd),
      port_(port),
      latency_(options.latency),
      rng_(options.seed) {}

FaultProxy::~FaultProxy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    for (const auto& [id, fds] : open_fds_) {
      for (int fd : fds) shutdown(fd, SHUT_RDWR);  // wakes recv()/send()
    }
  }
  accept_thread_.join();
  close(listen_fd_);
  std::map<uint64_t, std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(threads_);
  }
  for (auto& [id, thread] : threads) thread.join();
}

std::string FaultProxy::endpoint() const { return StrCat("http://127.0.0.1:", port_); }

void FaultProxy::AddRule(const FaultRule& rule) {
  absl::MutexLock lock(&mu_);
  rules_.push_back(rule);
}

void FaultProxy::ClearRules() {
  absl::MutexLock lock(&mu_);
  rules_.clear();
}

void FaultProxy::set_latency(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  latency_ = latency;
}

int64_t FaultProxy::requests_seen() const {
  absl::MutexLock lock(&mu_);
  return requests_seen_;
}

int64_t FaultProxy::faults_injected() const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (const auto& [kind, n] : faults_) total += n;
  return total;
}

int64_t FaultProxy::faults_injected(FaultKind kind) const {
  absl::MutexLock lock(&mu_);
  auto it = faults_.find(kind);
  return it == faults_.end() ? 0 : it->second;
}

std::optional<FaultRule> FaultProxy::ChooseFault(std::string_view method, std::string_view target) {
  absl::MutexLock lock(&mu_);
  ++requests_seen_;
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    if (!it->method.empty() && it->method != method) continue;
    if (target.find(it->path_substring) == std::string_view::npos) continue;
    bool fire;
    if (it->count > 0) {
      fire = true;
    } else {
      fire = std::uniform_real_distribution<double>(0, 1)(rng_) < it->probability;
    }
    if (!fire) continue;
    FaultRule chosen = *it;
    if (it->count > 0 && --it->count == 0) rules_.erase(it);
    ++faults_[chosen.fault];
    return chosen;
  }
  return std::nullopt;
}

bool FaultProxy::Sleep(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  if (duration > absl::ZeroDuration()) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), duration);
  }
  return !stopping_;
}

int FaultProxy::ConnectUpstream() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, options_.upstream_host.c_str(), &addr.sin_addr);
  addr.sin_port = htons(static_cast<uint16_t>(options_.upstream_port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    SPDLOG_WARN("fault proxy: cannot connect to upstream {}:{}: {}", options_.upstream_host,
                options_.upstream_port, std::strerror(errno));
    close(fd);
    return -1;
  }
  SetNoDelay(fd);
  return fd;
}

void FaultProxy::JoinFinishedThreads() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t id : finished_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    finished_.clear();
  }
  for (std::thread& thread : done) thread.join();
}

void FaultProxy::AcceptLoop() {
  uint64_t next_id = 0;
  while (true) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (errno == EMFILE || errno == ENFILE) continue;  // transient; keep serving
      SPDLOG_WARN("fault proxy: accept failed: {}", std::strerror(errno));
      return;
    }
    JoinFinishedThreads();
    SetNoDelay(fd);
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    uint64_t id = next_id++;
    open_fds_[id] = {fd};
    threads_[id] = StartThread("fault-conn", [this, fd, id] { ServeConnection(fd, id); });
  }
}

void FaultProxy::ServeConnection(int client_fd, uint64_t id) {
  Stream client(client_fd);
  std::unique_ptr<Stream> upstream;

  // How the connection to the client ends.
  enum class End { kClose, kReset };
  End end = End::kClose;

  auto close_upstream = [&] {
    if (upstream == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      auto& fds = open_fds_[id];
      fds.erase(std::remove(fds.begin(), fds.end(), upstream->fd()), fds.end());
    }
    close(upstream->fd());
    upstream.reset();
  };
  auto open_upstream = [&]() -> bool {
    if (upstream != nullptr && IdleConnectionIsStale(upstream->fd())) close_upstream();
    if (upstream != nullptr) return true;
    int fd = ConnectUpstream();
    if (fd < 0) return false;
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(fd);
      return false;
    }
    open_fds_[id].push_back(fd);
    upstream = std::make_unique<Stream>(fd);
    return true;
  };

  while (true) {
    std::string head_text;
    if (!client.ReadHead(&head_text)) break;
    Head request = ParseHead(head_text);
    std::string_view line = request.first_line;
    size_t sp1 = line.find(' ');
    size_t sp2 = line.rfind(' ');
    if (sp1 == std::string_view::npos || sp2 <= sp1) break;  // not HTTP; hang up
    std::string method(line.substr(0, sp1));
    std::string target(line.substr(sp1 + 1, sp2 - sp1 - 1));
    bool client_wants_close =
        request.HasToken("connection", "close") || line.substr(sp2 + 1) == "HTTP/1.0";
    Framing request_framing = RequestFraming(request);

    // The proxy answers "Expect: 100-continue" itself and does not forward it, so that a fault
    // that never reaches the upstream still gets the body off the wire.
    bool expects_continue = request.HasToken("expect", "100-continue");
    std::string forward_head = request.first_line + "\r\n";
    for (const auto& [name, value] : request.headers) {
      if (name == "expect") continue;
      forward_head += StrCat(name, ": ", value, "\r\n");
    }
    forward_head += "\r\n";
    if (expects_continue && !SendAll(client_fd, "HTTP/1.1 100 Continue\r\n\r\n")) break;

    std::optional<FaultRule> fault = ChooseFault(method, target);
    absl::Duration latency;
    {
      absl::MutexLock lock(&mu_);
      latency = latency_;
    }

    if (fault &&
        (fault->fault == FaultKind::kSlowDown503 || fault->fault == FaultKind::kInternalError500)) {
      if (RelayBody(client, request_framing, [](std::string_view) { return true; }) !=
          RelayResult::kDone) {
        break;
      }
      if (!Sleep(latency) || !SendAll(client_fd, ErrorResponse(fault->fault))) break;
      if (client_wants_close) break;
      continue;
    }
    if (fault && fault->fault == FaultKind::kStall && !Sleep(fault->stall)) break;

    if (!open_upstream()) {
      // 502 so the client sees a clear failure instead of a silent hang-up.
      SendAll(client_fd,
              "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      break;
    }
    const int upstream_fd = upstream->fd();
    RelayResult sent =
        SendAll(upstream_fd, forward_head)
            ? RelayBody(client, request_framing,
                        [&](std::string_view data) { return SendAll(upstream_fd, data); })
            : RelayResult::kStopped;
    if (sent == RelayResult::kReadError) break;  // the client went away mid-request
    // The upstream may answer early and stop reading (a 403 to a large PUT): relay its answer,
    // then close, since the rest of the client's body is still unread.
    const bool request_cut_short = sent == RelayResult::kStopped;

    // The response head; interim 1xx responses are dropped (the proxy sent its own 100).
    Head response;
    int status = 0;
    std::string response_text;
    do {
      if (!upstream->ReadHead(&response_text)) {
        response_text.clear();
        break;
      }
      response = ParseHead(response_text);
      std::string_view status_line = response.first_line;
      size_t sp = status_line.find(' ');
      if (sp == std::string_view::npos ||
          !absl::SimpleAtoi(ToAbsl(status_line.substr(sp + 1, 3)), &status)) {
        status = 0;
        break;
      }
    } while (status / 100 == 1);
    if (status == 0) break;  // the upstream hung up or sent garbage: hang up too
    Framing response_framing = ResponseFraming(response, status, method);

    if (!Sleep(latency) || !SendAll(client_fd, response_text)) break;

    const bool cuts_body = fault && (fault->fault == FaultKind::kResetAfterBytes ||
                                     fault->fault == FaultKind::kTruncateBody);
    int64_t budget = cuts_body ? fault->after_bytes : -1;
    RelayResult relayed = RelayBody(*upstream, response_framing, [&](std::string_view data) {
      if (budget < 0) return SendAll(client_fd, data);
      size_t n = std::min<size_t>(data.size(), static_cast<size_t>(budget));
      budget -= static_cast<int64_t>(n);
      return SendAll(client_fd, data.substr(0, n)) && n == data.size();
    });
    if (cuts_body) {
      // Whether or not the body was longer than after_bytes, the connection ends here.
      end = fault->fault == FaultKind::kResetAfterBytes ? End::kReset : End::kClose;
      break;
    }
    if (relayed != RelayResult::kDone || request_cut_short) break;
    if (response_framing.kind == Framing::kUntilClose) break;  // the close delimits the body
    if (response.HasToken("connection", "close")) close_upstream();
    if (client_wants_close) break;
  }

  close_upstream();
  {
    absl::MutexLock lock(&mu_);
    open_fds_.erase(id);
    finished_.push_back(id);
  }
  if (end == End::kReset) {
    linger reset{1, 0};  // close() then sends RST instead of FIN
    setsockopt(client_fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  } else {
    shutdown(client_fd, SHUT_WR);
  }
  close(client_fd);
}

}  // namespace stoker::testing
