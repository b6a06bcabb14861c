// The toolkit build id, generated at build time by cmake/build_id.cmake (see CMakeLists.txt).
#include "neuron/runtime/cache.hpp"

#if __has_include("neuron_build_id.inc")
#include "neuron_build_id.inc"
#else
// Built without the generator (not through CMakeLists.txt): an id that never matches a real
// build, so such binaries never share cache entries with one.
#define NEURON_BUILD_ID "unversioned"
#endif

namespace neuron {

std::string_view toolkit_build_id() {
  return NEURON_BUILD_ID;
}

}  // namespace neuron
