#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "stoker/core/strings.h"
#include "stoker/data/pipeline.h"
#include "stoker/service/dispatcher/dispatcher.h"

namespace stoker::service {
namespace {

// Strings from outside reach the page as text: a worker's address, reported in its heartbeat.
TEST(StatusPage, ShowsWorkersAndEscapesWhatTheyReport) {
  DispatcherOptions options;  // no journal
  auto d = Dispatcher::Start(options);
  ASSERT_TRUE(d.ok()) << d.status();
  WorkerHeartbeatRequest req;
  req.set_address("<script>alert('x')</script>&\"h\":1");
  req.set_unhealthy("cannot read <b>/data</b>");
  WorkerHeartbeatResponse resp;
  ASSERT_TRUE((*d)->WorkerHeartbeat(req, &resp).ok());
  std::string page = (*d)->StatusPage();
  EXPECT_NE(page.find("<meta http-equiv=\"refresh\" content=\"2\">"), std::string::npos) << page;
  EXPECT_NE(page.find("<span id=\"worker-count\">1</span>"), std::string::npos) << page;
  EXPECT_NE(page.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;h&quot;:1"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("unhealthy</span>: cannot read &lt;b&gt;/data&lt;/b&gt;"), std::string::npos)
      << page;
  EXPECT_EQ(page.find("<script"), std::string::npos) << page;
  EXPECT_EQ(page.find("<b>"), std::string::npos) << page;
  // The events: the worker joined, then said it is unhealthy (newest first).
  size_t unhealthy = page.find("is unhealthy: cannot read &lt;b&gt;");
  size_t joined = page.find("worker 1 joined at &lt;script&gt;");
  ASSERT_NE(unhealthy, std::string::npos) << page;
  ASSERT_NE(joined, std::string::npos) << page;
  EXPECT_LT(unhealthy, joined) << page;
}

GetOrCreateJobRequest JobRequest(const nlohmann::json& spec) {
  GetOrCreateJobRequest req;
  req.set_spec_json(spec.dump());
  req.set_fingerprint(data::Pipeline::Fingerprint(spec));
  return req;
}

// An anonymous job of 1000 samples with one consumer registered; returns its client id.
int64_t JobWithOneConsumer(Dispatcher& d) {
  GetOrCreateJobRequest req = JobRequest({{"source", {{"range", 1000}}}});
  req.set_num_samples(1000);
  GetOrCreateJobResponse job;
  EXPECT_TRUE(d.GetOrCreateJob(req, &job).ok());
  ClientHeartbeatRequest hb;
  hb.set_job_id(job.job_id());
  ClientHeartbeatResponse resp;
  EXPECT_TRUE(d.ClientHeartbeat(hb, &resp).ok());
  return resp.client_id();
}

// A job shows what operators need to tell it apart: its display name (escaped), its dataset, its
// age; an open-ended job the epochs and positions delivered without a planned total; and all of
// it survives a restart (journaled).
TEST(StatusPage, ShowsJobsNameAgeDatasetAndOpenEndedProgress) {
  const std::string dir = ::testing::TempDir() + "/status_page_jobs";
  std::filesystem::remove_all(dir);
  DispatcherOptions options;
  options.work_dir = dir;
  for (int run = 0; run < 2; ++run) {
    auto d = Dispatcher::Start(options);
    ASSERT_TRUE(d.ok()) << d.status();
    if (run == 0) {
      GetOrCreateJobRequest open = JobRequest({{"source", {{"dataset", "s3://bucket/train/"}}},
                                               {"ops", {{{"op", "batch"}, {"size", 4}}}}});
      open.set_display_name("ann@gpu-7:<train>.py");
      open.set_open_ended(true);
      open.set_num_epochs(100000);
      open.set_num_samples(300);
      GetOrCreateJobResponse resp;
      ASSERT_TRUE((*d)->GetOrCreateJob(open, &resp).ok());
      GetOrCreateJobRequest bounded =
          JobRequest({{"source", {{"tfrecord", {"http://h/a.tfrecord", "http://h/b.tfrecord"}}}}});
      bounded.set_job_name("eval");
      bounded.set_num_epochs(3);
      bounded.set_num_samples(50);
      ASSERT_TRUE((*d)->GetOrCreateJob(bounded, &resp).ok());
    }
    std::string page = (*d)->StatusPage();
    SCOPED_TRACE(page);
    EXPECT_NE(page.find("<th>created by</th><th>age</th><th>dataset</th>"), std::string::npos);
    // Job 1: unnamed, shown by its display name; open-ended: no "/ 100000", no "/ 30000000".
    EXPECT_NE(page.find("<tr><td>1</td><td>ann@gpu-7:&lt;train&gt;.py</td><td>ann@gpu-7:&lt;"
                        "train&gt;.py</td>"),
              std::string::npos);
    EXPECT_NE(page.find("<td>s3://bucket/train/</td>"), std::string::npos);
    EXPECT_EQ(page.find("100000"), std::string::npos);
    EXPECT_EQ(page.find("30000000"), std::string::npos);
    EXPECT_NE(page.find("<td>0</td><td>0</td><td>0 / 0</td>"), std::string::npos);
    // Job 2: named, bounded: the totals it plans.
    EXPECT_NE(page.find("<td>2</td><td>eval</td>"), std::string::npos);
    EXPECT_NE(page.find("<td>http://h/a.tfrecord (+1 more)</td>"), std::string::npos);
    EXPECT_NE(page.find("<td>0 / 3</td><td>0 / 150</td>"), std::string::npos);
    // Both wait for their first consumer, and say so.
    EXPECT_NE(page.find("running</span>: <span class=\"reason\">waiting for its first consumer "
                        "(ended in "),
              std::string::npos);
    EXPECT_NE(page.find(" s</td>"), std::string::npos);  // an age in seconds
    EXPECT_EQ(page.find("<train>"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

// A consumer that stopped heartbeating (killed after its checkpoint) keeps its job running until
// its timeout: the page says whom the job waits for and how long.
TEST(StatusPage, SaysWhyAJobWithASilentConsumerStillRuns) {
  DispatcherOptions options;
  options.client_timeout = std::chrono::seconds(30);
  auto d = Dispatcher::Start(options);
  ASSERT_TRUE(d.ok()) << d.status();
  int64_t client = 0;
  ASSERT_NO_FATAL_FAILURE(client = JobWithOneConsumer(**d));
  EXPECT_NE((*d)->StatusPage().find("waiting for a worker (none registered)"), std::string::npos)
      << (*d)->StatusPage();
  std::this_thread::sleep_for(std::chrono::milliseconds(2300));  // silent after 2 s
  std::string page = (*d)->StatusPage();
  EXPECT_NE(page.find(StrCat("no consumer is reading: waiting for consumer ", client,
                             "&#39;s timeout (2")),
            std::string::npos)
      << page;
  EXPECT_NE(page.find(" s left)"), std::string::npos) << page;
}

// The last consumer removed at its timeout ends the job at once (not a client timeout later).
TEST(StatusPage, AJobEndsWhenItsLastConsumerTimesOut) {
  DispatcherOptions options;
  options.client_timeout = std::chrono::seconds(1);
  auto d = Dispatcher::Start(options);
  ASSERT_TRUE(d.ok()) << d.status();
  int64_t client = 0;
  ASSERT_NO_FATAL_FAILURE(client = JobWithOneConsumer(**d));
  const std::string ended =
      StrCat("ended</span>: its last consumer (client ", client, ") missed its heartbeats for 1 s");
  const auto start = std::chrono::steady_clock::now();
  while ((*d)->StatusPage().find(ended) == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Ended with the removal (the reason says so), not after another timeout without a consumer
  // ("no consumer for 1 s").
  EXPECT_NE((*d)->StatusPage().find(ended), std::string::npos) << (*d)->StatusPage();
}

}  // namespace
}  // namespace stoker::service
