// The pass pipeline: the one list of passes, in order, with the reason for each position.
#include "neuron/codegen/pipeline.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "neuron/ir/printer.hpp"
#include "neuron/base/config.hpp"
#include "neuron/base/target.hpp"

namespace neuron {

namespace {

class PassRunner {
 public:
  PassRunner(bool dump, std::vector<PassReport>& reports) : dump_(dump), reports_(reports) {}

  // Runs an IR-to-IR pass; "changed" is pointer inequality of the body (mutators return the
  // same node when nothing changed).
  void run(const std::string& name, Kernel& k, const std::function<Kernel(const Kernel&)>& pass) {
    auto t0 = std::chrono::steady_clock::now();
    Kernel out = pass(k);
    double ms = since(t0);
    bool changed = out.body != k.body;
    reports_.push_back(PassReport{name, ms, changed});
    if (dump_) {
      fmt::print(stderr, "=== after {} ({:.3f} ms) ===\n", name, ms);
      fmt::print(stderr, "{}\n", changed ? print(out) : std::string("unchanged"));
    }
    k = std::move(out);
  }

  Program run_lower(const Kernel& k, const std::string& target) {
    auto t0 = std::chrono::steady_clock::now();
    Program p = lower(k, target);
    double ms = since(t0);
    reports_.push_back(PassReport{"lower", ms, true});
    if (dump_) fmt::print(stderr, "=== after lower ({:.3f} ms) ===\n{}\n", ms, print(p));
    return p;
  }

 private:
  static double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  bool dump_;
  std::vector<PassReport>& reports_;
};

}  // namespace

Compiled compile(const Kernel& kernel, const CompileOptions& opts) {
  // An unknown target is the user's error; report it before any pass runs.
  const std::string target = target_by_name(opts.target).name;
  Compiled out;
  PassRunner runner(opts.dump_ir || config().dump_ir, out.passes);
  Kernel k = kernel;

  // 1. Verify the kernel as written, before anything rewrites it: errors then point at the
  //    user's own operations with their own argument names (x, y, ...), not at expansions.
  runner.run("verify", k, [&](const Kernel& in) {
    verify(in, target);
    return in;
  });
  // 2. Legalize needs a verified kernel: it relies on the argument kinds and shapes the
  //    verifier guarantees, and expands every nl helper into ISA instructions.
  runner.run("legalize", k, [](const Kernel& in) { return legalize(in); });
  // 3. fresh_psum after legalize, which decides the accumulate flag of the matmuls it emits,
  //    and before verify_isa, so its memsets are checked like every other instruction.
  runner.run("fresh_psum", k, [](const Kernel& in) { return fresh_psum(in); });
  // 4. Verify again at ISA level: legalize adds temporaries and instructions (transposes
  //    through PSUM, broadcast DMAs) that must obey the same rules, and the allocator sizes
  //    buffers assuming every op is an engine instruction.
  runner.run("verify_isa", k, [&](const Kernel& in) {
    verify(in, target);
    return in;
  });
  // 5. Allocate after legalize, so legalize's temporaries get SBUF/PSUM space too. A kernel
  //    that does not fit as written gets room the way neuronx-cc's allocator and scheduler
  //    make it, one step at a time so a kernel that fits keeps its program exactly as written:
  //    each value of a tile its own buffer (tile_versions), then PSUM drained as soon as a
  //    result is complete (early_psum_reads), then rows an out-of-bounds-skipping DMA left
  //    unwritten no longer kept (see tile_versions.cpp). The last attempt's error stands.
  runner.run("allocate", k, [&](const Kernel& in) {
    const std::vector<std::function<Kernel(const Kernel&)>> make_room = {
        [](const Kernel& x) { return x; },
        [](const Kernel& x) { return tile_versions(x); },
        [](const Kernel& x) { return early_psum_reads(tile_versions(x)); },
        [](const Kernel& x) { return early_psum_reads(tile_versions(x, SkippedRows::undefined)); },
    };
    for (size_t i = 0;; ++i) {
      try {
        return allocate(make_room[i](in), target);
      } catch (const UserError& e) {
        const bool capacity = e.rule() == "sbuf-capacity" || e.rule() == "psum-capacity";
        if (!capacity || i + 1 == make_room.size()) throw;
      }
    }
  });
  // 6. Lower last: access patterns need the allocator's offsets and slots.
  out.program = runner.run_lower(k, target);
  out.kernel = std::move(k);
  return out;
}

}  // namespace neuron
