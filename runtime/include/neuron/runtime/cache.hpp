// The compile cache: compiled artifacts (opaque bytes) by key, in memory and on disk.
// Format, guarantees and knobs: docs/cache.md.
#pragma once
#include <chrono>
#include <condition_variable>
#include <exception>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "neuron/base/error.hpp"
#include "neuron/base/config.hpp"

namespace neuron {

using Blob = std::vector<std::uint8_t>;

// An id of the toolkit's sources (SHA-256 over dsl/, codegen/, runtime/, computed at build
// time by cmake/build_id.cmake). Part of every key, so a changed toolkit never reuses entries.
std::string_view toolkit_build_id();

// Hex SHA-256 over the length-framed fields, so ("ab", "c") and ("a", "bc") differ.
std::string cache_key(std::string_view ir_text, std::string_view target, std::string_view options,
                      std::string_view build_id);
// The same with toolkit_build_id(): what the JIT uses.
std::string cache_key(std::string_view ir_text, std::string_view target, std::string_view options);

enum class CacheLevel { none, memory, disk };
std::string_view to_string(CacheLevel level);

struct CacheOptions {
  CacheMode mode = CacheMode::on;
  std::string dir;  // disk level; empty means no disk level
  std::uint64_t max_disk_bytes = std::uint64_t(1) << 30;
  std::uint64_t max_memory_bytes = std::uint64_t(256) << 20;
  std::size_t max_memory_entries = 512;
  // Where warnings go (corrupt entries, an unwritable directory); stderr when empty.
  std::function<void(const std::string&)> warn;

  static CacheOptions from_config(const Config& c);
};

struct CacheEntryInfo {
  std::string key;
  std::string path;
  std::uint64_t file_bytes = 0;
  std::uint64_t payload_bytes = 0;  // from the header; 0 when the header is unreadable
  std::chrono::system_clock::time_point last_used;  // the file's mtime
  std::string build_id;                             // toolkit build that wrote it
  bool header_ok = false;      // magic, version and key match (payload not checked)
  bool current_build = false;  // build_id == toolkit_build_id()
};

struct CacheStats {
  std::uint64_t memory_hits = 0, disk_hits = 0, misses = 0;
  std::uint64_t stores = 0, disk_stores = 0, disk_store_failures = 0;
  std::uint64_t corrupt_entries = 0;  // found on disk, reported, removed
  std::uint64_t memory_evictions = 0, disk_evictions = 0;
  std::uint64_t memory_entries = 0, memory_bytes = 0;
  std::uint64_t waited = 0;  // misses served by another thread's compile of the same key
};

class CompileCache {
 public:
  explicit CompileCache(CacheOptions options);
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  // The process-wide cache. Follows the environment (config()): when NEURON_CACHE,
  // NEURON_CACHE_DIR or NEURON_CACHE_MAX_BYTES change, the next call reconfigures it.
  static CompileCache& global();

  // Memory, then disk (a disk hit is promoted to memory). *hit_level says where it was found.
  // Never throws for a missing, corrupt or unreadable entry: that is a miss.
  std::optional<Blob> lookup(const std::string& key, CacheLevel* hit_level = nullptr);
  // Never throws for an unwritable or full directory: the disk store is skipped with a
  // one-time warning.
  void store(const std::string& key, const Blob& blob);
  // lookup, else compile() and store. In must-hit mode a miss is UserError "cache-miss"
  // naming `what` (the kernel), the key and the directory, thrown before compile() runs.
  // Threads missing the same key at once compile it once: the others wait for that result
  // (reported as a memory hit) or its error.
  Blob get_or_compile(const std::string& key, const std::function<Blob()>& compile,
                      CacheLevel* level = nullptr, std::string_view what = {},
                      const Span& span = {});

  std::vector<CacheEntryInfo> list() const;  // disk entries, least recently used first
  void clear();                              // both levels (disk: only files we wrote)
  void clear_memory();
  std::size_t remove_stale();  // disk entries of other toolkit builds
  CacheStats stats() const;
  CacheOptions options() const;
  void reconfigure(CacheOptions options);  // keeps the memory level

 private:
  struct MemEntry {
    std::string key;
    std::shared_ptr<const Blob> blob;
    std::chrono::steady_clock::time_point disk_touched;
  };
  std::optional<Blob> lookup_memory(const std::string& key, const CacheOptions& opts);
  void store_memory(const std::string& key, std::shared_ptr<const Blob> blob);
  std::optional<Blob> lookup_disk(const std::string& key, const CacheOptions& opts);
  bool store_disk(const std::string& key, const Blob& blob, const CacheOptions& opts);
  void touch_disk_entry(const std::string& key, const CacheOptions& opts);
  void evict_disk(const std::string& keep_key, const CacheOptions& opts);
  void warn_once(const CacheOptions& opts, const std::string& what, const std::string& message);
  void forget_warning(const std::string& what);

  mutable std::mutex mutex_;
  CacheOptions options_;
  std::list<MemEntry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<MemEntry>::iterator> index_;
  std::uint64_t memory_bytes_ = 0;
  CacheStats stats_;
  std::set<std::string> warned_;
  struct InFlight;  // a compile in progress, which other threads missing its key wait for
  std::unordered_map<std::string, std::shared_ptr<InFlight>> compiling_;
};

}  // namespace neuron
