// SHA-256 (FIPS 180-4) for cache keys and entry checksums, until LLVM's hashing is linked in.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace neuron {

// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256();
  void update(std::span<const std::uint8_t> bytes);
  void update(std::string_view text) {
    update({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
  }
  Digest digest();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

Sha256::Digest sha256(std::span<const std::uint8_t> bytes);
// Lower-case hex of a digest (64 characters).
std::string to_hex(const Sha256::Digest& digest);
std::string sha256_hex(std::string_view text);

}  // namespace neuron
