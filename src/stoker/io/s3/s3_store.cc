#include "stoker/io/s3/s3_store.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "stoker/core/blocking.h"
#include "stoker/core/logging.h"
#include "stoker/core/status.h"
#include "stoker/core/strings.h"
#include "stoker/io/http/http_util.h"
#include "stoker/io/s3/s3_request.h"
#include "stoker/io/s3/s3_xml.h"

namespace stoker::io {
namespace {

// Streams an object to S3: one PUT when small, a multipart upload otherwise.
class S3Writer : public ObjectWriter {
 public:
  S3Writer(S3Store* store, std::string key) : store_(store), key_(std::move(key)) {}

  ~S3Writer() override {
    if (!closed_) Abort();
  }

  absl::Status Append(Buffer data) override {
    if (closed_)
      return absl::FailedPreconditionError(StrCat(store_->Url(key_), ": writer is closed"));
    pending_size_ += data.size();
    pending_.push_back(std::move(data));
    const uint64_t part_size = store_->options().part_size;
    const bool multipart = pending_size_ + uploaded_size_ >= store_->options().multipart_threshold;
    while (multipart && pending_size_ >= part_size) {
      RETURN_IF_ERROR(UploadPart(TakePending(part_size)));
    }
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (closed_)
      return absl::FailedPreconditionError(StrCat(store_->Url(key_), ": writer is closed"));
    absl::Status status;
    if (upload_id_.empty()) {
      status = store_->SendSync({"PUT", key_, {}, {}, TakePending(pending_size_)}).status();
    } else {
      if (pending_size_ > 0) status = UploadPart(TakePending(pending_size_));
      if (status.ok()) status = Complete();
    }
    if (!status.ok()) {
      Abort();
      return status;
    }
    closed_ = true;
    return absl::OkStatus();
  }

 private:
  // Removes the first `size` bytes from the pending buffers.
  Buffer TakePending(uint64_t size) {
    std::vector<Buffer> parts;
    uint64_t taken = 0;
    while (taken < size) {
      Buffer& front = pending_.front();
      uint64_t want = size - taken;
      if (front.size() <= want) {
        taken += front.size();
        parts.push_back(std::move(front));
        pending_.erase(pending_.begin());
      } else {
        parts.push_back(front.Slice(0, want));
        front = front.Slice(want, front.size() - want);
        taken += want;
      }
    }
    pending_size_ -= size;
    return parts.empty() ? Buffer() : Buffer::Concat(parts);
  }

  absl::Status UploadPart(Buffer part) {
    if (upload_id_.empty()) {
      ASSIGN_OR_RETURN(HttpResponse response, store_->SendSync({"POST", key_, {{"uploads", ""}}}));
      ASSIGN_OR_RETURN(upload_id_, s3::ParseInitiateMultipartUpload(response.body.view()));
    }
    int number = ++parts_started_;
    uploaded_size_ += part.size();
    {
      // Bound memory: at most parts_in_flight parts are held while uploading.
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](S3Writer* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
            return w->in_flight_ < w->store_->options().parts_in_flight;
          },
          this));
      if (!error_.ok()) return error_;
      ++in_flight_;
    }
    store_->Send({"PUT",
                  key_,
                  {{"partNumber", std::to_string(number)}, {"uploadId", upload_id_}},
                  {},
                  std::move(part)},
                 nullptr, [this, number](absl::StatusOr<HttpResponse> response) {
                   absl::MutexLock lock(&mu_);
                   --in_flight_;
                   if (!response.ok()) {
                     if (error_.ok()) error_ = response.status();
                     return;
                   }
                   etags_[number] = response->Header("etag");
                 });
    return absl::OkStatus();
  }

  absl::Status WaitForParts() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](S3Writer* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) { return w->in_flight_ == 0; },
        this));
    return error_;
  }

  absl::Status Complete() {
    RETURN_IF_ERROR(WaitForParts());
    std::vector<s3::CompletedPart> parts;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [number, etag] : etags_) parts.push_back({number, etag});
    }
    std::string url = store_->Url(key_);
    std::string key_id;  // for messages only; S3ErrorToStatus names it on permission errors
    RETURN_IF_ERROR(
        store_
            ->SendSync({"POST",
                        key_,
                        {{"uploadId", upload_id_}},
                        {},
                        Buffer::FromString(s3::BuildCompleteMultipartUpload(parts))},
                       [url, key_id](HttpResponse r) -> absl::StatusOr<HttpResponse> {
                         // A 200 can still carry an <Error> body here.
                         RETURN_IF_ERROR(
                             s3::ParseCompleteMultipartUpload(r.body.view(), url, key_id).status());
                         return r;
                       })
            .status());
    return absl::OkStatus();
  }

  void Abort() {
    closed_ = true;
    if (upload_id_.empty()) return;
    (void)WaitForParts();
    auto status = store_->SendSync({"DELETE", key_, {{"uploadId", upload_id_}}}).status();
    if (!status.ok()) {
      spdlog::warn("could not abort the multipart upload of {}: {}", store_->Url(key_),
                   std::string(status.message()));
    }
  }

  S3Store* const store_;
  const std::string key_;
  std::vector<Buffer> pending_;
  uint64_t pending_size_ = 0;
  uint64_t uploaded_size_ = 0;
  std::string upload_id_;
  int parts_started_ = 0;
  bool closed_ = false;

  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> etags_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

