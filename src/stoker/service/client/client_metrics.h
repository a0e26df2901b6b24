// A consumer's counters in the Prometheus exposition (docs/operations.md): what a process that
// runs a ServiceClient (stoker consume) reports at /metrics.
#pragma once

#include "stoker/core/metrics.h"
#include "stoker/service/client/client.h"

namespace stoker::service {

// Writes the client's stats labelled with its job: delivered elements and bytes, duplicates,
// acknowledged splits, and the trainer's wait and compute time. Thread-safe (stats() is).
void WriteClientMetrics(const ServiceClient& client, MetricsWriter& w);

}  // namespace stoker::service
