#include "stoker/service/client/client_metrics.h"

#include <string>

namespace stoker::service {

void WriteClientMetrics(const ServiceClient& client, MetricsWriter& w) {
  using T = MetricsWriter::Type;
  const ServiceClientStats s = client.stats();
  const MetricLabels job = {{"job_id", std::to_string(client.job_id())}};
  w.Write("stoker_client_delivered_elements_total", "Elements delivered to the trainer",
          T::kCounter, job, static_cast<double>(s.elements));
  w.Write("stoker_client_delivered_bytes_total", "Payload bytes of the delivered elements",
          T::kCounter, job, static_cast<double>(s.bytes));
  w.Write("stoker_client_duplicates_total",
          "Elements received twice (a resent response, a split run again) and dropped", T::kCounter,
          job, static_cast<double>(s.duplicates));
  w.Write("stoker_client_splits_acknowledged_total", "Splits acknowledged as delivered in full",
          T::kCounter, job, static_cast<double>(s.splits));
  w.Write("stoker_client_wait_seconds_total",
          "Time the trainer waited inside GetNext for data (the stall)", T::kCounter, job,
          s.wait_seconds);
  w.Write("stoker_client_compute_seconds_total",
          "Time between the trainer's requests (its own work); stall ratio = wait / (wait + "
          "compute)",
          T::kCounter, job, s.between_seconds);
}

}  // namespace stoker::service
