// outline_repeated_calls: one compiled copy of an instruction call per call signature, not per
// call, for signatures that repeat many times. A long unrolled program (nki-samples' fully
// optimized matmul: 824 calls, 512 of them nc_matmul of one shape) otherwise inlines a kernel
// and builds its views (a stack slot of constants per operand) at every call, and LLVM optimizes
// and compiles each copy: 15 s for that kernel. Calls of one kernel that agree on every constant
// (dtypes, ops, scalars, and each view's sizes, strides and whether it has flags) become calls
// of one wrapper, which takes what differs (view bases and flags, runtime values) as arguments
// and builds the views from constants inside: a linked kernel inlines into the wrapper and is
// specialized there once; the wrapper is not inlined. A fused chain's array of views
// (neuron_k_chain) is rebuilt the same way, view by view. What a call computes is unchanged, so
// results are bit for bit the same. Only calls a program makes a few times each are wrapped (the
// lowering tags each call with the trip counts of the loops around it): in a hot loop, such as
// the kernel library's attention over key blocks, an inlined kernel is a few percent faster
// than a call (measured on causal attention), and compile time is not the cost that matters.
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Metadata.h>

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "llvm_util.hpp"

namespace neuron::native {

void store_view_fields(llvm::IRBuilder<>& b, llvm::StructType* view_ty, llvm::Value* slot,
                       llvm::Value* base, llvm::Value* flags, llvm::ArrayRef<int64_t> sizes,
                       llvm::ArrayRef<int64_t> strides) {
  auto* i8p = b.getInt8PtrTy();
  b.CreateStore(base ? base : llvm::ConstantPointerNull::get(i8p),
                b.CreateStructGEP(view_ty, slot, 0));
  b.CreateStore(flags ? flags : llvm::ConstantPointerNull::get(i8p),
                b.CreateStructGEP(view_ty, slot, 1));
  for (unsigned field = 2; field < 4; ++field) {
    llvm::Value* arr = b.CreateStructGEP(view_ty, slot, field);
    auto* aty = view_ty->getElementType(field);
    const llvm::ArrayRef<int64_t> vals = field == 2 ? sizes : strides;
    for (size_t d = 0; d < vals.size(); ++d)
      b.CreateStore(b.getInt64(static_cast<uint64_t>(vals[d])),
                    b.CreateConstGEP2_32(aty, arr, 0, static_cast<unsigned>(d)));
  }
}

namespace {

// What the stores into one NView slot (base, flags, sizes[], strides[]) put there; nullopt when
// the slot is used otherwise or a size or stride is not a constant (its fields then cannot be
// rebuilt in a wrapper).
struct SlotFields {
  llvm::Value* base = nullptr;
  llvm::Value* flags = nullptr;
  std::vector<int64_t> sizes, strides;
};

std::optional<SlotFields> slot_fields(llvm::AllocaInst* slot, llvm::StructType* view_ty,
                                      const llvm::User* consumer) {
  auto* arr_ty = llvm::dyn_cast<llvm::ArrayType>(view_ty->getElementType(2));
  if (!arr_ty) return std::nullopt;
  const size_t dims = arr_ty->getNumElements();
  SlotFields f;
  f.sizes.assign(dims, INT64_MIN);
  f.strides.assign(dims, INT64_MIN);
  // A GEP (0, k) into the slot or into one of its arrays: k.
  auto field_of = [](const llvm::User* gep) -> std::optional<uint64_t> {
    auto* g = llvm::dyn_cast<llvm::GetElementPtrInst>(gep);
    if (!g || g->getNumIndices() != 2) return std::nullopt;
    auto* zero = llvm::dyn_cast<llvm::ConstantInt>(g->getOperand(1));
    auto* idx = llvm::dyn_cast<llvm::ConstantInt>(g->getOperand(2));
    if (!zero || !zero->isZero() || !idx) return std::nullopt;
    return idx->getZExtValue();
  };
  auto stored = [](llvm::User* gep) -> llvm::Value* {
    llvm::Value* v = nullptr;
    for (llvm::User* u : gep->users()) {
      auto* st = llvm::dyn_cast<llvm::StoreInst>(u);
      if (!st || st->getPointerOperand() != gep || v) return nullptr;
      v = st->getValueOperand();
    }
    return v;
  };
  for (llvm::User* u : slot->users()) {
    if (u == consumer) continue;
    auto field = field_of(u);
    if (!field) return std::nullopt;
    if (*field <= 1) {
      llvm::Value* v = stored(u);
      llvm::Value*& into = *field == 0 ? f.base : f.flags;
      if (!v || into) return std::nullopt;  // a slot stored twice is not one view
      into = v;
      continue;
    }
    if (*field > 3) return std::nullopt;
    for (llvm::User* e : u->users()) {
      auto at = field_of(e);
      llvm::Value* v = stored(e);
      auto* c = llvm::dyn_cast_or_null<llvm::ConstantInt>(v);
      if (!at || *at >= dims || !c) return std::nullopt;
      int64_t& into = (*field == 2 ? f.sizes : f.strides)[*at];
      if (into != INT64_MIN) return std::nullopt;
      into = c->getSExtValue();
    }
  }
  if (!f.base || !f.flags) return std::nullopt;
  for (size_t d = 0; d < dims; ++d)
    if (f.sizes[d] == INT64_MIN || f.strides[d] == INT64_MIN) return std::nullopt;
  return f;
}

// A fused chain's views (neuron_k_chain's second argument): an array of view pointers, each
// element stored once with a view slot or null, passed as bytes. nullopt when the argument is
// not one or a slot in it cannot be rebuilt.
struct ViewList {
  llvm::ArrayType* type = nullptr;
  std::vector<std::optional<SlotFields>> views;  // nullopt: a null pointer
};

std::optional<ViewList> view_list(llvm::Value* arg, llvm::StructType* view_ty) {
  auto* cast = llvm::dyn_cast<llvm::BitCastInst>(arg);
  auto* arr = cast ? llvm::dyn_cast<llvm::AllocaInst>(cast->getOperand(0)) : nullptr;
  auto* ty = arr ? llvm::dyn_cast<llvm::ArrayType>(arr->getAllocatedType()) : nullptr;
  if (!ty || !cast->hasOneUse() || ty->getElementType() != view_ty->getPointerTo())
    return std::nullopt;
  ViewList l{ty, std::vector<std::optional<SlotFields>>(ty->getNumElements())};
  std::vector<bool> stored(ty->getNumElements(), false);
  for (llvm::User* u : arr->users()) {
    if (u == cast) continue;
    auto* g = llvm::dyn_cast<llvm::GetElementPtrInst>(u);
    if (!g || g->getNumIndices() != 2 || !g->hasOneUse()) return std::nullopt;
    auto* zero = llvm::dyn_cast<llvm::ConstantInt>(g->getOperand(1));
    auto* idx = llvm::dyn_cast<llvm::ConstantInt>(g->getOperand(2));
    auto* st = llvm::dyn_cast<llvm::StoreInst>(g->user_back());
    if (!zero || !zero->isZero() || !idx || idx->getZExtValue() >= stored.size() || !st ||
        st->getPointerOperand() != g || stored[idx->getZExtValue()])
      return std::nullopt;
    const uint64_t k = idx->getZExtValue();
    stored[k] = true;
    llvm::Value* v = st->getValueOperand();
    if (llvm::isa<llvm::ConstantPointerNull>(v)) continue;
    auto* slot = llvm::dyn_cast<llvm::AllocaInst>(v);
    if (!slot || slot->getAllocatedType() != view_ty) return std::nullopt;
    l.views[k] = slot_fields(slot, view_ty, st);
    if (!l.views[k]) return std::nullopt;
  }
  for (bool b : stored)
    if (!b) return std::nullopt;
  return l;
}

// One call, seen as its signature (what a wrapper bakes in) and its dynamic values (what the
// wrapper takes as arguments, in order).
struct Seen {
  std::vector<int64_t> key;              // per argument: kind, then its constants
  std::vector<llvm::Value*> dynamic;     // the values that differ between calls
  std::vector<std::optional<SlotFields>> slots;  // per argument: the view it points to
  std::vector<std::optional<ViewList>> lists;    // per argument: the views it lists
};

// A view's part of a signature: whether base and flags are null, sizes, strides; its non-null
// base and flags are dynamic values.
void see_view(const SlotFields& f, Seen& s) {
  for (llvm::Value* p : {f.base, f.flags}) {
    const bool null = llvm::isa<llvm::ConstantPointerNull>(p);
    s.key.push_back(null);
    if (!null) s.dynamic.push_back(p);
  }
  s.key.insert(s.key.end(), f.sizes.begin(), f.sizes.end());
  s.key.insert(s.key.end(), f.strides.begin(), f.strides.end());
}

std::optional<Seen> see(llvm::CallInst* call, llvm::StructType* view_ty) {
  Seen s;
  std::map<llvm::Value*, int64_t> slot_index;  // a slot passed twice is one view
  for (unsigned i = 0; i < call->arg_size(); ++i) {
    llvm::Value* a = call->getArgOperand(i);
    s.slots.emplace_back();
    s.lists.emplace_back();
    if (auto list = view_list(a, view_ty)) {
      s.key.insert(s.key.end(), {4, static_cast<int64_t>(list->views.size())});
      for (const auto& v : list->views) {
        s.key.push_back(v.has_value());
        if (v) see_view(*v, s);
      }
      s.lists.back() = std::move(list);
    } else if (auto* slot = llvm::dyn_cast<llvm::AllocaInst>(a);
        slot && slot->getAllocatedType() == view_ty) {
      if (auto it = slot_index.find(slot); it != slot_index.end()) {
        s.key.insert(s.key.end(), {3, it->second});
        continue;
      }
      auto fields = slot_fields(slot, view_ty, call);
      if (!fields) return std::nullopt;
      slot_index[slot] = i;
      s.key.push_back(2);
      see_view(*fields, s);
      s.slots.back() = std::move(fields);
    } else if (auto* c = llvm::dyn_cast<llvm::Constant>(a)) {
      // Constants are uniqued per context: equal constants are one object.
      s.key.insert(s.key.end(), {1, static_cast<int64_t>(reinterpret_cast<intptr_t>(c))});
    } else {
      s.key.push_back(0);
      s.dynamic.push_back(a);
    }
  }
  return s;
}

// The wrapper of `callee` for calls shaped like `model`: its parameters are the model's dynamic
// values' types; it rebuilds each view slot and calls the kernel.
llvm::Function* make_wrapper(llvm::Module& m, llvm::Function* callee, llvm::CallInst* model,
                             const Seen& s, llvm::StructType* view_ty, int serial) {
  std::vector<llvm::Type*> params;
  for (llvm::Value* v : s.dynamic) params.push_back(v->getType());
  auto* ty = llvm::FunctionType::get(callee->getReturnType(), params, false);
  auto* w = llvm::Function::Create(ty, llvm::GlobalValue::InternalLinkage,
                                   "neuron_sig" + std::to_string(serial) + "." +
                                       callee->getName(),
                                   m);  // not "neuron_k_*": those are inlined everywhere
  w->addFnAttr(llvm::Attribute::NoInline);
  w->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(m.getContext(), "entry", w));
  unsigned next = 0;
  // A view slot built from constants and the wrapper's next arguments (see_view's order).
  auto build_view = [&](const SlotFields& f) -> llvm::Value* {
    llvm::Value* slot = b.CreateAlloca(view_ty);
    auto ptr = [&](llvm::Value* p) -> llvm::Value* {
      return llvm::isa<llvm::ConstantPointerNull>(p) ? p : w->getArg(next++);
    };
    llvm::Value* base = ptr(f.base);
    llvm::Value* flags = ptr(f.flags);
    store_view_fields(b, view_ty, slot, base, flags, f.sizes, f.strides);
    return slot;
  };
  std::vector<llvm::Value*> args;
  for (unsigned i = 0; i < model->arg_size(); ++i) {
    llvm::Value* a = model->getArgOperand(i);
    if (const auto& l = s.lists[i]) {
      llvm::Value* arr = b.CreateAlloca(l->type);
      auto* null = llvm::ConstantPointerNull::get(view_ty->getPointerTo());
      for (size_t k = 0; k < l->views.size(); ++k)
        b.CreateStore(l->views[k] ? build_view(*l->views[k]) : null,
                      b.CreateConstGEP2_32(l->type, arr, 0, static_cast<unsigned>(k)));
      args.push_back(b.CreateBitCast(arr, a->getType()));
    } else if (const auto& f = s.slots[i]) {
      args.push_back(build_view(*f));
    } else if (auto* slot = llvm::dyn_cast<llvm::AllocaInst>(a);
               slot && slot->getAllocatedType() == view_ty) {
      // the same slot passed again: the view built for its first occurrence
      for (unsigned j = 0; j < i; ++j)
        if (model->getArgOperand(j) == a) args.push_back(args[j]);
    } else if (llvm::isa<llvm::Constant>(a)) {
      args.push_back(a);
    } else {
      args.push_back(w->getArg(next++));
    }
  }
  llvm::Value* r = b.CreateCall(callee, args);
  if (callee->getReturnType()->isVoidTy())
    b.CreateRetVoid();
  else
    b.CreateRet(r);
  return w;
}

// How many times a program makes this call (the lowering's metadata; many when absent).
int64_t trips_of(const llvm::CallInst* call) {
  if (const llvm::MDNode* md = call->getMetadata(kTripsMetadata))
    if (auto* c = llvm::mdconst::dyn_extract<llvm::ConstantInt>(md->getOperand(0)))
      return c->getSExtValue();
  return INT64_MAX;
}

}  // namespace

