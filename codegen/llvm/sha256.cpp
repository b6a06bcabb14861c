// SHA-256 through LLVM's implementation (the codegen layer links LLVM; its headers stay in
// codegen/llvm/*.cpp).
#include "neuron/codegen/sha256.hpp"

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/Support/SHA256.h>

namespace neuron {

Sha256Digest sha256(std::span<const std::uint8_t> bytes) {
  return llvm::SHA256::hash(llvm::ArrayRef<std::uint8_t>(bytes.data(), bytes.size()));
}

std::string to_hex(const Sha256Digest& digest) {
  return llvm::toHex(llvm::ArrayRef<std::uint8_t>(digest.data(), digest.size()), /*LowerCase=*/true);
}

std::string sha256_hex(std::string_view text) {
  return to_hex(sha256({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}));
}

}  // namespace neuron
