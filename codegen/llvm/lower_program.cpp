// Engine program -> LLVM module: rolled loops become LLVM loops, affine offsets and rotation
// become integer arithmetic on loop variables and program ids, and every instruction becomes a
// call to its instruction kernel with resolved views and constant dtypes/ops (which kernel and
// which arguments: codegen/instr_calls.hpp, shared with the simulator).
#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Support/raw_ostream.h>

#include <cstring>
#include <map>
#include <set>
#include <type_traits>

#include "llvm_util.hpp"
#include "neuron/base/error.hpp"
#include "neuron/base/target.hpp"
#include "neuron/codegen/instr_calls.hpp"
#include "neuron/codegen/plan.hpp"

namespace neuron::native {
namespace {

// neuron_k_fault's C++ type, for emit_call (the host function is bound by name in jit.cpp).
void neuron_k_fault_decl(int, int, int64_t, int64_t, int64_t, int64_t) {}
// The profile hooks' C++ types (JitOptions::profile).
int64_t neuron_k_prof_now_decl() {
  return 0;
}
void neuron_k_prof_add_decl(int, int64_t) {}

// Calls that a program makes at most kOutlineMaxTrips times each and whose signature repeats
// kOutlineMinRepeats times share one compiled copy (outline_calls.cpp).
constexpr size_t kOutlineMinRepeats = 16;
constexpr int64_t kOutlineMaxTrips = 4;

bool inline_kernel(std::string_view name) {
#define X(n, how) \
  if (name == #n) return std::string_view(#how) == "inline";
  NEURON_INSTR_KERNELS(X)
#undef X
  return false;
}

// The LLVM executor of instr_calls.hpp: operands are NView slots resolved by generated code,
// constants become LLVM constants, and each kernel call is a call instruction.
class Lowering {
 public:
  Lowering(const Program& p, llvm::LLVMContext& ctx, llvm::Module& m, const llvm::Module& kernels,
           const JitOptions& o)
      : p_(p), ctx_(ctx), m_(m), b_(ctx), kernels_(kernels), bitcode_(o.bitcode_kernels),
        partition_blocks_(o.partition_blocks), fold_runs_(o.sbuf_folding),
        fuse_chains_(o.fused_chains), stream_bytes_(o.stream_store_bytes), profile_(o.profile) {
    target_ = &(p.target.empty() ? default_target() : target_by_name(p.target));
    pitch_ = physical_pitch(p, analyze_bounds(p), *target_);
    flags_read_ = reads_psum_flags(p);
    // The fused product writes no PSUM flags for X (they would be read by an auto matmul).
    if (o.transposed_matmul && !flags_read_) transposed_ = transposed_matmuls(p);
    if (fold_runs_) broadcast_ = broadcast_rows(p);
    // The NView type comes from the bitcode, so the ABI has one source of truth.
    const llvm::Function* copy = kernels.getFunction("neuron_k_copy");
    NEURON_ASSERT(copy, "instruction kernel neuron_k_copy missing from the embedded bitcode");
    view_ptr_ = llvm::cast<llvm::PointerType>(copy->getArg(0)->getType());
    view_ty_ = llvm::cast<llvm::StructType>(view_ptr_->getPointerElementType());
  }

  // ---- the executor interface of instr_calls.hpp ----
  using View = llvm::Value*;
  View view(const AccessPattern& ap, const Instr& in, NormLayout& layout) {
    return resolve(ap, in, layout);
  }
  View no_view() { return llvm::ConstantPointerNull::get(view_ptr_); }
  View value_pattern(const NormLayout& l) {
    llvm::Value* slot = new_view();
    store_view(slot, nullptr, nullptr, l.size, l.stride);
    return slot;
  }
  View text(const std::string& s) { return b_.CreateGlobalStringPtr(s); }
  template <class R, class... P, class... A>
  void call(R (*kernel_fn)(P...), const char* name, const A&... args) {
    emit_call(kernel_fn, name, args...);
  }
  using Int = llvm::Value*;
  Int reg(const std::string& r) { return b_.CreateLoad(b_.getInt64Ty(), reg_slot(r)); }
  Int integer(int64_t v) { return i64(v); }
  void set_reg(const std::string& r, Int v) {
    // Registers are 32-bit.
    b_.CreateStore(b_.CreateSExt(b_.CreateTrunc(v, b_.getInt32Ty()), b_.getInt64Ty()),
                   reg_slot(r));
  }
  template <class... P, class... A>
  void call_into(const std::string& r, int64_t (*kernel_fn)(P...), const char* name,
                 const A&... args) {
    llvm::Value* v = emit_call(kernel_fn, name, args...);
    b_.CreateStore(v, reg_slot(r));  // already wrapped to 32 bits by the kernel
  }

  // A program of more than this many instructions becomes a chain of functions of about that
  // many, which the entry calls in order: LLVM's optimizer is superlinear in a function's size,
  // so an unrolled kernel (thousands of instructions, each an inlined kernel) compiles in time
  // that grows with its length instead (docs/native.md). Parts are cut between top-level nodes,
  // after loops of one trip are opened (their variable is 0: the legacy layer emits many). The
  // parts share only memory: program ids and tensor pointers are reloaded per part. Registers
  // live in one function's frame, so a program using registers or runtime loops stays whole.
  static constexpr int64_t kPartInstrs = 256;
  static constexpr int64_t kManyTrips = int64_t{1} << 30;
  int64_t trips_ = 1;  // the trip counts of the loops being emitted, multiplied

  // A top-level node with the one-trip loops around it opened (their variables are 0).
  struct Item {
    const ProgNode* node;
    std::vector<std::string> zero_vars;
  };
  static void open_items(const std::vector<ProgNode>& body, std::vector<std::string>& zeros,
                         std::vector<Item>& out) {
    for (const ProgNode& n : body) {
      if (n.kind == ProgNode::Kind::loop && n.loop_kind != LoopKind::dynamic && n.extent == 1) {
        zeros.push_back(n.var);
        open_items(n.body, zeros, out);
        zeros.pop_back();
      } else {
        out.push_back({&n, zeros});
      }
    }
  }
  static int64_t instrs_in(const ProgNode& n) {
    if (n.kind == ProgNode::Kind::instr) return 1;
    int64_t k = 0;
    for (const ProgNode& c : n.body) k += instrs_in(c);
    return k;
  }

  llvm::Function* run() {
    auto* i8p = b_.getInt8PtrTy();
    auto* i64p = llvm::PointerType::getUnqual(b_.getInt64Ty());
    fty_ = llvm::FunctionType::get(
        b_.getVoidTy(), {llvm::PointerType::getUnqual(i8p), i64p, i64p, i8p, i8p, i8p}, false);
    std::vector<Item> items;
    std::vector<std::string> zeros;
    open_items(p_.body, zeros, items);
    std::vector<int64_t> weight(items.size());  // instructions under each item
    int64_t total = 0;
    for (size_t i = 0; i < items.size(); ++i) total += weight[i] = instrs_in(*items[i].node);
    if (total > kPartInstrs) {
      std::vector<llvm::Function*> parts;
      for (size_t a = 0; a < items.size() && !whole_only_;) {
        auto* part = function(fmt::format("neuron_part_{}", parts.size()),
                              llvm::Function::InternalLinkage);
        part->addFnAttr(llvm::Attribute::NoInline);  // each part is optimized on its own
        int64_t size = 0;
        while (a < items.size() && (size == 0 || size + weight[a] <= kPartInstrs)) {
          // A run of items under the same opened loops is one body (partition blocks see it).
          size_t e = a;
          std::vector<ProgNode> nodes;
          while (e < items.size() && items[e].zero_vars == items[a].zero_vars &&
                 (size == 0 || size + weight[e] <= kPartInstrs)) {
            size += weight[e];
            nodes.push_back(*items[e].node);
            ++e;
          }
          for (const std::string& v : items[a].zero_vars) vars_[v] = i64(0);
          emit_body(nodes);
          for (const std::string& v : items[a].zero_vars) vars_.erase(v);
          a = e;
        }
        b_.CreateRetVoid();
        parts.push_back(part);
      }
      if (!whole_only_) {
        llvm::Function* entry = function("neuron_entry", llvm::Function::ExternalLinkage);
        std::vector<llvm::Value*> args;
        for (auto& arg : entry->args()) args.push_back(&arg);
        for (llvm::Function* part : parts) b_.CreateCall(part, args);
        b_.CreateRetVoid();
        return entry;
      }
      for (llvm::Function* part : parts) part->eraseFromParent();  // registers: one function
    }
    llvm::Function* entry = function("neuron_entry", llvm::Function::ExternalLinkage);
    emit_body(p_.body);
    b_.CreateRetVoid();
    return entry;
  }

 private:
  // A new function of the entry's type, made current: its arguments loaded (program ids, tensor
  // pointers, SBUF, PSUM, flags) and its block of allocas started.
  llvm::Function* function(const std::string& name, llvm::GlobalValue::LinkageTypes linkage) {
    fn_ = llvm::Function::Create(fty_, linkage, name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    for (unsigned i = 0; i < 6; ++i) fn_->addParamAttr(i, llvm::Attribute::NoAlias);
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    b_.SetInsertPoint(entry);
    llvm::Value* tensors = fn_->getArg(0);
    llvm::Value* pids = fn_->getArg(1);
    llvm::Value* npids = fn_->getArg(2);
    sbuf_ = fn_->getArg(3);
    psum_ = fn_->getArg(4);
    flags_ = fn_->getArg(5);
    vars_.clear();
    regs_.clear();
    tensors_.clear();
    for (int a = 0; a < 4; ++a) {
      vars_[program_id_var(a)] =
          b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), pids, a));
      vars_[num_programs_var(a)] =
          b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), npids, a));
    }
    // Tensor pointers are loaded where first used (tensor()): a part that loaded every one of
    // a kernel's thousands of tensors spent most of its instructions on it.
    tensors_.assign(p_.tensors.size(), nullptr);
    tensors_arg_ = tensors;
    prologue_end_ = &b_.GetInsertBlock()->back();
    alloca_point_ = b_.GetInsertBlock();
    fold_buf_ = nullptr;
    return fn_;
  }

  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }

  // Tensor t's pointer, loaded in the function's prologue (so it dominates every later use).
  llvm::Value* tensor(size_t t) {
    if (!tensors_[t]) {
      auto* i8p = b_.getInt8PtrTy();
      llvm::IRBuilder<> pb(ctx_);
      pb.SetInsertPoint(alloca_point_, std::next(prologue_end_->getIterator()));
      tensors_[t] = pb.CreateLoad(i8p, pb.CreateConstGEP1_64(i8p, tensors_arg_, t));
    }
    return tensors_[t];
  }

  llvm::Value* eval(const Affine& a, const Span& span) {
    llvm::Value* v = i64(a.constant);
    for (auto& t : a.terms) {
      if (is_register_var(t.var)) {
        v = b_.CreateAdd(v, b_.CreateMul(reg(t.var), i64(t.coeff)));
        continue;
      }
      auto it = vars_.find(t.var);
      NEURON_ASSERT(it != vars_.end(), "engine program uses unknown variable '{}' at {}", t.var,
                    span.str());
      v = b_.CreateAdd(v, b_.CreateMul(it->second, i64(t.coeff)));
    }
    return v;
  }

  // A fresh NView slot in the entry block (so SROA sees every one of them).
  llvm::Value* new_view() {
    llvm::IRBuilder<> eb(ctx_);
    eb.SetInsertPoint(alloca_point_, alloca_point_->getFirstInsertionPt());
    return eb.CreateAlloca(view_ty_);
  }

  void store_view(llvm::Value* slot, llvm::Value* base, llvm::Value* flags, const int64_t* sizes,
                  const int64_t* strides) {
    if (!bitcode_) {
      // Host kernels read the view from memory, so nothing is gained by storing its constant
      // fields one by one: copying them from one shared constant takes 5 IR instructions a
      // view instead of 24, and a long unrolled program's lowering, verification and machine
      // code shrink with them (docs/native.md). Inlined bitcode kernels keep the stores,
      // which SROA turns into constants they specialize on.
      const llvm::DataLayout& dl = m_.getDataLayout();
      const llvm::Align align = dl.getABITypeAlign(view_ty_);
      b_.CreateMemCpy(slot, align, view_template(sizes, strides), align,
                      dl.getTypeAllocSize(view_ty_).getFixedSize());
      if (base) b_.CreateStore(base, b_.CreateStructGEP(view_ty_, slot, 0));
      if (flags) b_.CreateStore(flags, b_.CreateStructGEP(view_ty_, slot, 1));
      return;
    }
    store_view_fields(b_, view_ty_, slot, base, flags, {sizes, sizes + kDims},
                      {strides, strides + kDims});
  }

  // A constant NView with null pointers and these sizes and strides, one per distinct shape.
  llvm::Constant* view_template(const int64_t* sizes, const int64_t* strides) {
    std::vector<int64_t> key(sizes, sizes + kDims);
    key.insert(key.end(), strides, strides + kDims);
    llvm::GlobalVariable*& g = view_templates_[key];
    if (g) return g;
    auto* i8p = b_.getInt8PtrTy();
    auto array = [&](const int64_t* v) {
      std::vector<llvm::Constant*> c;
      for (int i = 0; i < kDims; ++i) c.push_back(b_.getInt64(static_cast<uint64_t>(v[i])));
      return llvm::ConstantArray::get(llvm::ArrayType::get(b_.getInt64Ty(), kDims), c);
    };
    auto* init = llvm::ConstantStruct::get(
        view_ty_, {llvm::ConstantPointerNull::get(i8p), llvm::ConstantPointerNull::get(i8p),
                   array(sizes), array(strides)});
    g = new llvm::GlobalVariable(m_, view_ty_, /*isConstant=*/true,
                                 llvm::GlobalValue::PrivateLinkage, init, "view");
    g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    return g;
  }

  // The call of one kernel; when an operand of the instruction was found out of bounds at run
  // time (guard_ false), the call is skipped: the fault is recorded and the run reports it.
  template <class R, class... P, class... A>
  llvm::Value* emit_call(R (*)(P...), const char* name, const A&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel call passes every parameter");
    llvm::Type* ret = std::is_void_v<R> ? b_.getVoidTy() : type<R>();
    llvm::Function* f = kernel(name, llvm::FunctionType::get(ret, {type<P>()...}, false));
    unsigned i = 0;
    std::vector<llvm::Value*> vals{constant(f->getFunctionType()->getParamType(i++), args)...};
    llvm::Value* guard = guard_;
    guard_ = nullptr;
    if (!guard) return tag(b_.CreateCall(f, vals));
    auto* run = llvm::BasicBlock::Create(ctx_, "in_bounds", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "after", fn_);
    llvm::BasicBlock* skip = b_.GetInsertBlock();
    b_.CreateCondBr(guard, run, done);
    b_.SetInsertPoint(run);
    llvm::Value* r = tag(b_.CreateCall(f, vals));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    if (std::is_void_v<R>) return nullptr;
    llvm::PHINode* phi = b_.CreatePHI(ret, 2);
    phi->addIncoming(r, run);
    phi->addIncoming(llvm::Constant::getNullValue(ret), skip);
    return phi;
  }

  // How many times a program runs this call: the trip counts of the loops around it (runtime
  // loops count as many), for outline_repeated_calls.
  llvm::CallInst* tag(llvm::CallInst* call) {
    call->setMetadata(kTripsMetadata,
                      llvm::MDNode::get(ctx_, llvm::ConstantAsMetadata::get(b_.getInt64(
                                                  static_cast<uint64_t>(trips_)))));
    return call;
  }

  // A register's slot (an i64 in the entry block, 0 when the program starts).
  llvm::Value* reg_slot(const std::string& r) {
    whole_only_ = true;  // registers live in one function's frame (run)
    auto it = regs_.find(r);
    if (it != regs_.end()) return it->second;
    llvm::IRBuilder<> eb(ctx_);
    eb.SetInsertPoint(alloca_point_, alloca_point_->getFirstInsertionPt());
    llvm::Value* slot = eb.CreateAlloca(b_.getInt64Ty(), nullptr, r);
    eb.CreateStore(i64(0), slot);
    return regs_[r] = slot;
  }

  // Whether an expression depends on a register or the variable of a dynamic loop.
  bool dynamic(const Affine& a) const { return set_at_run_time(a, dynamic_vars_); }

  // Checks, at run time, an access whose offset depends on registers or dynamic loops (the
  // others were checked per launch): out of bounds records a fault and skips the instruction.
  // On chip, `slot` is the rotating slot's byte offset (null: none): an access inside a tile
  // whose allocation is known is checked against the tile's bytes and partitions.
  void check_dynamic(const AccessPattern& ap, const Instr& in, llvm::Value* offset,
                     llvm::Value* slot = nullptr) {
    if (!placed_at_run_time(ap, dynamic_vars_)) return;
    const bool chip = is_on_chip(ap.memory);
    const bool indirect = in.op == Opcode::dma_copy &&
                          in.args.indirect != InstrArgs::Indirect::none &&
                          &ap == (in.args.indirect == InstrArgs::Indirect::src ? &in.src[0] : &in.dst);
    int64_t lo = 0, hi = 0;
    for (size_t i = chip ? 1 : 0; i < ap.dims.size(); ++i) {
      const int64_t size = i == 0 && indirect ? in.args.indirect_rows : ap.dims[i].size;
      const int64_t reach = ap.dims[i].stride * (size - 1);
      (reach < 0 ? lo : hi) += reach;
    }
    const int64_t es = dtype_bytes(ap.dtype), unit = chip ? es : 1;
    const int64_t limit =
        chip ? bytes_per_partition(*target_, ap.memory) : [&] {
          int64_t n = 1;
          for (int64_t d : p_.tensors.at(static_cast<size_t>(ap.tensor)).shape) n *= d;
          return n;
        }();
    int64_t operand = -1;
    for (size_t i = 0; i < in.src.size(); ++i)
      if (&ap == &in.src[i]) operand = static_cast<int64_t>(i);
    // A direct dma_copy with oob_mode skip: its HBM side out of range skips the copy, no fault
    // (the simulator's Machine::skipped_copy).
    const bool skip = in.op == Opcode::dma_copy && in.args.oob_skip && !indirect && !chip;
    // first >= from and last < lim (the fault reports lim).
    auto range_check = [&](llvm::Value* first, llvm::Value* last, llvm::Value* from,
                           llvm::Value* lim, int kind) {
      llvm::Value* ok =
          b_.CreateAnd(b_.CreateICmpSGE(first, from), b_.CreateICmpSLT(last, lim));
      if (skip) {
        guard_ = guard_ ? b_.CreateAnd(guard_, ok) : ok;
        return;
      }
      auto* bad = llvm::BasicBlock::Create(ctx_, "out_of_bounds", fn_);
      auto* next = llvm::BasicBlock::Create(ctx_, "checked", fn_);
      b_.CreateCondBr(ok, next, bad);
      b_.SetInsertPoint(bad);
      emit_call(&neuron_k_fault_decl, "fault", kind, in.id, first, last, operand, lim);
      b_.CreateBr(next);
      b_.SetInsertPoint(next);
      guard_ = guard_ ? b_.CreateAnd(guard_, ok) : ok;
    };
    llvm::Value* first = b_.CreateAdd(offset, i64(lo * unit));
    llvm::Value* last = b_.CreateAdd(offset, i64(hi * unit + unit - 1));
    llvm::Value* saved = guard_;
    guard_ = nullptr;
    const bool tile = chip && ap.alloc.known();
    if (tile) {
      llvm::Value* at = slot ? slot : i64(0);
      range_check(first, last, b_.CreateAdd(at, i64(ap.alloc.lo)),
                  b_.CreateAdd(at, i64(ap.alloc.hi)), kFaultTile);
    } else {
      range_check(first, last, i64(0), i64(limit), kFaultAccess);
    }
    llvm::Value* ok = guard_;
    if (chip) {
      guard_ = nullptr;
      llvm::Value* p0 = eval(ap.partition, in.span);
      const int64_t pspan = ap.dims.empty() ? 0 : ap.dims[0].stride * (ap.dims[0].size - 1);
      range_check(b_.CreateAdd(p0, i64(std::min<int64_t>(0, pspan))),
                  b_.CreateAdd(p0, i64(std::max<int64_t>(0, pspan))), i64(0),
                  i64(tile ? ap.alloc.partitions : target_->partitions), kFaultPartition);
      ok = b_.CreateAnd(ok, guard_);
    }
    guard_ = saved ? b_.CreateAnd(saved, ok) : ok;
  }

  // The LLVM type of a kernel parameter.
  template <class P>
  llvm::Type* type() {
    if constexpr (std::is_same_v<P, const NView*>) return view_ptr_;
    else if constexpr (std::is_same_v<P, const char*>) return b_.getInt8PtrTy();
    else if constexpr (std::is_same_v<P, double>) return b_.getDoubleTy();
    else return b_.getIntNTy(8 * sizeof(P));
  }
  template <class A>
  llvm::Value* constant(llvm::Type* t, const A& x) {
    if constexpr (std::is_same_v<A, llvm::Value*>) return x;
    else if constexpr (std::is_floating_point_v<A>) return llvm::ConstantFP::get(t, x);
    else return llvm::ConstantInt::get(t, static_cast<uint64_t>(static_cast<int64_t>(x)), true);
  }
  // An inline kernel is linked from the bitcode (its declared type must be the C++ one); the
  // others are called in the library by their host alias ("neuron_host_k_*", an absolute symbol
  // in the JIT, see jit.cpp), so linking the bitcode leaves them alone.
  llvm::Function* kernel(const char* name, llvm::FunctionType* type) {
    auto it = fns_.find(name);
    if (it != fns_.end()) return it->second;
    const bool link = bitcode_ && inline_kernel(name);
    const std::string callee = (link ? "neuron_k_" : "neuron_host_k_") + std::string(name);
    if (link) {
      const llvm::Function* bc = kernels_.getFunction(callee);
      NEURON_ASSERT(bc && bc->getFunctionType() == type,
                    "instruction kernel {} is missing from the embedded bitcode or its type "
                    "differs from its C++ declaration",
                    callee);
    }
    auto* f = llvm::cast<llvm::Function>(m_.getOrInsertFunction(callee, type).getCallee());
    fns_[name] = f;
    return f;
  }

  // Resolves a pattern for the current loop iteration into a view.
  llvm::Value* resolve(const AccessPattern& ap, const Instr& in, NormLayout& l) {
    if (const Fold* f = folded(ap)) {
      // A run-local range: this block's rows in the run's buffer (no block offset: every
      // block reuses it).
      l = normalize(ap, in, block_->fold_pitch);
      llvm::Value* base =
          b_.CreateConstGEP1_64(b_.getInt8Ty(), fold_buf_, f->at + ap.offset.constant - f->lo);
      l.count = l.count / l.size[0] * block_->size;
      l.size[0] = block_->size;
      llvm::Value* slot = new_view();
      store_view(slot, base, nullptr, l.size, l.stride);
      return slot;
    }
    const bool chip = is_on_chip(ap.memory);
    const BroadcastRows* one_row = shares_one_row(ap);
    const int64_t pb = !chip ? 0 : ap.memory == Memory::psum ? pitch_.psum : pitch_.sbuf;
    l = normalize(ap, in, one_row ? 0 : pb);  // partitions 0 bytes apart: one row serves all
    llvm::Value *base, *flags = nullptr;
    if (chip) {
      llvm::Value* off = eval(ap.offset, in.span);
      llvm::Value* slot = nullptr;
      if (!ap.rotation.var.empty() && ap.rotation.count > 1) {
        auto it = vars_.find(ap.rotation.var);
        NEURON_ASSERT(it != vars_.end(), "rotation over unknown variable '{}' at {}",
                      ap.rotation.var, in.span.str());
        llvm::Value* r = b_.CreateURem(it->second, i64(ap.rotation.count));
        slot = b_.CreateMul(r, i64(ap.rotation.bytes));
        off = b_.CreateAdd(off, slot);
      }
      check_dynamic(ap, in, off, slot);
      llvm::Value* partition = one_row ? i64(one_row->partition) : eval(ap.partition, in.span);
      llvm::Value* byte = b_.CreateAdd(b_.CreateMul(partition, i64(pb)), off);
      const bool ps = ap.memory == Memory::psum;
      base = b_.CreateGEP(b_.getInt8Ty(), ps ? psum_ : sbuf_, byte);
      if (ps && flags_read_) flags = b_.CreateGEP(b_.getInt8Ty(), flags_, byte);
    } else {
      NEURON_ASSERT(ap.tensor >= 0 && ap.tensor < static_cast<int>(tensors_.size()),
                    "pattern names tensor {} of {} at {}", ap.tensor, tensors_.size(),
                    in.span.str());
      llvm::Value* elem = eval(ap.offset, in.span);
      check_dynamic(ap, in, elem);
      llvm::Value* off = b_.CreateMul(elem, i64(dtype_bytes(ap.dtype)));
      base = b_.CreateGEP(b_.getInt8Ty(), tensor(static_cast<size_t>(ap.tensor)), off);
    }
    if (writes_one_row(in) && (&ap == &in.dst || (!in.src.empty() && &ap == &in.src[0]))) {
      l.count /= l.size[0];  // one partition of the destination and of its repeated source
      l.size[0] = 1;
    }
    // A contracting matmul's result gets every block's rows of K (emit_blocked_matmul): whole.
    if (block_ && !(in.op == Opcode::nc_matmul && &ap == &in.dst)) {
      // Inside a partition-blocked run (emit_run): this block's partitions of the view.
      NEURON_ASSERT(l.size[0] == block_->partitions, "blocked operand spans {} partitions, not {}",
                    l.size[0], block_->partitions);
      llvm::Value* skip = b_.CreateMul(block_->first, i64(l.stride[0]));
      base = b_.CreateGEP(b_.getInt8Ty(), base, skip);
      if (flags) flags = b_.CreateGEP(b_.getInt8Ty(), flags, skip);
      l.count = l.count / l.size[0] * block_->size;
      l.size[0] = block_->size;
    }
    llvm::Value* slot = new_view();
    store_view(slot, base, flags, l.size, l.stride);
    return slot;
  }

  // ---- partition blocks ----
  // Consecutive partition-local instructions (plan.hpp: each partition's results read only the
  // same partition of the operands) run a block of partitions at a time: all of them on
  // partitions [0, B), then on [B, 2B), ... So the tiles they hand each other stay in the core's
  // caches instead of every instruction streaming whole [128, F] tiles through memory. The
  // results are the simulator's bits: no partition reads what another block writes.
  static constexpr int64_t kTileBytes = 256 * 1024;  // an operand this large leaves the caches
  // ... and one in (kL1TileBytes, 2 * kL1TileBytes] leaves L1, which matters in runs of at
  // least kL1RunInstrs instructions (block_size).
  static constexpr int64_t kL1TileBytes = 32 * 1024;
  static constexpr size_t kL1RunInstrs = 16;
  static constexpr int64_t kBlockBytes = 64 * 1024;  // all operands' rows of one block
  static constexpr size_t kMaxRun = 64;              // instructions (bounds the overlap checks)

  // A run-local range (folded_sbuf.cpp) at byte `at` of each row of the run's buffer.
  struct Fold {
    int64_t partition, lo, hi, at;
  };
  struct Block {
    llvm::Value* first;  // the block's first partition (of the run's operands)
    int64_t size;        // partitions per block
    int64_t partitions;  // the run's partitions
    std::vector<Fold> folds;
    int64_t fold_pitch = 0;  // bytes between rows of the run's buffer
  };
  std::optional<Block> block_;
  static constexpr int64_t kFoldBytes = 96 * 1024;  // the per-function run buffer
  llvm::Value* fold_buf_ = nullptr;                 // allocated on first use per function

  // The broadcast rows (folded_sbuf.cpp) holding `ap`, if any: read from their first row.
  const BroadcastRows* shares_one_row(const AccessPattern& ap) const {
    if (ap.memory != Memory::sbuf || !ap.offset.is_constant() || !ap.partition.is_constant())
      return nullptr;
    for (const BroadcastRows& r : broadcast_)
      if (ap.partition.constant >= r.partition && ap.partition.constant < r.partition + r.count &&
          ap.offset.constant >= r.lo && ap.offset.constant < r.hi)
        return &r;
    return nullptr;
  }
  std::vector<BroadcastRows> broadcast_;
  // A write of broadcast rows (only partition-broadcast writes fill them): its one row, once.
  bool writes_one_row(const Instr& in) const {
    return opcode_has_dst(in.op) && shares_one_row(in.dst);
  }

  // The run-local range holding `ap`, if any.
  const Fold* folded(const AccessPattern& ap) const {
    if (!block_ || ap.memory != Memory::sbuf || !ap.offset.is_constant() ||
        !ap.partition.is_constant())
      return nullptr;
    for (const Fold& f : block_->folds)
      if (ap.partition.constant == f.partition && ap.offset.constant >= f.lo &&
          ap.offset.constant < f.hi)
        return &f;
    return nullptr;
  }

  // Lays out the run-local ranges of the run body[i, j) in rows of the run's buffer: each range
  // 64-byte aligned, rows an odd number of cache lines apart (so a block's rows do not share
  // L1 sets), as many ranges as fit kFoldBytes.
  void plan_folds(const std::vector<RunLocal>& ranges, Block& blk) {
    constexpr int64_t kLine = 64;
    int64_t at = 0;
    for (const RunLocal& r : ranges) {
      const int64_t len = (r.hi - r.lo + kLine - 1) / kLine * kLine;
      int64_t pitch = at + len;
      if ((pitch / kLine) % 2 == 0) pitch += kLine;
      if (pitch * blk.size > kFoldBytes) continue;
      blk.folds.push_back({r.partition, r.lo, r.hi, at});
      at += len;
      blk.fold_pitch = pitch;
    }
    if (blk.folds.empty() || fold_buf_) return;
    llvm::IRBuilder<> eb(ctx_);
    eb.SetInsertPoint(alloca_point_, alloca_point_->getFirstInsertionPt());
    auto* buf = eb.CreateAlloca(llvm::ArrayType::get(b_.getInt8Ty(), kFoldBytes), nullptr, "run");
    buf->setAlignment(llvm::Align(kLine));
    fold_buf_ = eb.CreateConstGEP2_64(buf->getAllocatedType(), buf, 0, 0);
  }

  // Whether body[j] is a matmul the blocked run may take (plan.hpp contracting_matmul): not
  // where the program reads PSUM flags (a block's call would set them as a whole
  // instruction's does) nor the product of a transposed triple. (A next matmul marked
  // same_moving would reuse the last block's packed operand, but only bf16 x bf16 reuses one,
  // and those never join a block.)
  bool blocked_matmul(const Instr& in, int64_t& partitions) const {
    if (flags_read_ || !contracting_matmul(in, partitions)) return false;
    for (const auto& [id, t] : transposed_)
      if (t.matmul_id == in.id) return false;
    return true;
  }

  // The instructions from body[i] on that can run as one blocked run (maybe just body[i]).
  size_t run_end(const std::vector<ProgNode>& body, size_t i, int64_t& partitions) const {
    std::vector<std::pair<const AccessPattern*, bool>> seen;
    std::vector<const AccessPattern*> sums;  // the run's matmul results: no other view on them
    size_t j = i;
    for (; j < body.size() && j < i + kMaxRun && body[j].kind == ProgNode::Kind::instr; ++j) {
      const Instr& in = body[j].instr;
      int64_t p = 0;
      const bool matmul = blocked_matmul(in, p);
      if ((!matmul && !partition_local(in, p)) || writes_one_row(in) || (j > i && p != partitions))
        break;
      auto ops = operands_of(in);
      // A matmul's result collects every block's rows of K, so nothing else of the run may
      // touch it (and it may touch nothing the run has seen, nor its own operands).
      bool ok = true;
      for (auto& a : ops) {
        for (const AccessPattern* s : sums) ok = ok && !may_overlap(*a.first, *s);
        if (matmul && a.first == &in.dst)
          for (auto& b : seen) ok = ok && !may_overlap(in.dst, *b.first);
        if (matmul && a.first != &in.dst) ok = ok && !may_overlap(in.dst, *a.first);
      }
      if (matmul) {
        sums.push_back(&in.dst);
        ops.erase(ops.begin());  // the rest of the checks are for partition-local views
      }
      // A view sharing bytes with one written in the run must map partitions the same way,
      // else one block could read what another block writes (or the reverse).
      for (auto& a : ops) {
        for (auto& b : seen)
          if ((a.second || b.second) && may_overlap(*a.first, *b.first) &&
              !same_partition_map(*a.first, *b.first))
            ok = false;
        for (auto& b : ops)
          if (&a != &b && (a.second || b.second) && may_overlap(*a.first, *b.first) &&
              !same_partition_map(*a.first, *b.first))
            ok = false;
      }
      if (!ok) break;
      partitions = p;
      seen.insert(seen.end(), ops.begin(), ops.end());
    }
    return j;
  }

  // Partitions per block: `partitions` (no blocking) unless some operand of the run is larger
  // than kTileBytes (then it leaves the caches between instructions; smaller ones stay, and
  // blocking them only adds calls: attention's [128, 512] fp32 score tiles ran ~6% slower
  // blocked), or the run is long (kL1RunInstrs), has no matmul, and its widest operand is
  // just over L1, (kL1TileBytes, 2 * kL1TileBytes]: a FlexAttention key tile's 18-21
  // instructions on [128, 128] fp32 tiles each streamed 64 KiB through L2 (bf16 ALiBi 15.4 ->
  // 13.2 ms). Shorter runs lost more to the blocks' calls than they gained (softmax [8192,
  // 128] fp32, 6 instructions, 20% slower), blocking every run over 32 KiB made attention's
  // bf16 forward 12% slower, and with its matmuls split by blocks its fp32 forward 31 -> 50
  // ms. Else the largest divisor of `partitions` whose rows of all the run's operands together
  // fit kBlockBytes (at least one partition). Sizes from docs/performance.md's A/B.
  int64_t block_size(const std::vector<ProgNode>& body, size_t i, size_t j,
                     int64_t partitions) const {
    int64_t rows = 0, widest = 0;
    bool matmul = false;
    for (size_t k = i; k < j; ++k) {
      int64_t p = 0;
      matmul = matmul || blocked_matmul(body[k].instr, p);
      for (auto [ap, written] : operands_of(body[k].instr)) {
        int64_t n = dtype_bytes(ap->dtype);
        for (size_t d = 1; d < ap->dims.size(); ++d) n *= ap->dims[d].size;
        rows += n;
        widest = std::max(widest, n);
      }
    }
    const int64_t tile = widest * partitions;
    const bool past_l1 =
        !matmul && j - i >= kL1RunInstrs && tile > kL1TileBytes && tile <= 2 * kL1TileBytes;
    if (tile <= kTileBytes && !past_l1) return partitions;
    int64_t best = 1;
    for (int64_t b = 1; b <= partitions; ++b)
      if (partitions % b == 0 && b * rows <= kBlockBytes) best = b;
    return best;
  }

  // One instruction's calls, timed when profiling (a call each side: the clock reads cannot
  // move across the opaque kernel calls between them).
  void emit_instr(const Instr& in) {
    if (!profile_) return call_instr(*this, in);
    llvm::Value* start = emit_call(&neuron_k_prof_now_decl, "prof_now");
    call_instr(*this, in);
    emit_call(&neuron_k_prof_add_decl, "prof_add", in.id, start);
  }

  // A run's instructions as the native backend executes them: with its loads into run-local
  // ranges forwarded (folded_sbuf.cpp) when folding is on, and the ranges left for the run's
  // buffer.
  struct Run {
    ForwardedRun fw;
    std::vector<RunLocal> ranges;
  };
  Run plan_run(const std::vector<ProgNode>& body, size_t i, size_t j) {
    Run run;
    if (fold_runs_ && j >= i + 2) {
      if (!sbuf_accesses_) sbuf_accesses_ = sbuf_accesses(p_);  // once per program
      run.ranges = run_local_ranges(p_, body, i, j, &*sbuf_accesses_);
      run.fw = forward_loads(
          body, i, j, run.ranges, [this](const Affine& a) { return dynamic(a); }, &*sbuf_accesses_);
      return run;
    }
    for (size_t k = i; k < std::max(j, i + 1); ++k) run.fw.instrs.push_back(body[k].instr);
    run.fw.dropped.assign(run.fw.instrs.size(), false);
    return run;
  }
  void emit_instrs(const Run& run) {
    std::vector<Chain> chains;
    if (fuse_chains_ && bitcode_ && run.fw.instrs.size() >= 2)
      chains = plan_chains(run.fw, run.ranges, [this](const Affine& a) { return dynamic(a); });
    size_t next = 0;
    for (size_t k = 0; k < run.fw.instrs.size(); ++k) {
      if (run.fw.dropped[k]) continue;
      if (next < chains.size() && chains[next].steps[0] == k) {
        const Chain& c = chains[next++];
        if (emit_chain(run.fw.instrs, c)) {
          k = c.reduce ? *c.reduce : c.steps.back();
          continue;
        }
      }
      if (block_ && run.fw.instrs[k].op == Opcode::nc_matmul)
        emit_blocked_matmul(run.fw.instrs[k]);
      else
        emit_instr(run.fw.instrs[k]);
    }
  }

  // A matmul in a blocked run (run_end) adds the block's rows of K to its result: the first
  // block overwrites when the instruction does and the others accumulate, so every element
  // gets the instruction's fma chain in increasing k. The moving operand changes from block to
  // block, so no call may reuse the last one's packed copy.
  void emit_blocked_matmul(const Instr& in) {
    Instr m = in;
    m.args.same_moving = false;
    if (m.args.accumulate == 1) return emit_instr(m);
    auto* first = llvm::BasicBlock::Create(ctx_, "matmul.first", fn_);
    auto* rest = llvm::BasicBlock::Create(ctx_, "matmul.rest", fn_);
    auto* join = llvm::BasicBlock::Create(ctx_, "matmul.join", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(block_->first, i64(0)), first, rest);
    b_.SetInsertPoint(first);
    emit_instr(m);
    b_.CreateBr(join);
    b_.SetInsertPoint(rest);
    m.args.accumulate = 1;
    emit_instr(m);
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
  }

  // Whether a chain writing `d` last writes it with non-temporal stores (instr_kernels.cpp
  // each_streamed): d is a kernel output of at least JitOptions::stream_store_bytes, written
  // once and returned, which would only push data that is read again out of the caches.
  bool streams(const AccessPattern& d) const {
    if (stream_bytes_ <= 0 || d.tensor < 0) return false;
    const TensorDecl& t = p_.tensors[static_cast<size_t>(d.tensor)];
    if (t.role != TensorDecl::Role::output) return false;
    int64_t bytes = dtype_bytes(t.dtype);
    for (int64_t n : t.shape) bytes *= n;
    return bytes >= stream_bytes_;
  }

  // One call of neuron_k_chain for chain `c` (fused_chains.cpp), with the views each step's
  // own call would resolve; false (nothing emitted but dead view slots) when the walked views
  // do not share one loop nest. A profile bills the chain to its first instruction.
  bool emit_chain(const std::vector<Instr>& instrs, const Chain& c) {
    std::vector<int64_t> code(kChainCodeWords, 0);
    std::vector<llvm::Value*> views(kChainViews, no_view());
    std::vector<NormLayout> layouts(2 * c.steps.size() + 1);
    std::vector<const NormLayout*> walked;
    NormLayout lc;
    auto bits = [](double d) {
      int64_t i;
      std::memcpy(&i, &d, sizeof i);
      return i;
    };
    code[0] = static_cast<int64_t>(c.steps.size());
    for (size_t s = 0; s < c.steps.size(); ++s) {
      const Instr& in = instrs[c.steps[s]];
      const InstrArgs& a = in.args;
      int64_t* f = &code[1 + s * kChainFields];
      llvm::Value** v = &views[1 + 4 * s];
      if (s == 0) {
        views[0] = resolve(*c.source, in, layouts[0]);
        walked.push_back(&layouts[0]);
        f[kChXdt] = static_cast<int64_t>(c.source->dtype);
      } else {
        f[kChXdt] = static_cast<int64_t>(instrs[c.steps[s - 1]].dst.dtype);
      }
      f[kChDdt] = static_cast<int64_t>(in.dst.dtype);
      f[kChStore] = c.store[s];
      f[kChStream] = s + 1 == c.steps.size() && c.store[s] && !c.reduce && streams(in.dst);
      if (c.store[s]) {
        v[0] = resolve(in.dst, in, layouts[1 + 2 * s]);
        walked.push_back(&layouts[1 + 2 * s]);
      }
      size_t next = 1;
      auto column = [&](bool tile, int field, int64_t dtype_field) {
        if (!tile) return;
        const AccessPattern& ap = in.src[next++];
        v[field] = resolve(ap, in, lc);
        f[dtype_field] = static_cast<int64_t>(ap.dtype);
      };
      switch (in.op) {
        case Opcode::tensor_scalar:
          f[kChKind] = kChTensorScalar;
          f[kChOp0] = static_cast<int64_t>(a.op0);
          f[kChOp1] = static_cast<int64_t>(a.op1);
          f[kChRev0] = a.reverse0;
          f[kChRev1] = a.reverse1;
          f[kChImm0] = bits(a.imm0);
          f[kChImm1] = bits(a.imm1);
          column(a.operand0_tile, 2, kChC0dt);
          column(a.operand1_tile, 3, kChC1dt);
          break;
        case Opcode::tensor_tensor:
          f[kChKind] = kChTensorTensor;
          f[kChOp0] = static_cast<int64_t>(a.op0);
          f[kChOdt] = static_cast<int64_t>(c.other[s]->dtype);
          f[kChOtherFirst] = c.other_first[s];
          v[1] = resolve(*c.other[s], in, layouts[2 + 2 * s]);
          walked.push_back(&layouts[2 + 2 * s]);
          break;
        case Opcode::activation:
          f[kChKind] = kChActivation;
          f[kChOp0] = static_cast<int64_t>(a.func);
          f[kChImm0] = bits(0.0);
          f[kChImm1] = bits(a.scale);
          column(a.bias_tile, 2, kChC0dt);
          column(a.scale_tile, 3, kChC1dt);
          break;
        default:
          f[kChKind] = kChCopy;
      }
    }
    if (c.reduce) {
      const Instr& r = instrs[*c.reduce];
      int64_t* f = &code[kChainReduceAt];
      f[kChRedOn] = 1;
      f[kChRedOp] = static_cast<int64_t>(r.args.reduce_op);
      f[kChRedDdt] = static_cast<int64_t>(r.dst.dtype);
      f[kChRedNegate] = r.args.negate;
      NormLayout lr;
      views[kChainViews - 1] = resolve(r.dst, r, lr);
    }
    if (!same_shape(walked)) return false;

    // One global per distinct code, so that chains doing the same have equal arguments (an
    // unrolled program's repeated chains then share one compiled copy: outline_calls.cpp).
    llvm::GlobalVariable*& code_g = chain_codes_[code];
    if (!code_g)
      code_g = new llvm::GlobalVariable(
          m_, llvm::ArrayType::get(b_.getInt64Ty(), code.size()), /*isConstant=*/true,
          llvm::GlobalValue::PrivateLinkage,
          llvm::ConstantDataArray::get(
              ctx_, llvm::ArrayRef<uint64_t>(reinterpret_cast<const uint64_t*>(code.data()),
                                             code.size())),
          "chain");
    llvm::IRBuilder<> eb(ctx_);
    eb.SetInsertPoint(alloca_point_, alloca_point_->getFirstInsertionPt());
    auto* views_ty = llvm::ArrayType::get(view_ptr_, views.size());
    llvm::Value* slots = eb.CreateAlloca(views_ty, nullptr, "chain.views");
    for (size_t k = 0; k < views.size(); ++k)
      b_.CreateStore(views[k], b_.CreateConstGEP2_32(views_ty, slots, 0, static_cast<unsigned>(k)));
    llvm::Value* start = profile_ ? emit_call(&neuron_k_prof_now_decl, "prof_now") : nullptr;
    emit_call(NEURON_KERNEL(chain), b_.CreateBitCast(code_g, b_.getInt8PtrTy()),
              b_.CreateBitCast(slots, b_.getInt8PtrTy()));
    if (profile_) emit_call(&neuron_k_prof_add_decl, "prof_add", instrs[c.steps[0]].id, start);
    return true;
  }

  void emit_run(const Run& run, int64_t partitions, int64_t size) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, "pblock", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "pblock.end", fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, "pblock");
    iv->addIncoming(i64(0), pre);
    Block blk{b_.CreateMul(iv, i64(size)), size, partitions};
    if (fold_runs_) plan_folds(run.ranges, blk);
    block_ = std::move(blk);
    emit_instrs(run);  // (each block is part of one instruction: trips_ counts instructions)
    block_.reset();
    llvm::Value* next = b_.CreateAdd(iv, i64(1), "", true, true);
    iv->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next, i64(partitions / size)), loop, exit);
    b_.SetInsertPoint(exit);
  }

  // The transposed matmul starting at body[i] (plan.hpp), as one neuron_k_matmul_at call;
  // false (nothing emitted) when it is not one or its operands are not in the fast layout.
  bool emit_transposed_matmul(const std::vector<ProgNode>& body, size_t i) {
    auto it = transposed_.find(body[i].instr.id);
    if (it == transposed_.end() || i + 2 >= body.size() ||
        body[i + 1].kind != ProgNode::Kind::instr || body[i + 2].kind != ProgNode::Kind::instr ||
        body[i + 1].instr.id != it->second.copy_id || body[i + 2].instr.id != it->second.matmul_id)
      return false;
    const Instr &t = body[i].instr, &m = body[i + 2].instr;
    const AccessPattern &S = t.src[0], &V = m.src[1], &D = m.dst;
    // The layouts resolve() will give (no run is open, and broadcast rows change them).
    if (shares_one_row(S) || shares_one_row(V)) return false;
    NormLayout ls = normalize(S, t, pitch_.sbuf), lv = normalize(V, m, pitch_.sbuf),
               ld = normalize(D, m, pitch_.psum);
    if (!matmul_fast_layout(m, ld, ls, lv)) return false;
    llvm::Value* start = profile_ ? emit_call(&neuron_k_prof_now_decl, "prof_now") : nullptr;
    llvm::Value* s = resolve(S, t, ls);
    llvm::Value* v = resolve(V, m, lv);
    llvm::Value* d = resolve(D, m, ld);
    emit_call(NEURON_KERNEL(matmul_at), d, s, v, dtype_arg(S), m.args.accumulate,
              int{it->second.canonical_zero});
    if (profile_) emit_call(&neuron_k_prof_add_decl, "prof_add", m.id, start);
    return true;
  }

  // A load of a matmul's moving tile from HBM followed by the matmuls reading it (a row
  // group's subtiles sharing a B tile, matmul.hpp): when the tile holds nothing but the rows
  // (run_local_ranges, forward_loads) the matmuls read the HBM rows and the load is dropped.
  // The matmul kernels pack their moving operand, reading each row once front to back as the
  // copy did, so the copy's write and second read go (bf16 [2048]^3 on Zen 4: the B tiles'
  // copies were 8-14% of the time). Returns the end of the group, or i when it was not done.
  size_t emit_forwarded_matmuls(const std::vector<ProgNode>& body, size_t i) {
    const Instr& load = body[i].instr;
    if (!fold_runs_ || load.op != Opcode::dma_copy || load.dst.memory != Memory::sbuf ||
        load.src.empty() || is_on_chip(load.src[0].memory))
      return i;
    size_t j = i + 1;
    while (j < body.size() && body[j].kind == ProgNode::Kind::instr &&
           body[j].instr.op == Opcode::nc_matmul && may_overlap(body[j].instr.src[1], load.dst))
      ++j;
    if (j == i + 1) return i;
    const Run run = plan_run(body, i, j);  // a run's folding rules, over the load and matmuls
    if (!run.fw.dropped[0]) return i;
    for (size_t k = 1; k < run.fw.instrs.size(); ++k) emit_instr(run.fw.instrs[k]);
    return j;
  }

  void emit_body(const std::vector<ProgNode>& body) {
    for (size_t i = 0; i < body.size(); ++i) {
      const ProgNode& node = body[i];
      if (node.kind == ProgNode::Kind::instr && emit_transposed_matmul(body, i)) {
        i += 2;
        continue;
      }
      if (node.kind == ProgNode::Kind::instr) {
        if (const size_t j = emit_forwarded_matmuls(body, i); j > i) {
          i = j - 1;
          continue;
        }
        int64_t partitions = 0;
        const size_t j = partition_blocks_ ? run_end(body, i, partitions) : i;
        const int64_t size = j >= i + 2 ? block_size(body, i, j, partitions) : partitions;
        const Run run = plan_run(body, i, j);
        if (size < partitions) {
          emit_run(run, partitions, size);
        } else {
          emit_instrs(run);
        }
        i = std::max(j, i + 1) - 1;
        continue;
      }
      const bool dyn = node.loop_kind == LoopKind::dynamic;
      if (!dyn && node.extent <= 0) continue;
      auto saved = vars_.find(node.var) != vars_.end() ? vars_[node.var] : nullptr;
      const int64_t trips = trips_;
      trips_ = times(trips_, dyn ? kManyTrips : node.extent);
      if (dyn) dynamic_vars_.insert(node.var);
      if (dyn) whole_only_ = true;  // runtime loops read registers
      if (!dyn) {
        // Rotated do-while: the trip count is at least one.
        llvm::BasicBlock* pre = b_.GetInsertBlock();
        auto* loop = llvm::BasicBlock::Create(ctx_, node.var, fn_);
        auto* exit = llvm::BasicBlock::Create(ctx_, node.var + ".end", fn_);
        b_.CreateBr(loop);
        b_.SetInsertPoint(loop);
        llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, node.var);
        iv->addIncoming(i64(0), pre);
        vars_[node.var] = iv;
        emit_body(node.body);
        llvm::Value* next = b_.CreateAdd(iv, i64(1), "", true, true);
        iv->addIncoming(next, b_.GetInsertBlock());
        b_.CreateCondBr(b_.CreateICmpSLT(next, i64(node.extent)), loop, exit);
        b_.SetInsertPoint(exit);
      } else {
        // A runtime loop: the trip count (or the condition register) is read when it starts
        // (or before every iteration), so the test comes first.
        llvm::Value* trip = nullptr;
        if (node.cond.empty()) {
          llvm::Value* span = b_.CreateSub(eval(node.stop, {}), eval(node.start, {}));
          trip = b_.CreateSDiv(b_.CreateAdd(span, i64(node.step - 1)), i64(node.step));
        }
        llvm::BasicBlock* pre = b_.GetInsertBlock();
        auto* head = llvm::BasicBlock::Create(ctx_, node.var + ".test", fn_);
        auto* body = llvm::BasicBlock::Create(ctx_, node.var, fn_);
        auto* exit = llvm::BasicBlock::Create(ctx_, node.var + ".end", fn_);
        b_.CreateBr(head);
        b_.SetInsertPoint(head);
        llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, node.var);
        iv->addIncoming(i64(0), pre);
        llvm::Value* go = trip ? b_.CreateICmpSLT(iv, trip)
                               : b_.CreateICmpNE(reg(node.cond), i64(0));
        b_.CreateCondBr(go, body, exit);
        b_.SetInsertPoint(body);
        vars_[node.var] = iv;
        emit_body(node.body);
        iv->addIncoming(b_.CreateAdd(iv, i64(1), "", true, true), b_.GetInsertBlock());
        b_.CreateBr(head);
        b_.SetInsertPoint(exit);
        dynamic_vars_.erase(node.var);
      }
      trips_ = trips;
      if (saved)
        vars_[node.var] = saved;
      else
        vars_.erase(node.var);
    }
  }

  static int64_t times(int64_t a, int64_t b) {
    return std::min(a * std::max<int64_t>(b, 1), kManyTrips);
  }

  const Program& p_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  const Target* target_ = nullptr;
  Pitch pitch_;
  const llvm::Module& kernels_;
  bool bitcode_ = true;
  bool partition_blocks_ = true;
  bool fold_runs_ = true;
  std::optional<SbufAccesses> sbuf_accesses_;  // run_local_ranges' index, built on first use
  bool fuse_chains_ = true;
  std::map<std::vector<int64_t>, llvm::GlobalVariable*> chain_codes_;  // emit_chain
  std::map<std::vector<int64_t>, llvm::GlobalVariable*> view_templates_;  // store_view
  int64_t stream_bytes_ = 0;
  bool profile_ = false;
  std::map<std::string, llvm::Function*> fns_;
  llvm::PointerType* view_ptr_ = nullptr;
  llvm::StructType* view_ty_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::FunctionType* fty_ = nullptr;  // the entry's (and every part's) type
  bool whole_only_ = false;            // registers or runtime loops seen: no parts (run)
  llvm::BasicBlock* alloca_point_ = nullptr;
  llvm::Value *sbuf_ = nullptr, *psum_ = nullptr, *flags_ = nullptr;
  bool flags_read_ = true;  // false: PSUM views carry no flags (reads_psum_flags)
  std::map<int, TransposedMatmul> transposed_;  // by transpose id (transposed_matmuls)
  std::vector<llvm::Value*> tensors_;         // loaded on first use (tensor())
  llvm::Value* tensors_arg_ = nullptr;        // the function's array of tensor pointers
  llvm::Instruction* prologue_end_ = nullptr;  // tensor pointers are loaded after it
  std::map<std::string, llvm::Value*> vars_;
  std::map<std::string, llvm::Value*> regs_;
  std::set<std::string> dynamic_vars_;  // variables of the enclosing dynamic loops
  llvm::Value* guard_ = nullptr;       // the current instruction's run-time bounds, if any
};

