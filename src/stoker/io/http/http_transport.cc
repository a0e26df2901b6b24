#include "stoker/io/http/http_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "stoker/core/blocking.h"
#include "stoker/core/buffer_pool.h"
#include "stoker/core/logging.h"
#include "stoker/core/metrics.h"
#include "stoker/core/strings.h"
#include "stoker/core/thread.h"

namespace stoker::io {

struct HttpTransport::Transfer {
  HttpRequest request;
  HttpCallback done;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  // The body: into a block of the buffer pool when the response announces its length (so a steady
  // stream of responses reuses mapped memory), else into `body`.
  BufferPool::Block pooled;
  size_t pooled_size = 0;
  uint64_t announced_length = 0;  // Content-Length of the current response (0: none)
  std::string body;
  // Whether the current response's body goes to request.body_sink (decided at its first byte).
  enum class Sink { kUndecided, kYes, kNo } sink = Sink::kUndecided;
  uint64_t sunk_bytes = 0;
  HttpHeaders headers;
  char error[CURL_ERROR_SIZE] = {0};

  ~Transfer() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (header_list != nullptr) curl_slist_free_all(header_list);
  }
};

namespace {

// One attempt in the process's /metrics (docs/operations.md): by method and outcome (the HTTP
// status class, or "error" for a connection failure or timeout).
void RecordMetrics(CURL* easy, const std::string& method,
                   const absl::StatusOr<HttpResponse>& result) {
  MetricsRegistry& m = MetricsRegistry::Default();
  std::string outcome = result.ok() ? StrCat(result->status / 100, "xx") : "error";
  m.GetCounter("stoker_store_requests_total",
               "HTTP requests (attempts) to object stores, by method and outcome",
               {{"method", method}, {"outcome", outcome}})
      .Increment();
  if (!result.ok()) return;
  m.GetCounter("stoker_store_received_bytes_total", "Response body bytes from object stores",
               {{"method", method}})
      .Increment(static_cast<double>(result->body.size() + result->sunk_bytes));
  curl_off_t total_us = 0, first_byte_us = 0;
  curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME_T, &total_us);
  curl_easy_getinfo(easy, CURLINFO_STARTTRANSFER_TIME_T, &first_byte_us);
  m.GetHistogram("stoker_store_request_seconds",
                 "Object-store request time, connection to last byte", LatencyBucketsSeconds(),
                 {{"method", method}})
      .Observe(static_cast<double>(total_us) / 1e6);
  m.GetHistogram("stoker_store_first_byte_seconds", "Object-store request time to the first byte",
                 LatencyBucketsSeconds(), {{"method", method}})
      .Observe(static_cast<double>(first_byte_us) / 1e6);
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<HttpTransport::Transfer*>(user);
  std::string_view line(data, size * count);
  size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name = absl::AsciiStrToLower(ToAbsl(line.substr(0, colon)));
    std::string value(absl::StripAsciiWhitespace(ToAbsl(line.substr(colon + 1))));
    if (name == "content-length") {
      uint64_t length = 0;
      // The body block is reserved at the first byte (unless the body goes to a sink), so that
      // it is received without reallocations; capped so that a lying header cannot make us
      // allocate absurd memory.
      if (absl::SimpleAtoi(value, &length) && length <= (uint64_t{1} << 30)) {
        transfer->announced_length = length;
      }
    }
    transfer->headers.emplace_back(std::move(name), std::move(value));
  } else if (line.starts_with("HTTP/")) {
    transfer->headers.clear();  // a new response (after 100 Continue or a redirect)
    transfer->pooled = BufferPool::Block();
    transfer->pooled_size = 0;
    transfer->announced_length = 0;
    transfer->sink = HttpTransport::Transfer::Sink::kUndecided;
    transfer->sunk_bytes = 0;
  }
  return size * count;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  using Sink = HttpTransport::Transfer::Sink;
  auto* t = static_cast<HttpTransport::Transfer*>(user);
  const size_t n = size * count;
  if (t->sink == Sink::kUndecided) {
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    BodySink* sink = t->request.body_sink.get();
    t->sink = sink != nullptr && sink->Accept(static_cast<int>(status), t->headers) ? Sink::kYes
                                                                                    : Sink::kNo;
    if (t->sink == Sink::kNo && t->announced_length > 0 && t->body.empty()) {
      t->pooled = BufferPool::Default().Get(t->announced_length);
      t->pooled_size = 0;
    }
  }
  if (t->sink == Sink::kYes) {
    if (!t->request.body_sink->Write(std::string_view(data, n))) return 0;  // CURLE_WRITE_ERROR
    t->sunk_bytes += n;
    return n;
  }
  if (t->pooled.data() != nullptr) {
    if (t->pooled_size + n <= t->pooled.capacity()) {
      std::memcpy(t->pooled.data() + t->pooled_size, data, n);
      t->pooled_size += n;
      return n;
    }
    // More than announced (the length check fails it later): keep every byte anyway.
    t->body.assign(reinterpret_cast<const char*>(t->pooled.data()), t->pooled_size);
    t->pooled = BufferPool::Block();
  }
  t->body.append(data, n);
  return n;
}

