// Compile cache modes and management: unwritable directories, must-hit, environment, list/clear.
#include <doctest/doctest.h>
#include <stdio.h>
#include <unistd.h>

#include "cache_test_util.hpp"
#include "neuron/runtime/sha256.hpp"

using namespace neuron;
using namespace neuron::cache_test;

TEST_CASE("an unwritable cache directory never fails the caller") {
  TempDir d;
  std::ofstream(d.path / "file") << "a regular file, not a directory";
  Warnings w;
  std::string dir = (d.path / "file" / "cache").string();
  CompileCache cache(options_in(dir, &w));
  int compiles = 0;
  CacheLevel level;
  for (int i = 0; i < 3; ++i) {
    Blob b = cache.get_or_compile(
        test_key(500 + i),
        [&] {
          ++compiles;
          return make_blob(64, 5);
        },
        &level);
    CHECK(b == make_blob(64, 5));
  }
  CHECK(compiles == 3);
  REQUIRE(w.size() == 1);  // one warning, not one per store
  CHECK(w.last().find(dir) != std::string::npos);
  CHECK(cache.stats().disk_store_failures == 3);
  CHECK(cache.lookup(test_key(500), &level));  // the memory level still works
  CHECK(level == CacheLevel::memory);
  CHECK(cache.list().empty());

  if (geteuid() == 0) {
    MESSAGE(
        "running as root: chmod 0555 does not block writes, so the read-only directory "
        "check is skipped (the regular-file parent above covers the unwritable path)");
    return;
  }
  // Read-only directory with an existing entry: loads still work, stores are skipped.
  TempDir ro;
  std::string key = test_key(510);
  CompileCache(options_in(ro.str())).store(key, make_blob(100, 10));
  fs::permissions(ro.path, fs::perms(0555), fs::perm_options::replace);
  Warnings w2;
  CompileCache reader(options_in(ro.str(), &w2));
  auto hit = reader.lookup(key, &level);
  REQUIRE(hit);
  CHECK(level == CacheLevel::disk);
  CHECK(*hit == make_blob(100, 10));
  reader.store(test_key(511), make_blob(10, 11));
  reader.store(test_key(512), make_blob(10, 12));
  CHECK(w2.size() == 1);
  // A damaged entry that cannot be removed is still never used, and reported only once.
  fs::permissions(ro.path, fs::perms::owner_all, fs::perm_options::add);
  Blob f = read_file(entry_file(ro, key));
  f.back() ^= 0x80;
  write_file(entry_file(ro, key), f);
  fs::permissions(ro.path, fs::perms(0555), fs::perm_options::replace);
  CompileCache reader2(options_in(ro.str(), &w2));
  CHECK_FALSE(reader2.lookup(key));
  CHECK_FALSE(reader2.lookup(key));
  CHECK(w2.size() == 2);
  CHECK(w2.last().find("checksum") != std::string::npos);
  CHECK(fs::exists(entry_file(ro, key)));
}

TEST_CASE("must-hit mode turns a miss into a cache-miss error") {
  TempDir d;
  CacheOptions o = options_in(d.str());
  o.mode = CacheMode::must_hit;
  CompileCache cache(o);
  std::string key = test_key(600);
  int compiles = 0;
  try {
    cache.get_or_compile(
        key,
        [&] {
          ++compiles;
          return Blob{};
        },
        nullptr, "tiled_matmul");
    FAIL("expected a cache-miss error");
  } catch (const UserError& e) {
    CHECK(e.rule() == "cache-miss");
    CHECK(e.message().find("tiled_matmul") != std::string::npos);
    CHECK(e.message().find(key) != std::string::npos);
    CHECK(e.message().find(d.str()) != std::string::npos);
  }
  CHECK(compiles == 0);

  // Warmed by a normal run, the deployment hits and never compiles.
  CompileCache(options_in(d.str())).store(key, make_blob(50, 6));
  CacheLevel level;
  Blob b = cache.get_or_compile(
      key,
      [&] {
        ++compiles;
        return Blob{};
      },
      &level, "tiled_matmul");
  CHECK(b == make_blob(50, 6));
  CHECK(level == CacheLevel::disk);
  CHECK(compiles == 0);
}

