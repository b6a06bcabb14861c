// One contiguous mapping per loaded kernel object.
//
// Kernels are compiled for the small code model: code reaches its constant pools and jump
// tables by 32-bit PC-relative offsets, so all sections of one object must lie within 2 GiB of
// each other. LLVM's SectionMemoryManager maps code, read-only data and read-write data
// separately, wherever mmap finds room; in a process with large libraries (torch) and holes left
// by unloaded kernels, a small constant pool can land in a hole near the top of the address space
// while a large code section lands gigabytes below it. RuntimeDyld then truncates the offset
// without a word (its overflow check is an assertion) and the kernel reads a wild address: a
// segfault in vLLM's paged attention, whose 1.2 MB of code went 3.2 GB below its constants.
// Here RuntimeDyld reserves the object's total size first and every section is carved out of that
// one mapping, so the offsets always fit.
#include "jit_memory.hpp"

#include <llvm/ExecutionEngine/RTDyldMemoryManager.h>
#include <llvm/Support/Memory.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace neuron::native {
namespace {

uintptr_t align_up(uintptr_t v, uintptr_t a) { return a <= 1 ? v : (v + a - 1) / a * a; }

class ContiguousMemoryManager final : public llvm::RTDyldMemoryManager {
 public:
  ~ContiguousMemoryManager() override {
    deregisterEHFrames();  // before the frames' memory goes
    if (base_) munmap(base_, size_);
  }

  bool needsToReserveAllocationSpace() override { return true; }

  void reserveAllocationSpace(uintptr_t code, uint32_t code_align, uintptr_t ro,
                              uint32_t ro_align, uintptr_t rw, uint32_t rw_align) override {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    // Each area starts on a page (its own permissions) and gets slack for the alignment of its
    // sections: RuntimeDyld's totals round every section up to the area's largest alignment.
    const uintptr_t sizes[3] = {align_up(code + code_align, page), align_up(ro + ro_align, page),
                                align_up(rw + rw_align, page)};
    size_ = sizes[0] + sizes[1] + sizes[2];
    if (size_ == 0) return;
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      size_ = 0;  // every allocation fails: RuntimeDyld reports "Unable to allocate"
      return;
    }
    base_ = static_cast<uint8_t*>(p);
    uint8_t* at = base_;
    for (int i = 0; i < 3; ++i) {
      areas_[i] = {at, at, at + sizes[i]};
      at += sizes[i];
    }
  }

  uint8_t* allocateCodeSection(uintptr_t size, unsigned align, unsigned, llvm::StringRef) override {
    return carve(areas_[kCode], size, align);
  }

  uint8_t* allocateDataSection(uintptr_t size, unsigned align, unsigned, llvm::StringRef,
                               bool read_only) override {
    return carve(areas_[read_only ? kReadOnly : kReadWrite], size, align);
  }

  bool finalizeMemory(std::string* error) override {
    auto protect = [&](const Area& a, int prot) {
      if (a.begin == a.end || mprotect(a.begin, size_t(a.end - a.begin), prot) == 0) return true;
      if (error) *error = std::string("mprotect: ") + std::strerror(errno);
      return false;
    };
    if (!protect(areas_[kCode], PROT_READ | PROT_EXEC) ||
        !protect(areas_[kReadOnly], PROT_READ))
      return true;  // RuntimeDyld's convention: true means an error
    llvm::sys::Memory::InvalidateInstructionCache(areas_[kCode].begin,
                                                  size_t(areas_[kCode].end - areas_[kCode].begin));
    return false;
  }

 private:
  enum { kCode, kReadOnly, kReadWrite };
  struct Area {
    uint8_t* begin = nullptr;
    uint8_t* next = nullptr;
    uint8_t* end = nullptr;
  };

  static uint8_t* carve(Area& a, uintptr_t size, unsigned align) {
    uint8_t* p = reinterpret_cast<uint8_t*>(align_up(reinterpret_cast<uintptr_t>(a.next), align));
    if (!a.next || p + size > a.end) return nullptr;  // more than was reserved
    a.next = p + size;
    return p;
  }

  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  Area areas_[3];
};

}  // namespace

std::unique_ptr<llvm::RuntimeDyld::MemoryManager> contiguous_memory_manager() {
  return std::make_unique<ContiguousMemoryManager>();
}

}  // namespace neuron::native
