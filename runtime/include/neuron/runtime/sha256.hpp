// SHA-256 digests for cache keys and entry checksums: LLVM's implementation
// (llvm/Support/SHA256.h, in the LLVM the toolkit links), behind a small interface so the
// runtime's headers do not include LLVM's.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace llvm {
class SHA256;
}

namespace neuron {

// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256();
  ~Sha256();
  void update(std::span<const std::uint8_t> bytes);
  void update(std::string_view text) {
    update({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  }
  Digest digest();

 private:
  std::unique_ptr<llvm::SHA256> hash_;
  bool finished_ = false;
};

Sha256::Digest sha256(std::span<const std::uint8_t> bytes);
// Lower-case hex of a digest (64 characters).
std::string to_hex(const Sha256::Digest& digest);
std::string sha256_hex(std::string_view text);

}  // namespace neuron
