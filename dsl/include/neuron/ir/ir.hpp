// Kernel IR nodes: buffers, access views, and the statement kinds (one X-macro list).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "neuron/base/error.hpp"
#include "neuron/ir/affine.hpp"
#include "neuron/base/dtype.hpp"
#include "neuron/base/ops.hpp"

namespace neuron {

// A named storage: a kernel input/output in HBM, or a tile in SBUF/PSUM. For on-chip buffers
// dim 0 is the partition dimension.
struct Buffer {
  std::string name;
  Memory memory = Memory::sbuf;
  std::vector<int64_t> shape;
  DType dtype = DType::float32;
  // Set by the allocate pass for on-chip buffers: byte offset within each partition, and the
  // number of rotating slots (slot_bytes apart) indexed by loop variable slot_var, so that a
  // buffer allocated inside an affine_range body can be live in several iterations at once.
  int64_t offset = -1;
  int64_t slots = 1;
  std::string slot_var;
  // The core of a multi-core grid whose memory holds this tile (the programs of an LNC grid
  // traced into one body: python/neuron/collectives.py), so the allocator checks each core's
  // tiles against that core's SBUF and PSUM; -1: not a core's (one-core kernels).
  int core = -1;
  Span span;

  int64_t elements() const;
  int64_t slot_bytes() const { return free_elements() * dtype_bytes(dtype); }
  int64_t free_elements() const;  // product of dims 1.. (elements per partition on chip)
};
using BufferPtr = std::shared_ptr<const Buffer>;

// One dimension of a view: elements start, start+step, ..., size of them. step 0 broadcasts
// one element `size` times. keep=false means the dimension was indexed by a scalar and is
// dropped from the view's shape (size is then 1).
struct DimSlice {
  Affine start;
  int64_t size = 1;
  int64_t step = 1;
  bool keep = true;
  bool operator==(const DimSlice&) const = default;
};

// Elements between consecutive indices of each dim of a row-major shape.
std::vector<int64_t> row_strides(const std::vector<int64_t>& shape);

// A view of a buffer: one DimSlice per storage dimension. Its shape is the sizes of the kept dims,
// in storage order or, when `order` is set, in that order (a transposing view such as a
// .permute() or a t.ap() walk out of storage order; on chip the partition dim stays first).
// The storage is the buffer's elements in row-major order seen with the buffer's shape or, when
// `storage` is set, the elements from `origin` on (on chip: of each partition, the partition
// dim kept) seen with that shape: a view that splits or merges the buffer's dims (t.ap(), a
// tile reshape) walks it. The verifier checks that the storage lies inside the buffer.
// An on-chip view may read the bytes as another dtype (`as_dtype`, NKI's t.view(dtype) of a
// tile): it then has `storage`, and storage, origin and dims count elements of that dtype.
struct Access {
  BufferPtr buffer;
  std::vector<DimSlice> dims;
  std::vector<int64_t> storage;  // empty: buffer->shape
  int64_t origin = 0;            // with `storage`: its first element (on chip, per partition)
  std::vector<int> order;        // empty: the kept dims in storage order
  std::optional<DType> as_dtype;  // a reinterpreting view: the dtype its elements are read as
  const std::vector<int64_t>& storage_shape() const {
    return storage.empty() ? buffer->shape : storage;
  }
  DType dtype() const { return as_dtype.value_or(buffer->dtype); }
  // The storage dims the view's dims walk, in view order.
  std::vector<size_t> kept() const;
  // After keep flags changed: `order` without the dims no longer kept, empty when it is the
  // storage order.
  void normalize_order();
  std::vector<int64_t> shape() const;
  static Access whole(BufferPtr b);  // the full buffer
};

// Op arguments are keyword values: a tile/tensor view, an integer (also bools and enum-like
// flags), a float immediate, a name (ALU op, activation function, prefix), or an int list.
using Value = std::variant<Access, int64_t, double, std::string, std::vector<int64_t>>;
struct Arg {
  std::string name;
  Value value;
};

// X(kind) for every statement node. Adding a kind here makes the visitor, mutator, printer,
// equality and hashing fail to compile until they handle it.
#define NEURON_STMT_KINDS(X) X(Block) X(For) X(Alloc) X(Op)

enum class StmtKind {
#define X(k) k,
  NEURON_STMT_KINDS(X)
#undef X
};

struct Stmt;
using StmtPtr = std::shared_ptr<const Stmt>;

struct Stmt {
  explicit Stmt(StmtKind k) : kind(k) {}
  virtual ~Stmt() = default;
  const StmtKind kind;
  Span span;
  template <typename T>
  const T* as() const {
    return kind == T::static_kind ? static_cast<const T*>(this) : nullptr;
  }
};

struct Block : Stmt {
  static constexpr StmtKind static_kind = StmtKind::Block;
  Block() : Stmt(static_kind) {}
  std::vector<StmtPtr> stmts;
  static StmtPtr make(std::vector<StmtPtr> stmts, Span span = {});
};

// affine_range: iterations are independent (the allocator may rotate buffers across them);
// sequential_range: iterations carry dependences; dynamic: a runtime loop whose trip count is
// known only when it starts (it reads registers: nl.dynamic_range, fori_loop, while_loop). Loops
// always run var = 0, 1, ...; the front ends fold start/step into the index expressions.
enum class LoopKind { affine, sequential, dynamic };

// Registers are runtime integer variables ("r0", "r1", ... in trace order) set by the
// register_load/register_move instructions. Index expressions may use them (dynamic offsets), and
// dynamic loops read them.
bool is_register_var(std::string_view var);
std::string register_var(int n);  // "r<n>"

struct For : Stmt {
  static constexpr StmtKind static_kind = StmtKind::For;
  For() : Stmt(static_kind) {}
  std::string var;
  int64_t extent = 0;  // the trip count of an affine/sequential loop
  LoopKind loop_kind = LoopKind::affine;
  // Dynamic loops: with `cond` empty, max(0, ceil((stop - start) / step)) iterations, evaluated
  // once when the loop starts (start/stop may use registers, loop variables and program ids;
  // step > 0); with `cond` a register, iterations run while it is non-zero (checked first).
  Affine start = 0, stop = 0;
  int64_t step = 1;
  std::string cond;
  StmtPtr body;
  static StmtPtr make(std::string var, int64_t extent, LoopKind kind, StmtPtr body,
                      Span span = {});
  static StmtPtr make_dynamic(std::string var, Affine start, Affine stop, int64_t step,
                              std::string cond, StmtPtr body, Span span = {});
  StmtPtr with_body(StmtPtr body) const;  // the same loop around another body
  bool is_dynamic() const { return loop_kind == LoopKind::dynamic; }
};

// Declares a buffer; it lives until the end of the enclosing block.
struct Alloc : Stmt {
  static constexpr StmtKind static_kind = StmtKind::Alloc;
  Alloc() : Stmt(static_kind) {}
  BufferPtr buffer;
  static StmtPtr make(BufferPtr buffer, Span span = {});
};

// One operation: an nl helper or an ISA instruction with keyword arguments ("dst", "data", ...).
struct Op : Stmt {
  static constexpr StmtKind static_kind = StmtKind::Op;
  Op() : Stmt(static_kind) {}
  Opcode code = Opcode::tensor_copy;
  std::vector<Arg> args;
  static StmtPtr make(Opcode code, std::vector<Arg> args, Span span = {});

  const Value* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const Access* access(std::string_view name) const;  // null when absent or not a view
  int64_t get_int(std::string_view name, int64_t fallback) const;
  double get_float(std::string_view name, double fallback) const;  // ints convert
  std::string get_string(std::string_view name, const std::string& fallback = "") const;
  std::vector<int64_t> get_ints(std::string_view name) const;
};

std::string_view loop_kind_name(LoopKind k);  // "affine_range" / "sequential_range"

// A traced kernel. Inputs and outputs are shared_hbm tensors; the body allocates everything else.
struct Kernel {
  std::string name;
  std::vector<BufferPtr> inputs;
  std::vector<BufferPtr> outputs;
  StmtPtr body;
  Span span;
};

}  // namespace neuron