absl::Status CurlError(CURLcode code, const char* detail, const std::string& url) {
  std::string reason = detail[0] != '\0' ? detail : curl_easy_strerror(code);
  std::string message = StrCat(url, ": ", reason);
  switch (code) {
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(message);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnavailableError(message);
  }
}

int MaxInFlightFromEnvironment() {
  const char* value = std::getenv("STOKER_MAX_REQUESTS");
  int n = 0;
  if (value != nullptr && absl::SimpleAtoi(value, &n) && n > 0) return n;
  return 16;
}

}  // namespace

std::string HttpResponse::Header(std::string_view name) const {
  for (auto it = headers.rbegin(); it != headers.rend(); ++it) {
    if (it->first == name) return it->second;
  }
  return "";
}

HttpTransport::HttpTransport(int max_in_flight) : max_in_flight_(std::max(1, max_in_flight)) {
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  multi_ = curl_multi_init();
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(max_in_flight_ * 2));
  loop_ = StartThread("http-transport", [this] { Loop(); });
}

HttpTransport::~HttpTransport() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  curl_multi_wakeup(multi_);
  loop_.join();
  curl_multi_cleanup(multi_);
}

HttpTransport& HttpTransport::Default() {
  static auto* transport = new HttpTransport(MaxInFlightFromEnvironment());
  return *transport;
}

void HttpTransport::Send(HttpRequest request, HttpCallback done) {
  auto transfer = std::make_unique<Transfer>();
  transfer->request = std::move(request);
  transfer->done = std::move(done);
  {
    absl::MutexLock lock(&mu_);
    queued_.push_back(std::move(transfer));
  }
  curl_multi_wakeup(multi_);
}

absl::StatusOr<HttpResponse> HttpTransport::SendSync(HttpRequest request) {
  return Await<absl::StatusOr<HttpResponse>>(
      [&](auto done) { Send(std::move(request), std::move(done)); });
}

HttpTransportStats HttpTransport::stats() {
  absl::MutexLock lock(&mu_);
  HttpTransportStats s = stats_;
  s.queued = static_cast<int>(queued_.size());
  return s;
}

void HttpTransport::Start(std::unique_ptr<Transfer> transfer) {
  Transfer* t = transfer.get();
  const HttpRequest& r = t->request;
  if (idle_easy_.empty()) {
    t->easy = curl_easy_init();
  } else {
    t->easy = idle_easy_.back();
    idle_easy_.pop_back();
    curl_easy_reset(t->easy);
  }
  CURL* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  // Send the path exactly as built: S3 signs it, and curl would otherwise squash "/./" and "/../".
  curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024);  // fewer, larger body callbacks
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  // A transfer that moves less than 1 byte/s for 30 s is stalled: fail it so it can be retried.
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 30L);
  if (r.timeout > absl::ZeroDuration()) {
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(absl::ToInt64Milliseconds(r.timeout)));
  }
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
  if (r.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (r.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (r.method == "PUT" || r.method == "POST") {
    // POSTFIELDS sends the body from our buffer without copying it; the method is set above.
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.empty() ? "" : r.body.chars());
    t->header_list = curl_slist_append(t->header_list, "Content-Type: application/octet-stream");
  }
  t->header_list = curl_slist_append(t->header_list, "Expect:");  // no 100-continue round trip
  for (const auto& [name, value] : r.headers) {
    t->header_list = curl_slist_append(t->header_list, StrCat(name, ": ", value).c_str());
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->header_list);
  curl_multi_add_handle(multi_, e);
  running_.push_back(std::move(transfer));
}

void HttpTransport::Finish(void* easy, int curl_code) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [easy](const auto& t) { return t->easy == easy; });
  std::unique_ptr<Transfer> t = std::move(*it);
  running_.erase(it);
  curl_multi_remove_handle(multi_, t->easy);
  absl::StatusOr<HttpResponse> result;
  if (curl_code != CURLE_OK) {
    result = CurlError(static_cast<CURLcode>(curl_code), t->error, t->request.url);
  } else {
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    HttpResponse response;
    response.status = static_cast<int>(status);
    response.headers = std::move(t->headers);
    response.body = t->pooled.data() != nullptr ? t->pooled.Share(0, t->pooled_size)
                                                : Buffer::FromString(std::move(t->body));
    response.body_sunk = t->sink == Transfer::Sink::kYes;
    response.sunk_bytes = t->sunk_bytes;
    result = std::move(response);
  }
  {
    absl::MutexLock lock(&mu_);
    --stats_.in_flight;
    if (!result.ok()) ++stats_.transport_errors;
  }
  RecordMetrics(t->easy, t->request.method, result);
  if (idle_easy_.size() < static_cast<size_t>(max_in_flight_)) {
    idle_easy_.push_back(std::exchange(t->easy, nullptr));
  }
  std::move(t->done)(std::move(result));
}

