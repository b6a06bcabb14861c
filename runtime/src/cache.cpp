// The compile cache: keys, the in-process LRU level, and the lookup/store policy that ties it
// to the disk level (cache_disk.cpp).
#include "neuron/runtime/cache.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "neuron/runtime/sha256.hpp"

namespace neuron {

std::string cache_key(std::string_view ir_text, std::string_view target, std::string_view options,
                      std::string_view build_id) {
  Sha256 h;
  h.update(std::string_view("neuron-cache-key-v1\n"));
  for (std::string_view field : {ir_text, target, options, build_id}) {
    h.update(fmt::format("{}:", field.size()));
    h.update(field);
  }
  return to_hex(h.digest());
}

std::string cache_key(std::string_view ir_text, std::string_view target, std::string_view options) {
  return cache_key(ir_text, target, options, toolkit_build_id());
}

std::string_view to_string(CacheLevel level) {
  switch (level) {
    case CacheLevel::none:
      return "none";
    case CacheLevel::memory:
      return "memory";
    case CacheLevel::disk:
      return "disk";
  }
  return "?";
}

CacheOptions CacheOptions::from_config(const Config& c) {
  CacheOptions o;
  o.mode = c.cache_mode;
  o.dir = c.cache_dir;
  o.max_disk_bytes = c.cache_max_bytes;
  o.max_memory_entries = c.cache_memory_entries;
  return o;
}

CompileCache::CompileCache(CacheOptions options) : options_(std::move(options)) {}

CompileCache& CompileCache::global() {
  static CompileCache cache(CacheOptions::from_config(config()));
  // Re-read the environment so a long-lived process (or a test) sees NEURON_CACHE* changes.
  CacheOptions now = CacheOptions::from_config(config());
  {
    std::lock_guard lock(cache.mutex_);
    if (now.mode == cache.options_.mode && now.dir == cache.options_.dir &&
        now.max_disk_bytes == cache.options_.max_disk_bytes &&
        now.max_memory_entries == cache.options_.max_memory_entries)
      return cache;
  }
  cache.reconfigure(std::move(now));
  return cache;
}

CacheOptions CompileCache::options() const {
  std::lock_guard lock(mutex_);
  return options_;
}

void CompileCache::reconfigure(CacheOptions options) {
  std::lock_guard lock(mutex_);
  if (!options.warn) options.warn = options_.warn;
  options_ = std::move(options);
  while (!lru_.empty() &&
         (lru_.size() > options_.max_memory_entries || memory_bytes_ > options_.max_memory_bytes)) {
    memory_bytes_ -= lru_.back().blob->size();
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++stats_.memory_evictions;
  }
}

std::optional<Blob> CompileCache::lookup(const std::string& key, CacheLevel* hit_level) {
  CacheOptions opts = options();
  CacheLevel level = CacheLevel::none;
  std::optional<Blob> found = lookup_memory(key, opts);
  if (found) {
    level = CacheLevel::memory;
  } else if (opts.mode != CacheMode::off && !opts.dir.empty()) {
    found = lookup_disk(key, opts);
    if (found) {
      level = CacheLevel::disk;
      store_memory(key, std::make_shared<const Blob>(*found));
    }
  }
  {
    std::lock_guard lock(mutex_);
    if (level == CacheLevel::memory)
      ++stats_.memory_hits;
    else if (level == CacheLevel::disk)
      ++stats_.disk_hits;
    else
      ++stats_.misses;
  }
  if (hit_level) *hit_level = level;
  return found;
}

void CompileCache::store(const std::string& key, const Blob& blob) {
  CacheOptions opts = options();
  store_memory(key, std::make_shared<const Blob>(blob));
  {
    std::lock_guard lock(mutex_);
    ++stats_.stores;
  }
  if (opts.mode == CacheMode::off || opts.dir.empty()) return;
  bool ok = store_disk(key, blob, opts);
  {
    std::lock_guard lock(mutex_);
    ++(ok ? stats_.disk_stores : stats_.disk_store_failures);
  }
  if (ok) evict_disk(key, opts);
}

struct CompileCache::InFlight {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::shared_ptr<const Blob> blob;
  std::exception_ptr error;
};

Blob CompileCache::get_or_compile(const std::string& key, const std::function<Blob()>& compile,
                                  CacheLevel* level, std::string_view what, const Span& span) {
  if (auto hit = lookup(key, level)) return std::move(*hit);
  CacheOptions opts = options();
  if (opts.mode == CacheMode::must_hit)
    user_error(span, "cache-miss",
               "kernel '{}' (cache key {}) is not in the compile cache at {} and "
               "NEURON_CACHE=must-hit forbids compiling it; warm the cache with this toolkit "
               "build ({}) first",
               what.empty() ? std::string_view("<unnamed>") : what, key,
               opts.dir.empty() ? std::string("<no directory>") : opts.dir,
               toolkit_build_id().substr(0, 12));
  std::shared_ptr<InFlight> flight;
  bool mine = false;
  {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = compiling_.try_emplace(key);
    if (inserted) it->second = std::make_shared<InFlight>();
    flight = it->second;
    mine = inserted;
  }
  if (!mine) {  // another thread is compiling this key: wait for its result or its error
    std::unique_lock wait(flight->mutex);
    flight->done_cv.wait(wait, [&] { return flight->done; });
    if (flight->error) std::rethrow_exception(flight->error);
    {
      std::lock_guard lock(mutex_);
      ++stats_.waited;
    }
    if (level) *level = CacheLevel::memory;
    return Blob(*flight->blob);
  }
  auto finish = [&](std::shared_ptr<const Blob> blob, std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      compiling_.erase(key);
    }
    std::lock_guard done(flight->mutex);
    flight->blob = std::move(blob);
    flight->error = error;
    flight->done = true;
    flight->done_cv.notify_all();
  };
  try {
    Blob blob = compile();
    store(key, blob);
    finish(std::make_shared<const Blob>(blob), nullptr);
    return blob;
  } catch (...) {
    finish(nullptr, std::current_exception());
    throw;
  }
}

