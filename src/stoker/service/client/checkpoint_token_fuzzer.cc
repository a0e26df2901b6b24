// Fuzz target: arbitrary bytes as a service checkpoint token (client/checkpoint.h), as a damaged or
// hand-edited --checkpoint file could hold them. ParseServiceCheckpoint must return a token or an
// InvalidArgument error, never crash; a token it accepts must survive a round trip (ToJson, then
// parse again, gives the same JSON) and its remaining pieces must tile the epoch with the done
// and open ranges.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "stoker/service/client/checkpoint.h"

namespace {
[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "checkpoint_token_fuzzer: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using stoker::service::ParseServiceCheckpoint;
  auto token = ParseServiceCheckpoint(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!token.ok()) {
    if (!absl::IsInvalidArgument(token.status())) Fail("an error that is not InvalidArgument");
    return 0;
  }
  const std::string json = token->ToJson();
  auto again = ParseServiceCheckpoint(json);
  if (!again.ok() || again->ToJson() != json) Fail("the round trip changed the token");
  // Remaining pieces, done and open ranges together cover [0, num_samples) exactly once.
  int64_t covered = 0;
  for (const auto& p : token->Remaining()) {
    if (p.begin < 0 || p.end <= p.begin || p.end > token->num_samples) Fail("a bad piece");
    if (!p.exact) covered += p.end - p.begin;
  }
  for (const auto& [a, b] : token->done) covered += b - a;
  for (const auto& o : token->open) covered += o.end - o.begin;
  if (covered != token->num_samples) Fail("pieces do not tile the epoch");
  return 0;
}