void set_host_attributes(llvm::Function& f, llvm::TargetMachine& tm) {
  f.removeFnAttr("target-cpu");
  f.removeFnAttr("target-features");
  f.removeFnAttr("tune-cpu");
  f.addFnAttr("target-cpu", tm.getTargetCPU());
  f.addFnAttr("target-features", tm.getTargetFeatureString());
  // LLVM vectorizes for 256-bit registers on AVX-512 CPUs unless told otherwise (to spare
  // Intel's 512-bit frequency drop); the element loops here are long and throughput-bound,
  // and ran measurably faster with zmm (docs/performance.md). Results are unchanged: each
  // element's operations and the reductions' lane-blocked order do not depend on the width.
  if (tm.getTargetFeatureString().contains("+avx512f"))
    f.addFnAttr("prefer-vector-width", "512");
}

// Whether the target machine has every feature in `features` ("+avx512f" tokens of a
// function's target-features; only the AVX and FMA families are checked, the ISAs the kernels'
// fast paths add to the bitcode's baseline). Asked of its subtarget, so a feature turned off by
// JitOptions::cpu_features counts as off, with all that imply it.
bool target_has(const llvm::TargetMachine& tm, llvm::StringRef features) {
  llvm::SmallVector<llvm::StringRef, 16> want;
  features.split(want, ',');
  std::string checked;
  for (llvm::StringRef f : want)
    if (f.startswith("+avx") || f.startswith("+fma"))
      checked += (checked.empty() ? "" : ",") + f.str();
  return checked.empty() || tm.getMCSubtargetInfo()->checkFeatures(checked);
}