std::optional<Blob> CompileCache::lookup_memory(const std::string& key, const CacheOptions& opts) {
  std::shared_ptr<const Blob> blob;
  bool touch = false;
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    blob = it->second->blob;
    // Keep the disk level's LRU order roughly right for entries served from memory, without a
    // syscall on every hit.
    auto now = std::chrono::steady_clock::now();
    if (now - it->second->disk_touched > std::chrono::seconds(60)) {
      it->second->disk_touched = now;
      touch = true;
    }
  }
  if (touch && opts.mode != CacheMode::off && !opts.dir.empty()) touch_disk_entry(key, opts);
  return Blob(*blob);
}

void CompileCache::store_memory(const std::string& key, std::shared_ptr<const Blob> blob) {
  std::lock_guard lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    memory_bytes_ -= it->second->blob->size();
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (options_.max_memory_entries == 0 || blob->size() > options_.max_memory_bytes) return;
  memory_bytes_ += blob->size();
  lru_.push_front(MemEntry{key, std::move(blob), std::chrono::steady_clock::now()});
  index_[key] = lru_.begin();
  while (lru_.size() > options_.max_memory_entries || memory_bytes_ > options_.max_memory_bytes) {
    memory_bytes_ -= lru_.back().blob->size();
    index_.erase(lru_.back().key);
    lru_.pop_back();
    ++stats_.memory_evictions;
  }
}

void CompileCache::clear_memory() {
  std::lock_guard lock(mutex_);
  lru_.clear();
  index_.clear();
  memory_bytes_ = 0;
}

CacheStats CompileCache::stats() const {
  std::lock_guard lock(mutex_);
  CacheStats s = stats_;
  s.memory_entries = lru_.size();
  s.memory_bytes = memory_bytes_;
  return s;
}

void CompileCache::warn_once(const CacheOptions& opts, const std::string& what,
                             const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (!warned_.insert(what).second) return;
  }
  std::string line = fmt::format("neuron: warning: compile cache: {}", message);
  if (opts.warn)
    opts.warn(line);
  else
    fmt::print(stderr, "{}\n", line);
}

void CompileCache::forget_warning(const std::string& what) {
  std::lock_guard lock(mutex_);
  warned_.erase(what);
}

}  // namespace neuron
