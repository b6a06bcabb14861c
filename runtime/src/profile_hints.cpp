// Costly patterns the compiler inserted for a line of the user's kernel, found in a profile:
// instructions legalize added around a matmul, with the time they cost and the cheaper way to
// write the line. The patterns are recognised from the instructions sharing a source line.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "neuron/runtime/profile.hpp"

namespace neuron {

namespace {

std::string us(double ns) { return fmt::format("{:.2f} us", ns / 1000.0); }

bool reads_psum(const ProfileInstr& in) {
  return std::find(in.src_memory.begin(), in.src_memory.end(), Memory::psum) != in.src_memory.end();
}

}  // namespace

std::vector<ProfileStats::Hint> profile_hints(const Profile& p) {
  // Static instructions per source line, and their dynamic count and engine time.
  std::map<std::pair<std::string, int>, std::vector<int>> by_line;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Span& s = p.instrs[i].span;
    if (s.line > 0) by_line[{s.file, s.line}].push_back(static_cast<int>(i));
  }
  std::vector<double> time(p.instrs.size(), 0.0);
  std::vector<int64_t> count(p.instrs.size(), 0);
  for (auto& e : p.events) {
    time[static_cast<size_t>(e.instr)] += e.occupancy_ns;
    ++count[static_cast<size_t>(e.instr)];
  }
  std::vector<ProfileStats::Hint> hints;
  for (auto& [key, ids] : by_line) {
    auto has = [&](const char* op) {
      return std::any_of(ids.begin(), ids.end(), [&](int i) { return p.instrs[i].opcode == op; });
    };
    if (!has("nc_matmul")) continue;
    // A matmul whose stationary operand was not [K, M]: legalize transposes it through TensorE
    // and PSUM and copies it back to SBUF before every matmul.
    if (has("nc_transpose")) {
      ProfileStats::Hint h{key.first, key.second, "transpose-for-matmul", "", 0, 0};
      for (int i : ids) {
        const ProfileInstr& in = p.instrs[static_cast<size_t>(i)];
        if (in.opcode == "nc_transpose") h.count += count[static_cast<size_t>(i)];
        if (in.opcode == "nc_transpose" || (in.opcode == "tensor_copy" && reads_psum(in)))
          h.cost_ns += time[static_cast<size_t>(i)];
      }
      h.message = fmt::format(
          "nl.matmul(x, y) transposes x through TensorE and PSUM and copies it back to SBUF "
          "before the matmul ({}x, {} of engine time): x is [M, K] but the Tensor engine "
          "contracts over partitions. Pass x already as [K, M] with transpose_x=True (load it "
          "transposed, or transpose it once outside the loop).",
          h.count, us(h.cost_ns));
      hints.push_back(h);
    }
    // `acc += nl.matmul(...)`: the product goes to a fresh PSUM tile, is copied to SBUF (VectorE
    // reads one PSUM input at most) and added into acc on VectorE, every time.
    bool psum_add = false;
    for (int i : ids) {
      const ProfileInstr& in = p.instrs[static_cast<size_t>(i)];
      psum_add |= in.opcode == "tensor_tensor" && in.op == "add" &&
                  (reads_psum(in) || in.dst_memory == Memory::psum);
    }
    if (psum_add) {
      ProfileStats::Hint h{key.first, key.second, "psum-round-trip", "", 0, 0};
      for (int i : ids) {
        const ProfileInstr& in = p.instrs[static_cast<size_t>(i)];
        if (in.opcode == "tensor_tensor") h.count += count[static_cast<size_t>(i)];
        if (in.opcode == "tensor_tensor" || (in.opcode == "tensor_copy" && reads_psum(in)))
          h.cost_ns += time[static_cast<size_t>(i)];
      }
      h.message = fmt::format(
          "acc += nl.matmul(...) computes each product into a new PSUM tile, copies it to SBUF "
          "and adds it into acc on VectorE ({}x, {} of VectorE time). Accumulate in PSUM "
          "instead: nisa.nc_matmul(acc, x, y, accumulate=True), with accumulate=False for the "
          "first product.",
          h.count, us(h.cost_ns));
      hints.push_back(h);
    }
  }
  std::sort(hints.begin(), hints.end(), [](auto& a, auto& b) { return a.cost_ns > b.cost_ns; });
  return hints;
}

}  // namespace neuron
