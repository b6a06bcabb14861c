// The host JIT: target machine with the host's features, the new-pass-manager optimization
// pipeline, object emission (what the compile cache stores) and ORC LLJIT loading.
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/MC/SubtargetFeature.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Transforms/Utils/Cloning.h>
#include <llvm/Support/Host.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>

#include "jit_memory.hpp"
#include "llvm_util.hpp"
#include "neuron/base/error.hpp"
#include "neuron/base/instr_kernels.hpp"
#include "neuron/base/matmul_kernel.hpp"

// codegen/llvm/kernel_bitcode.cpp: the embedded bitcode of dsl/base/src/kernels/instr_kernels.cpp.
extern "C" const char neuron_instr_kernels_bc[];
extern "C" const char neuron_instr_kernels_bc_end[];

namespace neuron::native {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

[[noreturn]] void fail(llvm::Error e, const char* what) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << e;
  internal_error("{}: {}", what, os.str());
}

struct HostTarget {
  std::string triple, cpu, features;
};

const HostTarget& host() {
  static const HostTarget h = [] {
    init_llvm();
    HostTarget t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> map;
    llvm::SubtargetFeatures f;
    if (llvm::sys::getHostCPUFeatures(map)) {
      // Sorted, so the id (part of cache keys) is stable.
      std::vector<std::string> names;
      for (auto& kv : map) names.push_back((kv.second ? "+" : "-") + kv.first().str());
      std::sort(names.begin(), names.end());
      for (auto& n : names) f.AddFeature(n);
    }
    t.features = f.getString();
    return t;
  }();
  return h;
}

// The process-wide LLJIT: one JITDylib per loaded kernel, all linked against the main one,
// which holds the host symbols generated code may call.
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::atomic<int> next{0};
  std::atomic<std::size_t> loaded{0};
  std::mutex mutex;  // serializes loads and unloads (so session_errors belong to one load)
  // What the session reported while materializing (e.g. "Cannot allocate memory" when mprotect
  // fails): LLVM would print it on stderr and return only "Failed to materialize symbols".
  std::mutex errors_mutex;
  std::string session_errors;
};

Jit& jit() {
  static Jit* j = [] {
    init_llvm();
    auto* r = new Jit;
    llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(host().triple)};
    jtmb.setCPU(host().cpu);
    jtmb.getFeatures().AddFeature(host().features);
    auto created =
        llvm::orc::LLJITBuilder()
            .setJITTargetMachineBuilder(jtmb)
            .setObjectLinkingLayerCreator([](llvm::orc::ExecutionSession& es, const llvm::Triple&) {
              // LLJIT's default layer, with one contiguous mapping per object (jit_memory.cpp).
              return std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(
                  es, [] { return contiguous_memory_manager(); });
            })
            .create();
    if (!created) fail(created.takeError(), "creating the LLJIT");
    r->jit = std::move(*created);
    r->jit->getExecutionSession().setErrorReporter([r](llvm::Error e) {
      std::string msg;
      llvm::raw_string_ostream os(msg);
      os << e;
      std::lock_guard lock(r->errors_mutex);
      if (!r->session_errors.empty()) r->session_errors += "; ";
      r->session_errors += os.str();
    });
    auto& main = r->jit->getMainJITDylib();
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        r->jit->getDataLayout().getGlobalPrefix());
    if (!gen) fail(gen.takeError(), "process symbols for the JIT");
    main.addGenerator(std::move(*gen));
    auto& es = r->jit->getExecutionSession();
    llvm::orc::SymbolMap syms;
    auto add = [&](const char* name, const void* p) {
      if (p)
        syms[es.intern(name)] = llvm::JITEvaluatedSymbol(
            llvm::pointerToJITTargetAddress(p), llvm::JITSymbolFlags::Exported);
    };
    add("neuron_matmul_f32", reinterpret_cast<const void*>(&neuron_matmul_f32));
    add("neuron_matmul_bf16", reinterpret_cast<const void*>(&neuron_matmul_bf16));
    add("neuron_matmul_bf16_same_b", reinterpret_cast<const void*>(&neuron_matmul_bf16_same_b));
    add("neuron_matmul_f32_same_b", reinterpret_cast<const void*>(&neuron_matmul_f32_same_b));
    add("neuron_transpose32", reinterpret_cast<const void*>(&neuron_transpose32));
    add("neuron_transpose16", reinterpret_cast<const void*>(&neuron_transpose16));
    // Every kernel by its host alias "neuron_host_k_<name>" (called rather than specialized:
    // lower_program.cpp), and the cold partial-overlap paths the specialized ones call.
#define X(n, how) add("neuron_host_k_" #n, reinterpret_cast<const void*>(&neuron_k_##n));
    NEURON_INSTR_KERNELS(X)
#undef X
#define X(n) add("neuron_host_k_snapshot_" #n, reinterpret_cast<const void*>(&neuron_k_snapshot_##n));
    NEURON_INSTR_SNAPSHOTS(X)
