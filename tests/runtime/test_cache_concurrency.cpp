// Compile cache under concurrency: several processes and many threads on one directory.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "cache_test_util.hpp"
#include "neuron/runtime/sha256.hpp"

using namespace neuron;
using namespace neuron::cache_test;

TEST_CASE("processes storing and loading one key at once only ever see complete entries") {
  TempDir d;
  std::string key = test_key(300);
  constexpr int kWriters = 3;
  constexpr std::size_t kSize = 1 << 20;
  std::vector<Blob> versions;
  for (int w = 0; w < kWriters; ++w) versions.push_back(make_blob(kSize, std::uint64_t(w)));
  auto valid = [&](const Blob& b) {
    for (auto& v : versions)
      if (b == v) return true;
    return false;
  };
  auto make_cache = [&](Warnings* w) {
    CacheOptions o = options_in(d.str(), w);
    o.max_memory_entries = 0;  // every lookup reads the file
    return std::make_unique<CompileCache>(o);
  };

  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      Warnings warnings;
      auto cache = make_cache(&warnings);
      int status = 0;
      for (int i = 0; i < 12 && status == 0; ++i) {
        cache->store(key, versions[std::size_t(w)]);
        auto got = cache->lookup(key);
        if (got && !valid(*got)) status = 1;
        if (warnings.size() != 0) status = 2;
      }
      _exit(status);
    }
    children.push_back(pid);
  }
  Warnings warnings;
  auto cache = make_cache(&warnings);
  int reads = 0, hits = 0, bad = 0;
  std::size_t running = children.size();
  std::vector<int> statuses;
  while (running > 0) {
    auto got = cache->lookup(key);
    ++reads;
    if (got) {
      ++hits;
      bad += !valid(*got);
    }
    for (auto& pid : children) {
      int st = 0;
      if (pid > 0 && waitpid(pid, &st, WNOHANG) == pid) {
        statuses.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 100);
        pid = -1;
        --running;
      }
    }
  }
  CHECK(bad == 0);
  CHECK(warnings.size() == 0);
  for (int st : statuses) CHECK(st == 0);
  INFO("parent reads: ", reads, ", hits: ", hits);
  auto final_blob = cache->lookup(key);
  REQUIRE(final_blob);
  CHECK(valid(*final_blob));
  // Exactly one entry and no temp files left behind.
  CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()) == 1);
}

TEST_CASE("many threads share one cache") {
  TempDir d;
  Warnings w;
  CacheOptions o = options_in(d.str(), &w);
  o.max_memory_entries = 4;  // keeps both levels busy
  CompileCache cache(o);
  constexpr int kKeys = 16;
  std::atomic<int> bad{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        int k = (i * 7 + t * 3) % kKeys;
        std::string key = test_key(400 + k);
        Blob expect = make_blob(std::size_t(512 + 37 * k), std::uint64_t(k));
        if ((i + t) % 3 == 0) {
          cache.store(key, expect);
        } else if (auto got = cache.lookup(key)) {
          ++hits;
          if (*got != expect) ++bad;
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  CHECK(hits > 0);
  CHECK(w.size() == 0);
  CacheStats s = cache.stats();
  CHECK(s.memory_entries <= 4);
  CHECK(s.memory_hits + s.disk_hits == std::uint64_t(hits.load()));
}

TEST_CASE("threads missing one key at once compile it once; the others wait for it") {
  TempDir d;
  CompileCache cache(options_in(d.str()));
  const std::string key = test_key(400);
  const Blob expected = make_blob(4096, 7);
  std::atomic<int> compiles{0};
  auto slow_compile = [&] {
    compiles.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // all threads arrive meanwhile
    return expected;
  };
  constexpr int kThreads = 6;
  std::vector<Blob> got(kThreads);
  std::vector<CacheLevel> levels(kThreads, CacheLevel::none);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { got[t] = cache.get_or_compile(key, slow_compile, &levels[t]); });
  for (auto& th : threads) th.join();
  CHECK(compiles.load() == 1);
  for (int t = 0; t < kThreads; ++t) CHECK(got[t] == expected);
  CHECK(std::count(levels.begin(), levels.end(), CacheLevel::none) == 1);  // the compiler
  CHECK(cache.stats().waited == kThreads - 1);

  // A compile error reaches every waiter, and the next call compiles again.
  const std::string bad = test_key(401);
  std::atomic<int> attempts{0};
  auto failing = [&]() -> Blob {
    attempts.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    user_error(Span{}, "test-rule", "compile failed on purpose");
  };
  std::atomic<int> errors{0};
  threads.clear();
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      try {
        cache.get_or_compile(bad, failing);
      } catch (const UserError& e) {
        if (e.rule() == "test-rule") errors.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  CHECK(errors.load() == kThreads);
  CHECK(attempts.load() < kThreads);  // at least some waited instead of compiling
  CHECK(cache.get_or_compile(bad, [&] { return expected; }) == expected);
}
