// Engine program -> LLVM module: rolled loops become LLVM loops, affine offsets and rotation
// become integer arithmetic on loop variables and program ids, and every instruction becomes a
// call to its instruction kernel with resolved views and constant dtypes/ops.
#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/raw_ostream.h>

#include <map>

#include "llvm_util.hpp"
#include "neuron/error.hpp"
#include "neuron/runtime/native/plan.hpp"
#include "neuron/runtime/target.hpp"

namespace neuron::native {
namespace {

constexpr const char* kKernelNames[] = {
    "neuron_k_copy",       "neuron_k_tensor_tensor",   "neuron_k_tensor_scalar",
    "neuron_k_activation", "neuron_k_tensor_reduce",   "neuron_k_transpose",
    "neuron_k_matmul",     "neuron_k_copy_predicated", "neuron_k_memset",
    "neuron_k_iota",       "neuron_k_affine_select"};

// Kernels whose per-element work is an expression over constant ops/dtypes: linked in from
// bitcode and inlined so they specialize (and vectorize: reductions in the lane-blocked order
// of builtins.hpp). The others (matmul, transpose, iota, ...) do little per element or call
// the fast matmul; they are called in the library, which keeps cold compiles short
// (docs/native.md has the measurements).
bool specialize(const std::string& name) {
  return name == "neuron_k_copy" || name == "neuron_k_tensor_tensor" ||
         name == "neuron_k_tensor_scalar" || name == "neuron_k_activation" ||
         name == "neuron_k_tensor_reduce" || name == "neuron_k_memset";
}

class Lowering {
 public:
  Lowering(const Program& p, llvm::LLVMContext& ctx, llvm::Module& m, const llvm::Module& kernels,
           bool bitcode)
      : p_(p), ctx_(ctx), m_(m), b_(ctx) {
    target_ = &(p.target.empty() ? default_target() : target_by_name(p.target));
    pitch_ = physical_pitch(p, analyze_bounds(p), *target_);
    // Kernel signatures come from the bitcode, so the ABI has one source of truth.
    for (const char* name : kKernelNames) {
      const llvm::Function* f = kernels.getFunction(name);
      NEURON_ASSERT(f, "instruction kernel {} missing from the embedded bitcode", name);
      // Called kernels go by their host alias ("neuron_host_k_*", an absolute symbol in the JIT),
      // so linking the bitcode leaves them alone.
      std::string callee =
          bitcode && specialize(name) ? std::string(name) : "neuron_host_" + std::string(name + 7);
      fns_[name] = llvm::cast<llvm::Function>(
          m_.getOrInsertFunction(callee, f->getFunctionType()).getCallee());
    }
    view_ptr_ = llvm::cast<llvm::PointerType>(fns_["neuron_k_copy"]->getArg(0)->getType());
    view_ty_ = llvm::cast<llvm::StructType>(view_ptr_->getPointerElementType());
    auto* i8p = b_.getInt8PtrTy();
    auto* print_ty =
        llvm::FunctionType::get(b_.getVoidTy(), {view_ptr_, b_.getInt32Ty(), i8p}, false);
    fns_["neuron_k_print"] =
        llvm::cast<llvm::Function>(m_.getOrInsertFunction("neuron_k_print", print_ty).getCallee());
  }

