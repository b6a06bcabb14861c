// Shared helpers for the compile cache tests: scratch directories, env overrides, warning
// capture and deterministic blobs.
#pragma once
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "neuron/runtime/cache.hpp"

namespace neuron::cache_test {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/neuron-cache-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// Sets (or unsets, with nullptr) an environment variable for one scope.
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~EnvGuard() {
    if (old)
      setenv(name.c_str(), old->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

struct Warnings {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::size_t size() {
    std::lock_guard lock(mutex);
    return lines.size();
  }
  std::string last() {
    std::lock_guard lock(mutex);
    return lines.empty() ? std::string() : lines.back();
  }
};

inline CacheOptions options_in(const std::string& dir, Warnings* warnings = nullptr) {
  CacheOptions o;
  o.mode = CacheMode::on;
  o.dir = dir;
  if (warnings)
    o.warn = [warnings](const std::string& line) {
      std::lock_guard lock(warnings->mutex);
      warnings->lines.push_back(line);
    };
  return o;
}

// Deterministic bytes, different for every seed (a 64-bit LCG).
inline Blob make_blob(std::size_t n, std::uint64_t seed) {
  Blob b(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : b) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = std::uint8_t(x >> 56);
  }
  return b;
}

inline std::string test_key(int i) {
  return cache_key(fmt::format("kernel {}", i), "trn2", "-O2", "test-build");
}

inline Blob read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Blob(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const fs::path& p, const Blob& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

inline fs::path entry_file(const TempDir& d, const std::string& key) {
  return d.path / (key + ".neuronc");
}

inline bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c)) && !(c >= 'a' && c <= 'f')) return false;
  return true;
}

}  // namespace neuron::cache_test
