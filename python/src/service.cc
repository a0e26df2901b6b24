// The service bindings of stoker._stoker, built when the service layer is part of the build
// (STOKER_HAVE_SERVICE): ServiceConsumer, one consumer of a service job (Pipeline.distribute),
// and in-process DispatcherServer and WorkerServer for notebooks and tests.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bindings.h"
#include "stoker/service/client/client.h"
#include "stoker/service/dispatcher/dispatcher.h"
#include "stoker/service/worker/worker.h"

namespace stoker::python {
namespace {

// A service mode from Python (a str, e.g. distribute's sharding): ParseMode's error as ValueError.
template <typename Mode>
Mode ModeArgument(const py::handle& value) {
  return ValueOrRaise(service::ParseMode<Mode>(py::str(value).cast<std::string>()));
}

// stoker._stoker.service_mode(field, value): value's spelling if it is one of the mode's, else
// ValueError naming the mode, the value and the allowed values (what distribute checks at once).
std::string ServiceMode(const std::string& field, const py::object& value) {
  if (field == "sharding") return std::string(ModeName(ModeArgument<service::Sharding>(value)));
  if (field == "partial_round")
    return std::string(ModeName(ModeArgument<service::PartialRound>(value)));
  if (field == "on_fall_behind")
    return std::string(ModeName(ModeArgument<service::OnFallBehind>(value)));
  if (field == "compression")
    return std::string(ModeName(ModeArgument<service::Compression>(value)));
  throw py::value_error("service_mode: no service mode '" + field + "'");
}

// One consumer of a service job (service::ServiceClient), epoch by epoch: next() returns the
// epoch's elements, then None at its end; advance_epoch() moves on.
class ServiceConsumer {
 public:
  explicit ServiceConsumer(const py::dict& o) {
    service::ServiceClientOptions options;
    options.dispatcher_address = o["dispatcher"].cast<std::string>();
    options.job_name = o["job_name"].cast<std::string>();
    options.sharding = ModeArgument<service::Sharding>(o["sharding"]);
    options.compression = ModeArgument<service::Compression>(o["compression"]);
    options.num_epochs = o["num_epochs"].cast<int64_t>();
    options.first_epoch = o["first_epoch"].cast<int64_t>();
    options.num_consumers = o["num_consumers"].cast<int64_t>();
    options.consumer_index = o["consumer_index"].cast<int64_t>();
    options.partial_round = ModeArgument<service::PartialRound>(o["partial_round"]);
    options.deterministic = o["deterministic"].cast<bool>();
    if (o.contains("display_name") && !o["display_name"].is_none())
      options.display_name = o["display_name"].cast<std::string>();
    if (o.contains("open_ended")) options.open_ended = o["open_ended"].cast<bool>();
    if (o.contains("prefetch_mb") && !o["prefetch_mb"].is_none()) {
      // A request asks for at most what the prefetch budget holds.
      options.prefetch_bytes = o["prefetch_mb"].cast<int64_t>() << 20;
      options.request_bytes = std::min(options.request_bytes, options.prefetch_bytes);
    }
    if (o.contains("shared_memory")) options.shared_memory = o["shared_memory"].cast<bool>();
    if (o.contains("cross_trainer_cache")) {
      options.cross_trainer_cache = o["cross_trainer_cache"].cast<bool>();
      options.trainer_id = o["trainer_id"].cast<std::string>();
      options.on_fall_behind = ModeArgument<service::OnFallBehind>(o["on_fall_behind"]);
    }
    if (o.contains("resume") && !o["resume"].is_none())
      options.resume = o["resume"].cast<std::string>();
    if (o.contains("replaces_job") && !o["replaces_job"].is_none())
      options.replaces_job = o["replaces_job"].cast<int64_t>();
    options.no_worker_timeout = std::chrono::milliseconds(
        static_cast<int64_t>(o["no_worker_timeout"].cast<double>() * 1000));
    auto file = [&](const char* key) {
      return o.contains(key) && !o[key].is_none() ? o[key].cast<std::string>() : std::string();
    };
    options.tls_ca_file = file("tls_ca");
    options.token_file = file("token_file");
    options.tls_cert_file = file("tls_cert");
    options.tls_key_file = file("tls_key");
    const std::string spec_json = o["spec_json"].cast<std::string>();
    absl::StatusOr<std::unique_ptr<service::ServiceClient>> client;
    {
      py::gil_scoped_release release;
      client = service::ServiceClient::Open(options, spec_json);
    }
    client_ = ValueOrRaise(std::move(client));
  }

  // The next element of the epoch, or None at its end. Waits in slices with the GIL released
  // and checks for signals between them, so Ctrl-C raises KeyboardInterrupt within ~0.2 s.
  py::object Next() {
    if (client_ == nullptr) throw std::runtime_error("the service consumer was closed");
    while (true) {
      absl::StatusOr<std::optional<data::Element>> next;
      {
        py::gil_scoped_release release;
        next = client_->GetNext(absl::Milliseconds(200));
      }
      if (!next.ok() && absl::IsDeadlineExceeded(next.status())) {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        continue;
      }
      if (!next.ok()) Raise(next.status());
      if (!next->has_value()) return py::none();
      return ElementToDict(**next);
    }
  }