// The instruction kernels' AVX-512 paths (instr_kernels.cpp, builtins_avx512.hpp). Their flags
// become constants from the host's features, so the optimizer keeps only the path this host
// takes; and a function compiled for an ISA the host lacks ("neuron_x86_*", checked against
// its own target-features before set_host_attributes replaces them) gets an unreachable body,
// so no instruction of that ISA reaches the code generator, even unoptimized.
void bind_host_isa(llvm::Module& m, const llvm::TargetMachine& tm) {
  const bool avx512 = target_has(tm, "+avx512f,+avx512bw,+avx512dq,+avx512vl,+fma");
  const bool bf16 = avx512 && target_has(tm, "+avx512bf16");
  for (auto [name, value] :
       {std::pair{"neuron_k_host_avx512", avx512}, std::pair{"neuron_k_host_avx512bf16", bf16}}) {
    llvm::GlobalVariable* g = m.getGlobalVariable(name);
    if (!g) continue;
    g->setInitializer(llvm::ConstantInt::get(g->getValueType(), value ? 1 : 0));
    g->setConstant(true);
    g->setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  for (llvm::Function& f : m) {
    if (f.isDeclaration() || !f.getName().startswith("neuron_x86_")) continue;
    if (target_has(tm, f.getFnAttribute("target-features").getValueAsString())) continue;
    f.deleteBody();
    new llvm::UnreachableInst(m.getContext(), llvm::BasicBlock::Create(m.getContext(), "", &f));
  }
}

}  // namespace