  llvm::Function* run() {
    auto* i8p = b_.getInt8PtrTy();
    auto* i64p = llvm::PointerType::getUnqual(b_.getInt64Ty());
    auto* fty = llvm::FunctionType::get(
        b_.getVoidTy(), {llvm::PointerType::getUnqual(i8p), i64p, i64p, i8p, i8p, i8p}, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, "neuron_entry", m_);
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
    for (int a = 0; a < 4; ++a) {
      vars_[program_id_var(a)] =
          b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), pids, a));
      vars_[num_programs_var(a)] =
          b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstGEP1_64(b_.getInt64Ty(), npids, a));
    }
    for (size_t t = 0; t < p_.tensors.size(); ++t)
      tensors_.push_back(b_.CreateLoad(i8p, b_.CreateConstGEP1_64(i8p, tensors, t)));
    alloca_point_ = b_.GetInsertBlock();
    emit_body(p_.body);
    b_.CreateRetVoid();
    return fn_;
  }

 private:
  llvm::Value* i64(int64_t v) { return b_.getInt64(static_cast<uint64_t>(v)); }

  llvm::Value* eval(const Affine& a, const Span& span) {
    llvm::Value* v = i64(a.constant);
    for (auto& t : a.terms) {
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
    auto* i8p = b_.getInt8PtrTy();
    b_.CreateStore(base ? base : llvm::ConstantPointerNull::get(i8p),
                   b_.CreateStructGEP(view_ty_, slot, 0));
    b_.CreateStore(flags ? flags : llvm::ConstantPointerNull::get(i8p),
                   b_.CreateStructGEP(view_ty_, slot, 1));
    for (int f = 2; f < 4; ++f) {
      llvm::Value* arr = b_.CreateStructGEP(view_ty_, slot, static_cast<unsigned>(f));
      auto* aty = view_ty_->getElementType(static_cast<unsigned>(f));
      for (int i = 0; i < kDims; ++i)
        b_.CreateStore(i64((f == 2 ? sizes : strides)[i]), b_.CreateConstGEP2_32(aty, arr, 0, i));
    }
  }

  // Resolves a pattern for the current loop iteration into a view.
  llvm::Value* view(const AccessPattern& ap, const Instr& in, NormLayout* out = nullptr) {
    const bool chip = is_on_chip(ap.memory);
    const int64_t pb = !chip ? 0 : ap.memory == Memory::psum ? pitch_.psum : pitch_.sbuf;
    NormLayout l = normalize(ap, in, pb);
    if (out) *out = l;
    llvm::Value *base, *flags = nullptr;
    if (chip) {
      llvm::Value* off = eval(ap.offset, in.span);
      if (!ap.rotation.var.empty() && ap.rotation.count > 1) {
        auto it = vars_.find(ap.rotation.var);
        NEURON_ASSERT(it != vars_.end(), "rotation over unknown variable '{}' at {}",
                      ap.rotation.var, in.span.str());
        llvm::Value* r = b_.CreateURem(it->second, i64(ap.rotation.count));
        off = b_.CreateAdd(off, b_.CreateMul(r, i64(ap.rotation.bytes)));
      }
      llvm::Value* byte = b_.CreateAdd(b_.CreateMul(eval(ap.partition, in.span), i64(pb)), off);
      const bool ps = ap.memory == Memory::psum;
      base = b_.CreateGEP(b_.getInt8Ty(), ps ? psum_ : sbuf_, byte);
      if (ps) flags = b_.CreateGEP(b_.getInt8Ty(), flags_, byte);
    } else {
      NEURON_ASSERT(ap.tensor >= 0 && ap.tensor < static_cast<int>(tensors_.size()),
                    "pattern names tensor {} of {} at {}", ap.tensor, tensors_.size(),
                    in.span.str());
      llvm::Value* off = b_.CreateMul(eval(ap.offset, in.span), i64(dtype_bytes(ap.dtype)));
      base = b_.CreateGEP(b_.getInt8Ty(), tensors_[static_cast<size_t>(ap.tensor)], off);
    }
    llvm::Value* slot = new_view();
    store_view(slot, base, flags, l.size, l.stride);
    return slot;
  }

  // iota/affine_select value pattern: sizes {P, counts...}, strides = coefficients.
  llvm::Value* value_pattern(const Instr& in) {
    int64_t sizes[kDims], coef[kDims];
    for (int i = 0; i < kDims; ++i) sizes[i] = 1, coef[i] = 0;
    sizes[0] = in.dst.dims.empty() ? 1 : in.dst.dims[0].size;
    coef[0] = in.args.channel_multiplier;
    const auto& pat = in.args.pattern;
    const size_t pairs = pat.size() / 2, pad = static_cast<size_t>(kDims) - 1 - pairs;
    for (size_t i = 0; i < pairs; ++i) {
      coef[1 + pad + i] = pat[2 * i];
      sizes[1 + pad + i] = pat[2 * i + 1];
    }
    llvm::Value* slot = new_view();
    store_view(slot, nullptr, nullptr, sizes, coef);
    return slot;
  }

  llvm::Value* null_view() { return llvm::ConstantPointerNull::get(view_ptr_); }

  // Call with integer/double constants converted to the callee's parameter types.
  struct Arg {
    llvm::Value* v = nullptr;
    double num = 0;
  };
  void call(const char* name, std::vector<Arg> args) {
    llvm::Function* f = fns_.at(name);
    std::vector<llvm::Value*> vals;
    for (size_t i = 0; i < args.size(); ++i) {
      llvm::Type* t = f->getFunctionType()->getParamType(static_cast<unsigned>(i));
      if (args[i].v)
        vals.push_back(args[i].v);
      else if (t->isDoubleTy())
        vals.push_back(llvm::ConstantFP::get(t, args[i].num));
      else
        vals.push_back(llvm::ConstantInt::get(
            t, static_cast<uint64_t>(static_cast<int64_t>(args[i].num)), true));
    }
    NEURON_ASSERT(vals.size() == f->arg_size(), "{} takes {} arguments, lowering passes {}", name,
                  f->arg_size(), vals.size());
    b_.CreateCall(f, vals);
  }
  static Arg n(double v) { return Arg{nullptr, v}; }
  static Arg n(int64_t v) { return Arg{nullptr, static_cast<double>(v)}; }
  static Arg dt(const AccessPattern& ap) { return Arg{nullptr, static_cast<double>(ap.dtype)}; }
  static Arg dt0() { return Arg{nullptr, 0}; }
  static Arg op(AluOp o) { return Arg{nullptr, static_cast<double>(static_cast<int>(o))}; }
  static Arg flag(bool b) { return Arg{nullptr, b ? 1.0 : 0.0}; }
  static Arg v(llvm::Value* x) { return Arg{x, 0}; }

  void emit_instr(const Instr& in) {
    const auto& a = in.args;
    NormLayout ld, l0, l1, l2;
    // The kernels' `same` flags (instr_abi.hpp): one loop nest, and whether a source may share
    // bytes with the destination (then the kernel checks for a partial overlap at run time).
    auto same = [&](std::initializer_list<const NormLayout*> ls,
                    std::initializer_list<const AccessPattern*> sources) {
      int f = same_shape(std::vector<const NormLayout*>(ls)) ? kSameShape : 0;
      for (auto* src : sources)
        if (may_overlap(*src, in.dst)) f |= kMayOverlap;
      return n(int64_t{f});
    };
    switch (in.op) {
      case Opcode::tensor_copy:
      case Opcode::dma_copy: {
        llvm::Value* s = view(in.src[0], in, &l0);
        llvm::Value* d = view(in.dst, in, &ld);
        return call("neuron_k_copy",
                    {v(d), v(s), dt(in.dst), dt(in.src[0]), same({&l0, &ld}, {&in.src[0]})});
      }
      case Opcode::tensor_tensor: {
        llvm::Value* x = view(in.src[0], in, &l0);
        llvm::Value* y = view(in.src[1], in, &l1);
        llvm::Value* d = view(in.dst, in, &ld);
        return call("neuron_k_tensor_tensor",
                    {v(d), v(x), v(y), dt(in.dst), dt(in.src[0]), dt(in.src[1]), op(a.op0),
                     same({&l0, &l1, &ld}, {&in.src[0], &in.src[1]})});
      }
      case Opcode::tensor_scalar: {
        llvm::Value* s = view(in.src[0], in, &l0);
        size_t next = 1;
        const AccessPattern* c0 = a.operand0_tile ? &in.src[next++] : nullptr;
        const AccessPattern* c1 = a.operand1_tile ? &in.src[next++] : nullptr;
        llvm::Value* v0 = c0 ? view(*c0, in) : null_view();
        llvm::Value* v1 = c1 ? view(*c1, in) : null_view();
        llvm::Value* d = view(in.dst, in, &ld);
        return call("neuron_k_tensor_scalar",
                    {v(d), v(s), v(v0), v(v1), dt(in.dst), dt(in.src[0]), c0 ? dt(*c0) : dt0(),
                     c1 ? dt(*c1) : dt0(), op(a.op0), op(a.op1), flag(a.reverse0), flag(a.reverse1),
                     n(a.imm0), n(a.imm1), same({&l0, &ld}, {&in.src[0]})});
      }
      case Opcode::activation: {
        llvm::Value* s = view(in.src[0], in, &l0);
        size_t next = 1;
        const AccessPattern* bias = a.bias_tile ? &in.src[next++] : nullptr;
        const AccessPattern* scale = a.scale_tile ? &in.src[next++] : nullptr;
        llvm::Value* vb = bias ? view(*bias, in) : null_view();
        llvm::Value* vs = scale ? view(*scale, in) : null_view();
        llvm::Value* d = view(in.dst, in, &ld);
        llvm::Value* rr = in.has_reduce_res ? view(in.reduce_res, in) : null_view();
        return call("neuron_k_activation",
                    {v(d), v(s), v(vb), v(vs), v(rr), dt(in.dst), dt(in.src[0]),
                     bias ? dt(*bias) : dt0(), scale ? dt(*scale) : dt0(),
                     in.has_reduce_res ? dt(in.reduce_res) : dt0(), n(static_cast<int64_t>(a.func)),
                     op(a.reduce_op), n(a.scale), same({&l0, &ld}, {&in.src[0]})});
      }
      case Opcode::tensor_reduce: {
        llvm::Value* s = view(in.src[0], in, &l0);
        llvm::Value* d = view(in.dst, in, &ld);
        const int nd = static_cast<int>(in.src[0].dims.size());
        int mask = 0;
        for (int ax : a.axes) mask |= 1 << (ax + (kDims - nd));
        return call("neuron_k_tensor_reduce", {v(d), v(s), dt(in.dst), dt(in.src[0]),
                                               op(a.reduce_op), n(int64_t{mask}), flag(a.negate)});
      }
      case Opcode::nc_transpose: {
        llvm::Value* s = view(in.src[0], in);
        llvm::Value* d = view(in.dst, in);
        return call("neuron_k_transpose", {v(d), v(s), dt(in.dst), dt(in.src[0])});
      }
      case Opcode::nc_matmul: {
        llvm::Value* st = view(in.src[0], in, &l0);
        llvm::Value* mv = view(in.src[1], in, &l1);
        llvm::Value* d = view(in.dst, in, &ld);
        return call("neuron_k_matmul",
                    {v(d), v(st), v(mv), dt(in.dst), dt(in.src[0]), dt(in.src[1]),
                     n(int64_t{a.accumulate}), flag(matmul_fast_layout(in, ld, l0, l1))});
      }
      case Opcode::tensor_copy_predicated: {
        llvm::Value* s = view(in.src[0], in, &l0);
        llvm::Value* pr = view(in.src[1], in, &l1);
        llvm::Value* d = view(in.dst, in, &ld);
        return call("neuron_k_copy_predicated",
                    {v(d), v(s), v(pr), dt(in.dst), dt(in.src[0]), dt(in.src[1]),
                     same({&l0, &l1, &ld}, {&in.src[0], &in.src[1]})});
      }
      case Opcode::memset: {
        llvm::Value* d = view(in.dst, in);
        return call("neuron_k_memset", {v(d), dt(in.dst), n(a.imm0)});
      }
      case Opcode::iota: {
        llvm::Value* d = view(in.dst, in);
        return call("neuron_k_iota", {v(d), v(value_pattern(in)), dt(in.dst), n(a.offset)});
      }
      case Opcode::affine_select: {
        llvm::Value* s = view(in.src[0], in);
        llvm::Value* d = view(in.dst, in);
        return call("neuron_k_affine_select",
                    {v(d), v(s), v(value_pattern(in)), dt(in.dst), dt(in.src[0]), n(a.offset),
                     op(a.cmp_op), n(a.imm0)});
      }
      case Opcode::device_print: {
        llvm::Value* s = view(in.src[0], in);
        std::vector<int64_t> shape;
        for (auto& d : in.src[0].dims) shape.push_back(d.size);
        llvm::Value* prefix = b_.CreateGlobalStringPtr(fmt::format(
            "{} [{}] {}\n", a.prefix, fmt::join(shape, ", "), dtype_name(in.src[0].dtype)));
        return call("neuron_k_print", {v(s), dt(in.src[0]), v(prefix)});
      }
      default:
        internal_error("the native backend has no lowering for '{}' at {}", opcode_name(in.op),
                       in.span.str());
    }
  }

  void emit_body(const std::vector<ProgNode>& body) {
    for (auto& node : body) {
      if (node.kind == ProgNode::Kind::instr) {
        emit_instr(node.instr);
        continue;
      }
      if (node.extent <= 0) continue;
      // Rotated do-while: the trip count is at least one.
      llvm::BasicBlock* pre = b_.GetInsertBlock();
      auto* loop = llvm::BasicBlock::Create(ctx_, node.var, fn_);
      auto* exit = llvm::BasicBlock::Create(ctx_, node.var + ".end", fn_);
      b_.CreateBr(loop);
      b_.SetInsertPoint(loop);
      llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, node.var);
      iv->addIncoming(i64(0), pre);
      auto saved = vars_.find(node.var) != vars_.end() ? vars_[node.var] : nullptr;
      vars_[node.var] = iv;
      emit_body(node.body);
      llvm::Value* next = b_.CreateAdd(iv, i64(1), "", true, true);
      iv->addIncoming(next, b_.GetInsertBlock());
      b_.CreateCondBr(b_.CreateICmpSLT(next, i64(node.extent)), loop, exit);
      b_.SetInsertPoint(exit);
      if (saved)
        vars_[node.var] = saved;
      else
        vars_.erase(node.var);
    }
  }

  const Program& p_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  const Target* target_ = nullptr;
  Pitch pitch_;
  std::map<std::string, llvm::Function*> fns_;
  llvm::PointerType* view_ptr_ = nullptr;
  llvm::StructType* view_ty_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* alloca_point_ = nullptr;
  llvm::Value *sbuf_ = nullptr, *psum_ = nullptr, *flags_ = nullptr;
  std::vector<llvm::Value*> tensors_;
  std::map<std::string, llvm::Value*> vars_;
};