  bool AdvanceEpoch() { return client_ != nullptr && client_->AdvanceEpoch(); }
  // The consumer's checkpoint token (client/checkpoint.h).
  std::string Checkpoint() {
    if (client_ == nullptr) throw std::runtime_error("the service consumer was closed");
    absl::StatusOr<std::string> token;
    {
      py::gil_scoped_release release;  // may wait for a heartbeat
      token = client_->Checkpoint();
    }
    return ValueOrRaise(std::move(token));
  }
  std::string Fingerprint() const { return client_ ? client_->fingerprint() : std::string(); }
  int64_t epoch() const { return client_ ? client_->epoch() : -1; }
  int64_t job_id() const { return client_ ? client_->job_id() : -1; }
  // The client's counters (ServiceClientStats) as a dict.
  py::dict Stats() const {
    py::dict d;
    if (!client_) return d;
    const service::ServiceClientStats s = client_->stats();
    d["elements"] = s.elements;
    d["bytes"] = s.bytes;
    d["duplicates"] = s.duplicates;
    d["splits"] = s.splits;
    d["cache_hits"] = s.cache_hits;
    d["cache_recomputed"] = s.cache_recomputed;
    d["cache_skipped"] = s.cache_skipped;
    d["shm_elements"] = s.shm_elements;
    d["shm_bytes"] = s.shm_bytes;
    return d;
  }

  // Samples per epoch as the job's workers counted them (waits up to `timeout` seconds).
  int64_t NumSamples(double timeout) {
    if (client_ == nullptr) throw std::runtime_error("the service consumer was closed");
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->WaitForJobInfo(absl::Seconds(timeout));
    }
    if (!s.ok()) Raise(s);
    return client_->num_samples();
  }

  // Leaves the job; destroying the client joins its threads, which never take the GIL.
  void Close() {
    py::gil_scoped_release release;
    client_.reset();
  }

 private:
  std::unique_ptr<service::ServiceClient> client_;
};

// In-process servers, for notebooks and tests (as tf.data's DispatchServer / WorkerServer).
class DispatcherServer {
 public:
  DispatcherServer(int port, const std::string& work_dir, int64_t worker_timeout_ms,
                   int64_t client_timeout_ms) {
    service::DispatcherOptions options;
    options.port = port;
    options.work_dir = work_dir;
    options.worker_timeout = std::chrono::milliseconds(worker_timeout_ms);
    options.client_timeout = std::chrono::milliseconds(client_timeout_ms);
    absl::StatusOr<std::unique_ptr<service::Dispatcher>> d;
    {
      py::gil_scoped_release release;
      d = service::Dispatcher::Start(options);
    }
    dispatcher_ = ValueOrRaise(std::move(d));
    port_ = dispatcher_->port();
  }
  int port() const { return port_; }
  void Stop() {
    py::gil_scoped_release release;
    dispatcher_.reset();
  }

 private:
  std::unique_ptr<service::Dispatcher> dispatcher_;
  int port_ = 0;
};

class WorkerServer {
 public:
  WorkerServer(const std::string& dispatcher, int port, const std::string& host, int threads,
               int64_t buffer_bytes, int64_t heartbeat_ms) {
    service::WorkerOptions options;
    options.dispatcher_address = ValueOrRaise(service::NormalizeDispatcherAddress(dispatcher));
    options.port = port;
    options.host = host;
    options.threads = threads;
    if (buffer_bytes > 0) options.buffer_bytes = buffer_bytes;
    options.heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
    absl::StatusOr<std::unique_ptr<service::Worker>> w;
    {
      py::gil_scoped_release release;
      w = service::Worker::Start(options);
    }
    worker_ = ValueOrRaise(std::move(w));
    address_ = worker_->address();
  }
  const std::string& address() const { return address_; }
  // drain_timeout > 0: a graceful stop (finish the splits it runs, hand over what it holds).
  void Stop(double drain_timeout) {
    py::gil_scoped_release release;
    if (worker_ && drain_timeout > 0)
      worker_->Drain(std::chrono::milliseconds(static_cast<int64_t>(drain_timeout * 1000)));
    worker_.reset();
  }

 private:
  std::unique_ptr<service::Worker> worker_;
  std::string address_;
};

}  // namespace

void BindService(py::module_& m) {
  m.def("service_mode", &ServiceMode, py::arg("field"), py::arg("value"));
  py::class_<ServiceConsumer>(m, "ServiceConsumer")
      .def(py::init<const py::dict&>(), py::arg("options"))
      .def("next", &ServiceConsumer::Next)
      .def("advance_epoch", &ServiceConsumer::AdvanceEpoch)
      .def("checkpoint", &ServiceConsumer::Checkpoint)
      .def_property_readonly("fingerprint", &ServiceConsumer::Fingerprint)
      .def("num_samples", &ServiceConsumer::NumSamples, py::arg("timeout") = 60.0)
      .def("close", &ServiceConsumer::Close)
      .def_property_readonly("epoch", &ServiceConsumer::epoch)
      .def_property_readonly("job_id", &ServiceConsumer::job_id)
      .def("stats", &ServiceConsumer::Stats,
           "counters: elements, bytes, duplicates, splits, shm_elements, shm_bytes, cache_hits, "
           "cache_recomputed, "
           "cache_skipped");
  py::class_<DispatcherServer>(m, "DispatcherServer")
      .def(py::init<int, const std::string&, int64_t, int64_t>(), py::arg("port") = 0,
           py::arg("work_dir") = "", py::arg("worker_timeout_ms") = 3000,
           py::arg("client_timeout_ms") = 30000)
      .def_property_readonly("port", &DispatcherServer::port)
      .def("stop", &DispatcherServer::Stop);
  py::class_<WorkerServer>(m, "WorkerServer")
      .def(py::init<const std::string&, int, const std::string&, int, int64_t, int64_t>(),
           py::arg("dispatcher"), py::arg("port") = 0, py::arg("host") = "127.0.0.1",
           py::arg("threads") = 0, py::arg("buffer_bytes") = 0, py::arg("heartbeat_ms") = 500)
      .def_property_readonly("address", &WorkerServer::address)
      .def("stop", &WorkerServer::Stop, py::arg("drain_timeout") = 0.0);
}

}  // namespace stoker::python