S3Store::S3Store(s3::S3Config config, std::string bucket, S3StoreOptions options,
                 HttpTransport* transport)
    : config_(std::move(config)),
      bucket_(std::move(bucket)),
      options_(options),
      transport_(transport) {}

std::string S3Store::Url(std::string_view key) const { return StrCat("s3://", bucket_, "/", key); }

void S3Store::Send(Call call, ResponseCheck check, HttpCallback done) {
  std::string payload_hash(s3::kUnsignedPayload);
  if (call.method == "PUT" || call.method == "POST") {
    if (options_.sign_payload) payload_hash = s3::Sha256Hex(call.body.view());
  } else {
    payload_hash = std::string(s3::kEmptyPayloadSha256);
  }
  std::string url = Url(call.key);
  auto make_request = [this, call = std::move(call),
                       payload_hash](int attempt) -> absl::StatusOr<HttpRequest> {
    // A write that failed stops the read: it is not the store's failure to retry.
    if (call.sink != nullptr) RETURN_IF_ERROR(call.sink->error());
    ASSIGN_OR_RETURN(s3::S3Request built,
                     s3::BuildRequest(config_, call.method, bucket_, call.key, call.query,
                                      call.headers, payload_hash, absl::Now()));
    HttpRequest request{built.method, std::move(built.url)};
    for (auto& header : built.headers) {
      request.headers.emplace_back(std::move(header.name), std::move(header.value));
    }
    request.body = call.body;
    request.body_sink = call.sink;
    return request;
  };
  std::string key_id = config_.credentials.access_key_id;
  auto full_check = [url, key_id, check = std::move(check)](
                        HttpResponse response) mutable -> absl::StatusOr<HttpResponse> {
    if (response.status < 200 || response.status >= 300) {
      return s3::S3ErrorToStatus(response.status, response.body.view(), url, key_id);
    }
    return check ? check(std::move(response)) : std::move(response);
  };
  SendWithRetries(*transport_, options_.retry, std::move(make_request), std::move(full_check),
                  std::move(done));
}

absl::StatusOr<HttpResponse> S3Store::SendSync(Call call, ResponseCheck check) {
  return Await<absl::StatusOr<HttpResponse>>(
      [&](auto done) { Send(std::move(call), std::move(check), std::move(done)); });
}

void S3Store::StatAsync(std::string key, StatCallback done) {
  std::string url = Url(key);
  Send({"HEAD", key}, nullptr,
       [key, url, done = std::move(done)](absl::StatusOr<HttpResponse> response) mutable {
         if (!response.ok()) return std::move(done)(response.status());
         ObjectInfo info;
         info.key = key;
         if (!absl::SimpleAtoi(response->Header("content-length"), &info.size)) {
           return std::move(done)(
               absl::DataLossError(StrCat(url, ": HEAD response has no valid Content-Length")));
         }
         info.etag = s3::StripETagQuotes(response->Header("etag"));
         auto mtime = ParseHttpDate(response->Header("last-modified"));
         if (mtime.ok()) info.mtime = *mtime;
         std::move(done)(std::move(info));
       });
}

absl::StatusOr<ListResult> S3Store::List(const ListOptions& options) {
  ListResult result;
  std::string token;
  do {
    s3::QueryParams query = {{"list-type", "2"},
                             {"max-keys", std::to_string(options_.list_page_size)},
                             {"prefix", options.prefix}};
    if (!options.delimiter.empty()) query.emplace_back("delimiter", options.delimiter);
    if (!token.empty()) query.emplace_back("continuation-token", token);
    ASSIGN_OR_RETURN(HttpResponse response, SendSync({"GET", "", std::move(query)}));
    auto page = s3::ParseListObjectsV2(response.body.view());
    if (!page.ok()) return Annotate(page.status(), StrCat("listing ", Url(options.prefix)));
    for (auto& info : page->contents) {
      if (options.max_objects != 0 && result.objects.size() >= options.max_objects) break;
      result.objects.push_back(std::move(info));
    }
    for (auto& prefix : page->common_prefixes) result.common_prefixes.push_back(std::move(prefix));
    token = page->is_truncated ? page->next_continuation_token : "";
    if (page->is_truncated && token.empty()) {
      return absl::DataLossError(
          StrCat("listing ", Url(options.prefix), ": truncated page without a continuation token"));
    }
  } while (!token.empty() &&
           (options.max_objects == 0 || result.objects.size() < options.max_objects));
  return result;
}

