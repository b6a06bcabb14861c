// SHA-256 (FIPS 180-4) for cache keys and entry checksums: LLVM's (llvm/Support/SHA256.h),
// behind an LLVM-free header.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace neuron {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::span<const std::uint8_t> bytes);
// Lower-case hex of a digest (64 characters).
std::string to_hex(const Sha256Digest& digest);
std::string sha256_hex(std::string_view text);

}  // namespace neuron
