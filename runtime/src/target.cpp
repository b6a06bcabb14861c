// The one file of hardware numbers. Sources: ../shared/TRAINIUM.md and NKI_API.md section 2.
#include "neuron/runtime/target.hpp"

#include <fmt/format.h>

#include "neuron/error.hpp"

namespace neuron {

static const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      // trn1 / NeuronCore-v2: 24 MiB SBUF = 128 x 192 KiB; usable 180224 bytes per partition
      // per the KLR tracer (NKI_API.md 2.1). PSUM 128 x 16 KiB in 8 banks of 2 KiB.
      Target{"trn1", 128, 180224, 16384, 8, 2048, 128, 512},
      // trn2 / NeuronCore-v3: 28 MiB SBUF = 128 x 224 KiB; usable 212984 bytes (KLR tracer).
      Target{"trn2", 128, 212984, 16384, 8, 2048, 128, 512},
      // trn3 / NeuronCore-v4: 32 MiB SBUF = 128 x 256 KiB; usable 245752 bytes (KLR tracer).
      Target{"trn3", 128, 245752, 16384, 8, 2048, 128, 512},
  };
  return all;
}

const Target& target_by_name(std::string_view name) {
  for (auto& t : targets())
    if (t.name == name) return t;
  user_error(Span{}, "target", "unknown target '{}'; known targets are {}", name,
             fmt::join(target_names(), ", "));
}

const Target& default_target() { return target_by_name("trn2"); }

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (auto& t : targets()) names.push_back(t.name);
  return names;
}

}  // namespace neuron