std::unique_ptr<llvm::Module> lower_program(const Program& p, const JitOptions& opts,
                                            llvm::LLVMContext& ctx, llvm::TargetMachine& tm) {
  auto m = std::make_unique<llvm::Module>("neuron." + p.name, ctx);
  m->setTargetTriple(tm.getTargetTriple().str());
  m->setDataLayout(tm.createDataLayout());
  std::unique_ptr<llvm::Module> kernels = load_kernel_bitcode(ctx);
  Lowering(p, ctx, *m, *kernels, opts).run();
  if (opts.bitcode_kernels) {
    // An unrolled program compiles one copy per repeated call signature, not per call.
    auto* view_ty = llvm::cast<llvm::StructType>(
        kernels->getFunction("neuron_k_copy")->getArg(0)->getType()->getPointerElementType());
    outline_repeated_calls(*m, view_ty, kOutlineMinRepeats, kOutlineMaxTrips);
    kernels->setTargetTriple(m->getTargetTriple());
    kernels->setDataLayout(m->getDataLayout());
    if (llvm::Linker::linkModules(*m, std::move(kernels), llvm::Linker::LinkOnlyNeeded))
      internal_error("linking the instruction-kernel bitcode into '{}' failed", p.name);
    bind_host_isa(*m, tm);
    // Linked kernels become private to the module and inline into the entry, where the
    // constant dtypes/ops/shapes specialize them.
    for (llvm::Function& f : *m) {
      if (f.isDeclaration()) continue;
      if (f.getName() != "neuron_entry") {
        f.setLinkage(llvm::GlobalValue::InternalLinkage);
        if (f.getName().startswith("neuron_k_")) {
          f.removeFnAttr(llvm::Attribute::NoInline);
          f.removeFnAttr(llvm::Attribute::OptimizeNone);
          f.addFnAttr(llvm::Attribute::AlwaysInline);
        }
      }
    }
  }
  for (llvm::Function& f : *m)
    if (!f.isDeclaration()) set_host_attributes(f, tm);
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os)) internal_error("invalid LLVM module for '{}': {}", p.name, err);
  return m;
}

}  // namespace neuron::native
