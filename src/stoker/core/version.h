// The version of this build: the project version (CMakeLists.txt) and the git commit it was built
// from ("unknown" outside a checkout or sdist). `stoker --version` and stoker.__version__ print
// them. Thread-safe (constant strings).
#pragma once

namespace stoker {

const char* Version();    // "0.1.0"
const char* GitCommit();  // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or "unknown"

}  // namespace stoker