#undef X
    add("neuron_host_k_prof_now", reinterpret_cast<const void*>(&neuron_k_prof_now));
    add("neuron_host_k_prof_add", reinterpret_cast<const void*>(&neuron_k_prof_add));
    add("neuron_k_fault", reinterpret_cast<const void*>(&neuron_k_fault));  // from kernels
    add("neuron_host_k_fault", reinterpret_cast<const void*>(&neuron_k_fault));  // generated code
    if (auto e = main.define(llvm::orc::absoluteSymbols(std::move(syms))))
      fail(std::move(e), "defining host symbols in the JIT");
    return r;
  }();
  return *j;
}

// A fused chain's kernel (neuron_k_chain) reads its steps' ops and dtypes from a constant
// array, not from call arguments, so the inliner would judge the calls inside it (alu,
// activate, load/store by dtype) with unknown ops and leave them as calls, and the loop would
// not vectorize. So the chain calls are inlined first, with the kernel's own helpers (its
// element walk, its lambdas), and the array's loads folded: the builtins' ops and dtypes are
// then constant arguments, as every other kernel's are, when the usual pipeline runs.
void specialize_chains(llvm::Module& m, llvm::FunctionAnalysisManager& fam) {
  llvm::Function* chain = m.getFunction("neuron_k_chain");
  if (!chain || chain->isDeclaration()) return;
  std::vector<llvm::CallBase*> work;
  for (llvm::User* u : chain->users())
    if (auto* cb = llvm::dyn_cast<llvm::CallBase>(u)) work.push_back(cb);
  std::set<llvm::Function*> callers;
  while (!work.empty()) {
    llvm::CallBase* cb = work.back();
    work.pop_back();
    callers.insert(cb->getFunction());
    llvm::InlineFunctionInfo ifi;
    if (!llvm::InlineFunction(*cb, ifi).isSuccess())
      internal_error("inlining a fused chain's kernel into '{}' failed",
                     cb->getFunction()->getName().str());
    for (llvm::CallBase* inner : ifi.InlinedCallSites) {
      const llvm::Function* f = inner->getCalledFunction();
      if (f && !f->isDeclaration() && !f->isIntrinsic() &&
          !f->getName().startswith("_ZN6neuron8builtins"))
        work.push_back(inner);
    }
  }
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass());
  fpm.addPass(llvm::EarlyCSEPass());
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  for (llvm::Function* f : callers) fpm.run(*f, fam);
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm, int level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = level >= 2;
  pto.SLPVectorization = level >= 2;
  // Unrolling constant-trip loops of inlined kernels (tile sizes are constants) multiplies
  // code size and machine-code time for no gain on these memory-bound loops: measured in
  // docs/native.md.
  pto.LoopUnrolling = false;
  llvm::PassBuilder pb(&tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::OptimizationLevel ol = level <= 0   ? llvm::OptimizationLevel::O0
                               : level == 1 ? llvm::OptimizationLevel::O1
                               : level == 2 ? llvm::OptimizationLevel::O2
                                            : llvm::OptimizationLevel::O3;
  if (level > 0) specialize_chains(m, fam);
  llvm::ModulePassManager mpm = level <= 0 ? pb.buildO0DefaultPipeline(ol)
                                           : pb.buildPerModuleDefaultPipeline(ol);
  mpm.run(m, mam);
}

}  // namespace

std::string JitOptions::str() const {
  return fmt::format(
      "kernels={} O{}{}{}{}{} stream={}{}{}", bitcode_kernels ? "bitcode" : "host", opt_level,
      partition_blocks ? "" : " partition_blocks=off", sbuf_folding ? "" : " sbuf_folding=off",
      fused_chains ? "" : " fused_chains=off", transposed_matmul ? "" : " transposed_matmul=off",
      stream_store_bytes, profile ? " profile" : "",
      cpu_features.empty() ? "" : " cpu_features=" + cpu_features);
}

const std::string& host_target_id() {
  static const std::string id = host().triple + "/" + host().cpu + "/" + host().features;
  return id;
}

std::unique_ptr<llvm::TargetMachine> host_target_machine(int opt_level,
                                                         const std::string& cpu_features) {
  const HostTarget& h = host();
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(h.triple, err);
  if (!t) internal_error("no LLVM target for {}: {}", h.triple, err);
  llvm::TargetOptions to;
  auto level = opt_level <= 0   ? llvm::CodeGenOpt::None
               : opt_level == 1 ? llvm::CodeGenOpt::Less
               : opt_level == 2 ? llvm::CodeGenOpt::Default
                                : llvm::CodeGenOpt::Aggressive;
  // Later features override earlier ones (with everything they imply).
  const std::string features = cpu_features.empty() ? h.features : h.features + "," + cpu_features;
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(
      h.triple, h.cpu, features, to, llvm::Reloc::PIC_, llvm::CodeModel::Small, level));
  NEURON_ASSERT(tm, "could not create a target machine for {}", h.triple);
  return tm;
}