void HttpTransport::Loop() {
  while (true) {
    absl::Time next_due = absl::InfiniteFuture();
    std::vector<std::unique_ptr<Transfer>> to_start;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      absl::Time now = absl::Now();
      for (auto it = queued_.begin();
           it != queued_.end() && running_.size() + to_start.size() < size_t(max_in_flight_);) {
        if ((*it)->request.not_before <= now) {
          to_start.push_back(std::move(*it));
          it = queued_.erase(it);
        } else {
          next_due = std::min(next_due, (*it)->request.not_before);
          ++it;
        }
      }
      stats_.in_flight += static_cast<int>(to_start.size());
      stats_.requests_sent += to_start.size();
    }
    for (auto& t : to_start) Start(std::move(t));

    int still_running = 0;
    curl_multi_perform(multi_, &still_running);
    int messages = 0;
    bool freed_slot = false;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &messages)) {
      if (msg->msg == CURLMSG_DONE) {
        Finish(msg->easy_handle, msg->data.result);
        freed_slot = true;
      }
    }
    int wait_ms = 1000;
    if (freed_slot) {
      wait_ms = 0;  // a queued request may start in the slot just freed: do not sleep
    } else if (next_due != absl::InfiniteFuture()) {
      wait_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(next_due - absl::Now()) + 1, 0, 1000));
    }
    curl_multi_poll(multi_, nullptr, 0, wait_ms, nullptr);
  }
  // Shutting down: fail what is left so no caller waits forever.
  for (auto& t : running_) {
    curl_multi_remove_handle(multi_, t->easy);
    std::move(t->done)(absl::CancelledError(StrCat(t->request.url, ": transport shut down")));
  }
  running_.clear();
  for (void* easy : idle_easy_) curl_easy_cleanup(easy);
  idle_easy_.clear();
  std::deque<std::unique_ptr<Transfer>> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(queued_);
  }
  for (auto& t : left) {
    std::move(t->done)(absl::CancelledError(StrCat(t->request.url, ": transport shut down")));
  }
}

namespace {

// Shared state of one SendWithRetries call across its attempts.
struct RetryCall {
  HttpTransport* transport;
  RetryPolicy policy;
  RequestFactory make_request;
  ResponseCheck check;
  HttpCallback done;
  int attempt = 0;
};

absl::Status CheckBodyLength(const HttpResponse& response, const std::string& url) {
  if (response.status != 200 && response.status != 206) return absl::OkStatus();
  std::string announced = response.Header("content-length");
  uint64_t length = 0;
  if (announced.empty() || !absl::SimpleAtoi(announced, &length)) return absl::OkStatus();
  if (response.body.size() + response.sunk_bytes != length) {
    return absl::DataLossError(StrCat(url, ": response body has ",
                                      response.body.size() + response.sunk_bytes,
                                      " bytes but Content-Length announced ", length));
  }
  return absl::OkStatus();
}

void Attempt(std::shared_ptr<RetryCall> call, absl::Time not_before) {
  ++call->attempt;
  absl::StatusOr<HttpRequest> request = call->make_request(call->attempt);
  if (!request.ok()) {
    std::move(call->done)(request.status());
    return;
  }
  request->not_before = not_before;
  std::string url = request->url;
  bool has_body = request->method != "HEAD";
  call->transport->Send(
      *std::move(request), [call, url, has_body](absl::StatusOr<HttpResponse> response) mutable {
        absl::StatusOr<HttpResponse> result = std::move(response);
        if (result.ok()) {
          absl::Status length_ok = has_body ? CheckBodyLength(*result, url) : absl::OkStatus();
          result = length_ok.ok() ? call->check(*std::move(result)) : length_ok;
        }
        if (result.ok() || !IsRetryable(result.status()) ||
            call->attempt >= call->policy.max_attempts) {
          if (!result.ok() && call->attempt > 1) {
            result = absl::Status(
                result.status().code(),
                StrCat(result.status().message(), " (after ", call->attempt, " attempts)"));
          }
          std::move(call->done)(std::move(result));
          return;
        }
        static Counter& retries = MetricsRegistry::Default().GetCounter(
            "stoker_store_retries_total", "Object-store requests tried again after a failure");
        retries.Increment();
        spdlog::debug("retrying {} after attempt {}: {}", url, call->attempt,
                      std::string(result.status().message()));
        Attempt(call, absl::Now() + BackoffBeforeAttempt(call->attempt + 1, call->policy));
      });
}

}  // namespace

void SendWithRetries(HttpTransport& transport, RetryPolicy policy, RequestFactory make_request,
                     ResponseCheck check, HttpCallback done) {
  auto call = std::make_shared<RetryCall>(
      RetryCall{&transport, policy, std::move(make_request), std::move(check), std::move(done)});
  Attempt(std::move(call), absl::InfinitePast());
}

absl::StatusOr<HttpResponse> SendWithRetriesSync(HttpTransport& transport, RetryPolicy policy,
                                                 RequestFactory make_request, ResponseCheck check) {
  return Await<absl::StatusOr<HttpResponse>>([&](auto done) {
    SendWithRetries(transport, policy, std::move(make_request), std::move(check), std::move(done));
  });
}

}  // namespace stoker::io
