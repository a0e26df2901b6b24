// HttpTransport: asynchronous HTTP/1.1 over one libcurl multi handle driven by one thread, with a
// keep-alive connection pool and an admission limit on requests in flight.
//
// The process-wide instance (Default()) is shared by every network store, so its limit (default
// 16, env STOKER_MAX_REQUESTS) is the process-wide admission limit (docs/reads.md):
// requests beyond it wait in a FIFO queue. Completion callbacks run on the transport thread and
// must be quick (hand heavy work to another thread).
//
// SendWithRetries adds the retry loop (retry.h decides; backoff waits happen inside the transport's
// queue, no thread sleeps) and the check that every body has exactly the announced length.
//
// Thread safety: all methods are thread-safe.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "stoker/core/buffer.h"
#include "stoker/io/retry.h"

namespace stoker::io {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Where a response body goes instead of HttpResponse::body, as it arrives: no buffer, no copy
// (`stoker cat > file` writes each part in place from libcurl's receive buffer). Called on the
// transport thread; must be quick. One sink may serve several attempts of a request (retries):
// Accept starts each attempt's body.
class BodySink {
 public:
  virtual ~BodySink() = default;
  // Before the first byte of a body, with the status and headers: true to take the body through
  // Write; false to keep it in HttpResponse::body as usual (an error response, for its message).
  virtual bool Accept(int status, const HttpHeaders& headers) = 0;
  // The next bytes of an accepted body, in order. False stops the transfer: the request fails
  // (Unavailable, a write error), and the sink keeps the reason.
  virtual bool Write(std::string_view data) = 0;
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  HttpHeaders headers;
  Buffer body;  // sent for PUT and POST
  // Fail with DeadlineExceeded when the whole exchange takes longer (zero: no limit; a stalled
  // transfer is still caught by the low-speed check).
  absl::Duration timeout = absl::ZeroDuration();
  // Not sent before this time (used for retry backoff).
  absl::Time not_before = absl::InfinitePast();
  // When set, the body goes here (if the sink accepts it) instead of into HttpResponse::body.
  std::shared_ptr<BodySink> body_sink;
};

struct HttpResponse {
  int status = 0;
  HttpHeaders headers;  // names in lower case, in arrival order
  Buffer body;
  // Body bytes handed to the request's BodySink (then `body` is empty).
  uint64_t sunk_bytes = 0;
  bool body_sunk = false;

  // The value of the last header named `name` (lower case), or "" when absent.
  std::string Header(std::string_view name) const;
};

using HttpCallback = absl::AnyInvocable<void(absl::StatusOr<HttpResponse>) &&>;

struct HttpTransportStats {
  uint64_t requests_sent = 0;
  uint64_t transport_errors = 0;
  int in_flight = 0;
  int queued = 0;
};

class HttpTransport {
 public:
  explicit HttpTransport(int max_in_flight);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // The process-wide transport (never destroyed).
  static HttpTransport& Default();

  // Sends one request. `done` gets the response whatever its HTTP status, or Unavailable /
  // DeadlineExceeded (connection failures, resets, timeouts; the message names the URL and
  // libcurl's reason).
  void Send(HttpRequest request, HttpCallback done);
  absl::StatusOr<HttpResponse> SendSync(HttpRequest request);

  HttpTransportStats stats();

  struct Transfer;  // one exchange in flight (implementation detail, defined in the .cc)

 private:
  void Loop();
  void Start(std::unique_ptr<Transfer> transfer);
  void Finish(void* easy, int curl_code);

  const int max_in_flight_;
  void* multi_;  // CURLM*, used only by the loop thread (curl_multi_wakeup is thread-safe)
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Transfer>> queued_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  HttpTransportStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Transfer>> running_;  // loop thread only
  // Finished easy handles (CURL*), reset and reused by the next transfers: each keeps its receive
  // buffer (CURLOPT_BUFFERSIZE), which would otherwise be allocated, and its pages faulted in,
  // once per request. Loop thread only.
  std::vector<void*> idle_easy_;
  std::thread loop_;
};

// Builds the request for attempt number `attempt` (1-based); called again for every retry, so
// signatures and dates are fresh.
using RequestFactory = absl::AnyInvocable<absl::StatusOr<HttpRequest>(int attempt)>;
// Turns a response into the caller's result: an error status for HTTP errors (5xx must map to
// Unavailable to be retried), or the response to deliver.
using ResponseCheck = absl::AnyInvocable<absl::StatusOr<HttpResponse>(HttpResponse response)>;

// Sends with retries per `policy` and IsRetryable. A 200/206 response whose body length (kept or
// sunk) differs from its Content-Length is DataLoss and retried, never delivered. The final error
// names the number of attempts and the last error.
void SendWithRetries(HttpTransport& transport, RetryPolicy policy, RequestFactory make_request,
                     ResponseCheck check, HttpCallback done);
// The same, waiting for the result. Must not be called from the transport thread.
absl::StatusOr<HttpResponse> SendWithRetriesSync(HttpTransport& transport, RetryPolicy policy,
                                                 RequestFactory make_request, ResponseCheck check);

}  // namespace stoker::io