std::unique_ptr<llvm::Module> load_kernel_bitcode(llvm::LLVMContext& ctx) {
  llvm::MemoryBufferRef buf(
      llvm::StringRef(neuron_instr_kernels_bc,
                      static_cast<size_t>(neuron_instr_kernels_bc_end - neuron_instr_kernels_bc)),
      "instr_kernels.bc");
  auto m = llvm::getLazyBitcodeModule(buf, ctx);
  if (!m) fail(m.takeError(), "reading the embedded instruction-kernel bitcode");
  return std::move(*m);
}

ObjectCode compile_object(const Program& p, const JitOptions& opts) {
  ObjectCode out;
  auto tm = host_target_machine(opts.opt_level, opts.cpu_features);
  llvm::LLVMContext ctx;
  auto t0 = Clock::now();
  std::unique_ptr<llvm::Module> m = lower_program(p, opts, ctx, *tm);
  out.lower_ms = ms_since(t0);
  t0 = Clock::now();
  optimize(*m, *tm, opts.opt_level);
  out.optimize_ms = ms_since(t0);
  t0 = Clock::now();
  llvm::SmallVector<char, 0> buf;
  {
    llvm::raw_svector_ostream os(buf);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CGFT_ObjectFile))
      internal_error("the host target machine cannot emit object files");
    pm.run(*m);
  }
  out.bytes.assign(buf.begin(), buf.end());
  out.codegen_ms = ms_since(t0);
  return out;
}

std::string program_llvm_ir(const Program& p, const JitOptions& opts, bool opt) {
  auto tm = host_target_machine(opts.opt_level, opts.cpu_features);
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> m = lower_program(p, opts, ctx, *tm);
  if (opt) optimize(*m, *tm, opts.opt_level);
  std::string s;
  llvm::raw_string_ostream os(s);
  m->print(os, nullptr);
  return os.str();
}

namespace {

std::string error_text(llvm::Error e) {
  std::string msg;
  llvm::raw_string_ostream os(msg);
  os << e;
  return os.str();
}

// The last owner of a kernel's code is gone: remove its JITDylib, which releases the object's
// memory (RTDyld's memory manager unmaps its pages and deregisters its EH frames).
void unload(llvm::orc::JITDylib* jd) {
  Jit& j = jit();
  std::lock_guard<std::mutex> lock(j.mutex);
  if (auto e = j.jit->getExecutionSession().removeJITDylib(*jd))
    // A destructor cannot throw; the code stays mapped, nothing is unsafe.
    fmt::print(stderr, "neuron: warning: could not unload a JIT'd kernel: {}\n",
               error_text(std::move(e)));
  --j.loaded;
}

}  // namespace

LoadedObject load_object(const std::vector<std::uint8_t>& object) {
  auto t0 = Clock::now();
  Jit& j = jit();
  LoadedObject out;
  std::lock_guard<std::mutex> lock(j.mutex);
  {
    std::lock_guard<std::mutex> errors(j.errors_mutex);
    j.session_errors.clear();
  }
  auto& es = j.jit->getExecutionSession();
  llvm::orc::JITDylib& jd = es.createBareJITDylib(fmt::format("neuron.kernel.{}", j.next++));
  jd.addToLinkOrder(j.jit->getMainJITDylib());
  // A failed load leaves nothing behind: the JITDylib is removed, then the error is thrown.
  auto failed = [&](llvm::Error e, const char* what) {
    std::string msg = fmt::format("{}: {}", what, error_text(std::move(e)));
    {
      std::lock_guard<std::mutex> errors(j.errors_mutex);
      if (!j.session_errors.empty()) msg += " (" + j.session_errors + ")";
    }
    if (auto e2 = es.removeJITDylib(jd)) msg += "; removing it: " + error_text(std::move(e2));
    // ENOMEM from mmap/mprotect ("Cannot allocate memory") or RTDyld's "Unable to allocate
    // section memory".
    const bool oom = msg.find("allocate") != std::string::npos;
    throw JitLoadError(msg, oom);
  };
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(reinterpret_cast<const char*>(object.data()), object.size()),
      "neuron-kernel.o");
  if (auto e = j.jit->addObjectFile(jd, std::move(buf))) failed(std::move(e), "adding a kernel object");
  auto sym = j.jit->lookup(jd, "neuron_entry");
  if (!sym) failed(sym.takeError(), "resolving a kernel's entry point");
  out.entry = reinterpret_cast<KernelEntry>(sym->getAddress());
  ++j.loaded;
  out.owner = std::shared_ptr<void>(&jd, [](void* p) { unload(static_cast<llvm::orc::JITDylib*>(p)); });
  out.load_ms = ms_since(t0);
  return out;
}

std::size_t loaded_object_count() { return jit().loaded.load(); }

}  // namespace neuron::native