void S3Store::ReadAsync(ReadRequest request, ReadCallback done) {
  std::string url = Url(request.key);
  auto read_empty = [this, request, url](ReadCallback done) {
    // No HTTP Range expresses "zero bytes at offset": check the offset against the size.
    StatAsync(request.key, [request, url,
                            done = std::move(done)](absl::StatusOr<ObjectInfo> info) mutable {
      if (!info.ok()) return std::move(done)(info.status());
      if (!request.if_match.empty() && info->etag != request.if_match) {
        return std::move(done)(absl::FailedPreconditionError(
            StrCat(url, " changed while being read (ETag ", info->etag, ", expected ",
                   request.if_match, ")")));
      }
      if (request.range.offset > info->size ||
          (info->size > 0 && request.range.offset == info->size && request.range.length != 0)) {
        return std::move(done)(absl::OutOfRangeError(
            StrCat("read of ", url, " at offset ", request.range.offset,
                   " is past the end of the object (", info->size, " bytes)")));
      }
      std::move(done)(Buffer());
    });
  };
  if (request.range.length == 0) return read_empty(std::move(done));

  Call call{"GET", request.key};
  call.headers.push_back({"range", RangeHeaderValue(request.range)});
  if (!request.if_match.empty())
    call.headers.push_back({"if-match", StrCat("\"", request.if_match, "\"")});
  ByteRange range = request.range;
  Send(
      std::move(call),
      [range, url](HttpResponse r) -> absl::StatusOr<HttpResponse> {
        ASSIGN_OR_RETURN(r.body, RangeFromResponse(r, range, url));
        return r;
      },
      [read_empty, range, done = std::move(done)](absl::StatusOr<HttpResponse> r) mutable {
        // S3 answers InvalidRange for "bytes=0-" on an empty object; that read is valid.
        if (!r.ok() && r.status().code() == absl::StatusCode::kOutOfRange && range.offset == 0) {
          return read_empty(std::move(done));
        }
        if (!r.ok()) return std::move(done)(r.status());
        std::move(done)(std::move(r->body));
      });
}

void S3Store::ReadToAsync(ReadRequest request, WriteAtFn write, WrittenCallback done) {
  if (request.range.length == 0) {
    return ObjectStore::ReadToAsync(std::move(request), std::move(write), std::move(done));
  }
  Call call{"GET", request.key};
  call.headers.push_back({"range", RangeHeaderValue(request.range)});
  if (!request.if_match.empty())
    call.headers.push_back({"if-match", StrCat("\"", request.if_match, "\"")});
  auto sink = std::make_shared<RangeSink>(request.range, Url(request.key), write);
  call.sink = sink;
  auto written = std::make_shared<uint64_t>(0);
  Send(
      std::move(call),
      [sink, written](HttpResponse r) -> absl::StatusOr<HttpResponse> {
        ASSIGN_OR_RETURN(*written, sink->Finish(r));
        return r;
      },
      [this, request, write, sink, written,
       done = std::move(done)](absl::StatusOr<HttpResponse> r) mutable {
        // S3 answers InvalidRange for "bytes=0-" on an empty object: ReadAsync's path knows it.
        if (!r.ok() && r.status().code() == absl::StatusCode::kOutOfRange &&
            request.range.offset == 0) {
          return ObjectStore::ReadToAsync(std::move(request), std::move(write), std::move(done));
        }
        if (!r.ok()) {
          absl::Status write_error = sink->error();
          return std::move(done)(write_error.ok() ? r.status() : write_error);
        }
        std::move(done)(*written);
      });
}

absl::StatusOr<std::unique_ptr<ObjectWriter>> S3Store::OpenWriter(std::string_view key) {
  if (key.empty() || key.ends_with("/")) {
    return absl::InvalidArgumentError(StrCat(Url(key), " is not an object key"));
  }
  return std::make_unique<S3Writer>(this, std::string(key));
}

absl::Status S3Store::Delete(std::string_view key) {
  absl::Status status = SendSync({"DELETE", std::string(key)}).status();
  if (absl::IsNotFound(status)) return absl::OkStatus();
  return status;
}

}  // namespace stoker::io