void set_host_attributes(llvm::Function& f, llvm::TargetMachine& tm) {
  f.removeFnAttr("target-cpu");
  f.removeFnAttr("target-features");
  f.removeFnAttr("tune-cpu");
  f.addFnAttr("target-cpu", tm.getTargetCPU());
  f.addFnAttr("target-features", tm.getTargetFeatureString());
}

}  // namespace

std::unique_ptr<llvm::Module> lower_program(const Program& p, const JitOptions& opts,
                                            llvm::LLVMContext& ctx, llvm::TargetMachine& tm) {
  auto m = std::make_unique<llvm::Module>("neuron." + p.name, ctx);
  m->setTargetTriple(tm.getTargetTriple().str());
  m->setDataLayout(tm.createDataLayout());
  std::unique_ptr<llvm::Module> kernels = load_kernel_bitcode(ctx);
  Lowering(p, ctx, *m, *kernels, opts.bitcode_kernels).run();
  if (opts.bitcode_kernels) {
    kernels->setTargetTriple(m->getTargetTriple());
    kernels->setDataLayout(m->getDataLayout());
    if (llvm::Linker::linkModules(*m, std::move(kernels), llvm::Linker::LinkOnlyNeeded))
      internal_error("linking the instruction-kernel bitcode into '{}' failed", p.name);
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
