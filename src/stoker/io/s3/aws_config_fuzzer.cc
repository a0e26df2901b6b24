// Fuzz target: the INI parser behind ~/.aws/credentials and the profile lookup.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "stoker/io/s3/credentials.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::io::s3;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<IniSections> ini = ParseIni(input, "fuzz-credentials");
  if (!ini.ok()) return 0;
  (void)CredentialsFromProfile(*ini, "default", "fuzz-credentials");
  for (const auto& [section, values] : *ini) {
    (void)CredentialsFromProfile(*ini, section, "fuzz-credentials");
  }
  return 0;
}