TEST_CASE("cache settings come from the environment") {
  TempDir d;
  {
    EnvGuard dir("NEURON_CACHE_DIR", d.str().c_str());
    EnvGuard mode("NEURON_CACHE", "must-hit");
    EnvGuard max("NEURON_CACHE_MAX_BYTES", "64M");
    Config c = config();
    CHECK(c.cache_dir == d.str());
    CHECK(c.cache_mode == CacheMode::must_hit);
    CHECK(c.cache_max_bytes == 64ull * 1024 * 1024);
    CompileCache& g = CompileCache::global();
    CHECK(g.options().dir == d.str());
    CHECK(g.options().mode == CacheMode::must_hit);
    CHECK_THROWS_AS(g.get_or_compile(test_key(700), [] { return Blob{}; }), UserError);
  }
  {
    EnvGuard dir("NEURON_CACHE_DIR", nullptr);
    EnvGuard xdg("XDG_CACHE_HOME", "/some/xdg");
    EnvGuard mode("NEURON_CACHE", "off");
    EnvGuard max("NEURON_CACHE_MAX_BYTES", "12345");
    Config c = config();
    CHECK(c.cache_dir == "/some/xdg/neuron");
    CHECK(c.cache_mode == CacheMode::off);
    CHECK(c.cache_max_bytes == 12345);
    CHECK(CompileCache::global().options().mode == CacheMode::off);
  }
  {
    EnvGuard dir("NEURON_CACHE_DIR", nullptr);
    EnvGuard xdg("XDG_CACHE_HOME", "relative/is/ignored");
    EnvGuard home("HOME", "/home/someone");
    EnvGuard mode("NEURON_CACHE", nullptr);
    EnvGuard max("NEURON_CACHE_MAX_BYTES", nullptr);
    CHECK(config().cache_dir == "/home/someone/.cache/neuron");
    CHECK(config().cache_max_bytes == 1ull << 30);
    CHECK(config().cache_mode == CacheMode::on);
  }
  {
    EnvGuard mode("NEURON_CACHE", "sometimes");
    CHECK_THROWS_AS(config(), UserError);
  }
  {
    EnvGuard max("NEURON_CACHE_MAX_BYTES", "12X");
    CHECK_THROWS_AS(config(), UserError);
  }
}

TEST_CASE("list, clear and remove_stale") {
  TempDir d;
  CompileCache cache(options_in(d.str()));
  std::vector<std::string> keys = {test_key(800), test_key(801), test_key(802)};
  for (std::size_t i = 0; i < keys.size(); ++i) cache.store(keys[i], make_blob(100 * (i + 1), i));
  std::ofstream(d.path / "notes.txt") << "not ours";

  auto entries = cache.list();
  REQUIRE(entries.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(entries[i].key == keys[i]);  // stored in this order: least recent first
    CHECK(entries[i].payload_bytes == 100 * (i + 1));
    CHECK(entries[i].file_bytes == fs::file_size(entry_file(d, keys[i])));
    CHECK(entries[i].header_ok);
    CHECK(entries[i].current_build);
    CHECK(entries[i].build_id == toolkit_build_id());
  }

  // An entry from another build (its recorded build id differs) is stale.
  Blob f = read_file(entry_file(d, keys[1]));
  f[64 + keys[1].size()] ^= 0x01;
  write_file(entry_file(d, keys[1]), f);
  CHECK(cache.remove_stale() == 1);
  CHECK(cache.list().size() == 2);

  cache.clear();
  CHECK(cache.list().empty());
  CHECK_FALSE(cache.lookup(keys[0]));  // memory level cleared too
  CHECK(fs::exists(d.path / "notes.txt"));
}

TEST_CASE("neuron-cache lists, reports and clears a directory") {
  TempDir d;
  CompileCache cache(options_in(d.str()));
  std::string k0 = test_key(900), k1 = test_key(901);
  cache.store(k0, make_blob(2048, 0));
  cache.store(k1, make_blob(10, 1));
  auto run = [&](const char* args) {
    std::string cmd = fmt::format("'{}' --dir '{}' {} 2>&1", NEURON_CACHE_TOOL, d.str(), args);
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string out;
    char buf[4096];
    while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int status = pclose(p);
    CHECK(status == 0);
    return out;
  };
  std::string list = run("list");
  CHECK(list.find(k0) != std::string::npos);
  CHECK(list.find(k1) != std::string::npos);
  CHECK(list.find("current") != std::string::npos);
  CHECK(list.find(k0) < list.find(k1));  // least recently used first
  std::string info = run("info");
  CHECK(info.find("entries:     2") != std::string::npos);
  CHECK(info.find(std::string(toolkit_build_id())) != std::string::npos);
  CHECK(info.find(d.str()) != std::string::npos);
  CHECK(run("clear").find("removed 2 entries") != std::string::npos);
  CHECK(cache.list().empty());
}