int outline_repeated_calls(llvm::Module& m, llvm::StructType* view_ty, size_t min_repeats,
                           int64_t max_trips) {
  // Every call of an instruction kernel (a declaration "neuron_k_*" until the bitcode is linked,
  // or the library's "neuron_host_k_*"), by signature; a call whose views cannot be rebuilt
  // stays as it is.
  using Key = std::pair<llvm::Function*, std::vector<int64_t>>;
  std::map<Key, std::vector<std::pair<llvm::CallInst*, Seen>>> groups;
  for (llvm::Function& f : m)
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& in : bb) {
        auto* call = llvm::dyn_cast<llvm::CallInst>(&in);
        llvm::Function* callee = call ? call->getCalledFunction() : nullptr;
        if (!callee || !callee->isDeclaration() ||
            !(callee->getName().startswith("neuron_k_") ||
              callee->getName().startswith("neuron_host_k_")) ||
            trips_of(call) > max_trips)
          continue;
        if (auto s = see(call, view_ty))
          groups[{callee, s->key}].emplace_back(call, std::move(*s));
      }
  int made = 0;
  for (auto& [key, members] : groups) {
    if (members.size() < min_repeats) continue;
    llvm::Function* w = make_wrapper(m, key.first, members[0].first, members[0].second, view_ty,
                                     made++);
    for (auto& [call, seen] : members) {
      auto* repl = llvm::CallInst::Create(w->getFunctionType(), w, seen.dynamic, "", call);
      if (!call->getType()->isVoidTy()) call->replaceAllUsesWith(repl);
      call->eraseFromParent();
    }
  }
  return made;
}

}  // namespace neuron::native
