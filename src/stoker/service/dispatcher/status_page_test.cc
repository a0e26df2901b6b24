#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace stoker::service
