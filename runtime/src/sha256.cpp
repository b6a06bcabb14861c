// SHA-256 through LLVM's implementation; lower-case hex for keys and file names.
#include "neuron/runtime/sha256.hpp"

#include <llvm/ADT/ArrayRef.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/SHA256.h>

#include <algorithm>

#include "neuron/base/error.hpp"

namespace neuron {

Sha256::Sha256() : hash_(std::make_unique<llvm::SHA256>()) {}

Sha256::~Sha256() = default;

void Sha256::update(std::span<const std::uint8_t> bytes) {
  NEURON_ASSERT(!finished_, "Sha256::update after digest()");
  hash_->update(llvm::ArrayRef<std::uint8_t>(bytes.data(), bytes.size()));
}

Sha256::Digest Sha256::digest() {
  NEURON_ASSERT(!finished_, "Sha256::digest called twice");
  finished_ = true;
  llvm::StringRef raw = hash_->final();
  NEURON_ASSERT(raw.size() == 32, "LLVM's SHA256 gave {} bytes", raw.size());
  Digest out;
  std::copy(raw.bytes_begin(), raw.bytes_end(), out.begin());
  return out;
}

Sha256::Digest sha256(std::span<const std::uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return h.digest();
}

std::string to_hex(const Sha256::Digest& digest) {
  return llvm::toHex(llvm::ArrayRef<std::uint8_t>(digest.data(), digest.size()),
                     /*LowerCase=*/true);
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return to_hex(h.digest());
}

}  // namespace neuron
