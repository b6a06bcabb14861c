// DMA: copies between HBM and SBUF, direct or with rows selected by an index tile.
#pragma once
#include "neuron/codegen/instr_def.hpp"
#include "neuron/codegen/instrs/vector_engine.hpp"

namespace neuron::native {

// dst = src (same element count, any shapes, dtype cast). bitcast: dst's bytes = src's bytes,
// each side walked in row-major order (equal byte counts; `.ap(dtype=...)` views). Indirect: the second source is a
// [P, 1] integer tile whose element p selects the HBM row partition p moves (oob_mode 1 skips
// rows outside the tensor, 0 faults naming the index).
template <>
struct InstrDef<Opcode::dma_copy> {
  static void check(const Operands& o) {
    const InstrArgs& a = o.args();
    if (a.bitcast) {
      const int64_t db = o.dst.count * dtype_bytes(o.in.dst.dtype),
                    sb = o.src[0].count * dtype_bytes(o.in.src[0].dtype);
      if (db != sb || a.indirect != InstrArgs::Indirect::none)
        o.fail("shape-mismatch",
               "a reinterpreting copy moves bytes: src {} {} holds {} bytes but dst {} {} holds {}",
               o.src[0].str(), dtype_name(o.in.src[0].dtype), sb, o.dst.str(),
               dtype_name(o.in.dst.dtype), db);
      return;
    }
    o.same_count(0, "source");
    if (a.indirect == InstrArgs::Indirect::none) return;
    const bool on_src = a.indirect == InstrArgs::Indirect::src;
    const OperandShape& hbm = on_src ? o.src[0] : o.dst;
    const AccessPattern& hp = on_src ? o.in.src[0] : o.in.dst;
    if (is_on_chip(hp.memory) || !is_on_chip(o.in.src[1].memory))
      o.fail("indirect-dma", "indirect rows select rows of an HBM tensor with an on-chip index tile");
    if (o.src[1].count != hbm.partitions())
      o.fail("shape-mismatch", "the row index {} must hold one row number per moved row ({})",
             o.src[1].str(), hbm.partitions());
  }
  template <class E>
  static void call(E& e, const Instr& in) {
    const InstrArgs& a = in.args;
    NormLayout ld, l0, l1;
    if (a.bitcast) return call_dst_src(e, in, NEURON_KERNEL(copy_bytes));
    if (a.indirect == InstrArgs::Indirect::none) return InstrDef<Opcode::tensor_copy>::call(e, in);
    auto s = e.view(in.src[0], in, l0);
    auto idx = e.view(in.src[1], in, l1);
    auto d = e.view(in.dst, in, ld);
    e.call(NEURON_KERNEL(dma_indirect), d, s, idx, dtype_arg(in.dst), dtype_arg(in.src[0]), dtype_arg(in.src[1]),
           a.indirect == InstrArgs::Indirect::src ? 1 : 2, a.indirect_rows, int{a.oob_skip},
           in.id);
  }
};

}  // namespace neuron::native
