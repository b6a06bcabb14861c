// Compile cache: hashing and keys, both levels, entry format, damaged entries, eviction.
#include <doctest/doctest.h>

#include "cache_test_util.hpp"
#include "neuron/runtime/sha256.hpp"

using namespace neuron;
using namespace neuron::cache_test;

TEST_CASE("sha256 matches the FIPS 180-4 / NIST example vectors") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(
      sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                 "klmnopqrlmnopqrsmnopqrstnopqrstu") ==
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in uneven pieces to exercise the block buffering.
  Sha256 h;
  std::string chunk(997, 'a');
  std::size_t left = 1000000;
  while (left > 0) {
    std::size_t n = std::min(left, chunk.size());
    h.update(std::string_view(chunk).substr(0, n));
    left -= n;
  }
  CHECK(to_hex(h.digest()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("cache key covers IR text, target, options and build id") {
  std::string base = cache_key("ir", "trn2", "-O2", "build-a");
  CHECK(is_hex64(base));
  CHECK(cache_key("ir", "trn2", "-O2", "build-a") == base);
  CHECK(cache_key("ir ", "trn2", "-O2", "build-a") != base);
  CHECK(cache_key("ir", "trn1", "-O2", "build-a") != base);
  CHECK(cache_key("ir", "trn2", "-O3", "build-a") != base);
  CHECK(cache_key("ir", "trn2", "-O2", "build-b") != base);
  // Fields are framed: moving bytes from one field to the next changes the key.
  CHECK(cache_key("ab", "c", "", "x") != cache_key("a", "bc", "", "x"));
  CHECK(cache_key("ir", "trn2", "-O2") == cache_key("ir", "trn2", "-O2", toolkit_build_id()));
  CHECK(is_hex64(toolkit_build_id()));
}

TEST_CASE("the build id generator reacts to every source change") {
  TempDir d;
  fs::create_directories(d.path / "dsl/src");
  fs::create_directories(d.path / "runtime/include");
  auto put = [&](const char* rel, const char* text) { std::ofstream(d.path / rel) << text; };
  put("dsl/src/a.cpp", "int a;\n");
  put("runtime/include/b.hpp", "int b();\n");
  fs::path out = d.path / "id.inc";
  auto run = [&]() {
    std::string cmd = fmt::format(
        "'{}' -DROOT='{}' -DDIRS=dsl,codegen,runtime -DEXTRA=gcc "
        "-DOUTPUT='{}' -P '{}'",
        NEURON_CMAKE_COMMAND, d.str(), out.string(), NEURON_BUILD_ID_SCRIPT);
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto at = text.find("NEURON_BUILD_ID \"");
    REQUIRE(at != std::string::npos);
    return text.substr(at + 17, 64);
  };
  std::string id0 = run();
  CHECK(is_hex64(id0));
  CHECK(run() == id0);
  put("notes.txt", "not a source\n");  // outside the roots
  put("dsl/README.md", "not a source\n");
  CHECK(run() == id0);
  put("dsl/src/a.cpp", "int a = 1;\n");
  std::string id1 = run();
  CHECK(id1 != id0);
  put("runtime/include/c.hpp", "\n");
  std::string id2 = run();
  CHECK(id2 != id1);
  fs::rename(d.path / "runtime/include/c.hpp", d.path / "runtime/include/d.hpp");
  CHECK(run() != id2);
}

TEST_CASE("store and lookup at both levels") {
  TempDir d;
  Warnings w;
  CompileCache cache(options_in(d.str(), &w));
  std::string key = test_key(1);
  Blob blob = make_blob(5000, 1);
  CacheLevel level = CacheLevel::disk;
  CHECK_FALSE(cache.lookup(key, &level));
  CHECK(level == CacheLevel::none);

  cache.store(key, blob);
  auto hit = cache.lookup(key, &level);
  REQUIRE(hit);
  CHECK(*hit == blob);
  CHECK(level == CacheLevel::memory);

  cache.clear_memory();
  hit = cache.lookup(key, &level);
  REQUIRE(hit);
  CHECK(*hit == blob);
  CHECK(level == CacheLevel::disk);
  hit = cache.lookup(key, &level);  // promoted to memory by the disk hit
  CHECK(level == CacheLevel::memory);

  // Another instance (a new process, as far as the disk is concerned) finds it on disk.
  CompileCache other(options_in(d.str(), &w));
  hit = other.lookup(key, &level);
  REQUIRE(hit);
  CHECK(*hit == blob);
  CHECK(level == CacheLevel::disk);

  CacheStats s = cache.stats();
  CHECK(s.memory_hits == 2);
  CHECK(s.disk_hits == 1);
  CHECK(s.misses == 1);
  CHECK(s.stores == 1);
  CHECK(s.disk_stores == 1);
  CHECK(s.memory_entries == 1);
  CHECK(s.memory_bytes == 5000);
  CHECK(w.size() == 0);

  // get_or_compile: compiles once, then serves from the cache.
  int compiles = 0;
  std::string key2 = test_key(2);
  Blob b2 = cache.get_or_compile(
      key2,
      [&] {
        ++compiles;
        return make_blob(77, 2);
      },
      &level);
  CHECK(b2 == make_blob(77, 2));
  CHECK(level == CacheLevel::none);
  b2 = cache.get_or_compile(
      key2,
      [&] {
        ++compiles;
        return Blob{};
      },
      &level);
  CHECK(b2 == make_blob(77, 2));
  CHECK(level == CacheLevel::memory);
  CHECK(compiles == 1);
}

TEST_CASE("disk entry layout") {
  TempDir d;
  CompileCache cache(options_in(d.str()));
  std::string key = test_key(3);
  Blob blob = make_blob(300, 3);
  cache.store(key, blob);
  Blob file = read_file(entry_file(d, key));
  std::string_view id = toolkit_build_id();
  REQUIRE(file.size() == 64 + key.size() + id.size() + blob.size());
  CHECK(std::string(file.begin(), file.begin() + 8) == "NRNCACHE");
  CHECK(file[8] == 1);  // version 1, little-endian
  CHECK(file[9] == 0);
  CHECK(file[12] == key.size());
  CHECK(file[16] == id.size());
  CHECK(file[24] == (300 & 0xff));
  CHECK(file[25] == (300 >> 8));
  auto sum = sha256(blob);
  CHECK(Blob(file.begin() + 32, file.begin() + 64) == Blob(sum.begin(), sum.end()));
  CHECK(std::string(file.begin() + 64, file.begin() + 64 + std::ptrdiff_t(key.size())) == key);
  CHECK(Blob(file.end() - 300, file.end()) == blob);
  // Nothing else is left in the directory (the temp file was renamed).
  CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()) == 1);

  // The checksum is plain SHA-256 of the payload (the FIPS 180-4 vector of "abc"), as in every
  // version-1 entry: entries written before SHA-256 came from LLVM still verify.
  std::string abc_key = test_key(4);
  cache.store(abc_key, Blob{'a', 'b', 'c'});
  Blob abc_file = read_file(entry_file(d, abc_key));
  Sha256::Digest stored{};
  std::copy(abc_file.begin() + 32, abc_file.begin() + 64, stored.begin());
  CHECK(to_hex(stored) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("damaged entries are reported, removed and recompiled, never returned") {
  TempDir d;
  Warnings w;
  std::string_view id = toolkit_build_id();
  struct Damage {
    const char* name;
    const char* reason;  // a piece of the warning
    std::function<void(Blob&, const TempDir&, const std::string& key)> apply;
  };
  std::vector<Damage> cases = {
      {"flipped payload byte", "checksum",
       [](Blob& f, const TempDir&, const std::string&) { f[f.size() - 100] ^= 0x01; }},
      {"truncated payload", "truncated",
       [](Blob& f, const TempDir&, const std::string&) { f.resize(f.size() - 10); }},
      {"truncated inside the header", "truncated",
       [](Blob& f, const TempDir&, const std::string&) { f.resize(20); }},
      {"empty file", "truncated", [](Blob& f, const TempDir&, const std::string&) { f.clear(); }},
      {"appended garbage", "padded",
       [](Blob& f, const TempDir&, const std::string&) { f.push_back(0); }},
      {"wrong magic", "magic", [](Blob& f, const TempDir&, const std::string&) { f[0] = 'X'; }},
      {"wrong version", "version", [](Blob& f, const TempDir&, const std::string&) { f[8] = 2; }},
      {"another toolkit build", "another toolkit build",
       [id](Blob& f, const TempDir&, const std::string& key) {
         f[64 + key.size() + id.size() - 1] ^= 0x01;
       }},
      {"another key's entry under this name", "instead",
       [](Blob& f, const TempDir& d, const std::string&) {
         // A complete, valid entry for a different key, renamed to this key's file.
         CompileCache other(options_in(d.str() + "/other"));
         other.store(test_key(999), make_blob(f.size(), 999));
         f = read_file(d.path / "other" / (test_key(999) + ".neuronc"));
       }},
  };
  int i = 100;
  for (auto& c : cases) {
    CAPTURE(c.name);
    std::string key = test_key(++i);
    Blob good = make_blob(4096, std::uint64_t(i));
    {
      CompileCache writer(options_in(d.str()));
      writer.store(key, good);
    }
    fs::path path = entry_file(d, key);
    Blob file = read_file(path);
    c.apply(file, d, key);
    write_file(path, file);

    CompileCache cache(options_in(d.str(), &w));
    std::size_t before = w.size();
    CacheLevel level = CacheLevel::memory;
    CHECK_FALSE(cache.lookup(key, &level));
    CHECK(level == CacheLevel::none);
    REQUIRE(w.size() == before + 1);
    CHECK(w.last().find(path.string()) != std::string::npos);
    CHECK(w.last().find(c.reason) != std::string::npos);
    CHECK_FALSE(fs::exists(path));  // removed
    CHECK(cache.stats().corrupt_entries == 1);

    // The caller recompiles; the fresh entry is complete and served from disk afterwards.
    int compiles = 0;
    Blob got = cache.get_or_compile(
        key,
        [&] {
          ++compiles;
          return good;
        },
        &level);
    CHECK(got == good);
    CHECK(compiles == 1);
    CompileCache fresh(options_in(d.str(), &w));
    auto hit = fresh.lookup(key, &level);
    REQUIRE(hit);
    CHECK(*hit == good);
    CHECK(level == CacheLevel::disk);
    CHECK(w.size() == before + 1);  // one warning per damaged entry
  }
}

TEST_CASE("entries of another toolkit build are never used") {
  // The build id is part of the key, so a changed toolkit looks up different files.
  TempDir d;
  CompileCache cache(options_in(d.str()));
  std::string old_key = cache_key("ir", "trn2", "", "old-build");
  std::string new_key = cache_key("ir", "trn2", "", "new-build");
  cache.store(old_key, make_blob(10, 1));
  cache.clear_memory();
  CHECK_FALSE(cache.lookup(new_key));
  CHECK(cache.lookup(old_key));
}

TEST_CASE("disk eviction keeps the most recently used entries") {
  TempDir d;
  CacheOptions o = options_in(d.str());
  o.max_memory_entries = 0;  // every lookup goes to disk
  std::string_view id = toolkit_build_id();
  std::uint64_t entry_bytes = 64 + 64 + id.size() + 1000;
  o.max_disk_bytes = 3 * entry_bytes + entry_bytes / 2;  // room for three entries
  CompileCache cache(o);
  std::vector<std::string> k;
  for (int i = 0; i < 5; ++i) k.push_back(test_key(200 + i));
  auto present = [&](int i) { return fs::exists(entry_file(d, k[std::size_t(i)])); };

  cache.store(k[0], make_blob(1000, 0));
  cache.store(k[1], make_blob(1000, 1));
  cache.store(k[2], make_blob(1000, 2));
  CHECK(cache.lookup(k[0]));  // 0 is now more recent than 1 and 2
  cache.store(k[3], make_blob(1000, 3));
  CHECK(present(0));
  CHECK_FALSE(present(1));
  CHECK(present(2));
  CHECK(present(3));
  CHECK(cache.lookup(k[2]));  // order of use: 0, 3, 2
  cache.store(k[4], make_blob(1000, 4));
  CHECK_FALSE(present(0));
  CHECK(present(2));
  CHECK(present(3));
  CHECK(present(4));
  CHECK(cache.stats().disk_evictions == 2);
  auto entries = cache.list();
  REQUIRE(entries.size() == 3);  // least recently used first
  CHECK(entries[0].key == k[3]);
  CHECK(entries[1].key == k[2]);
  CHECK(entries[2].key == k[4]);
  CHECK(*cache.lookup(k[3]) == make_blob(1000, 3));
}

TEST_CASE("memory level is LRU and bounded by count and bytes; off mode never touches disk") {
  TempDir d;
  CacheOptions o = options_in((d.path / "never").string());
  o.mode = CacheMode::off;
  o.max_memory_entries = 2;
  o.max_memory_bytes = 250;
  CompileCache cache(o);
  cache.store("a", make_blob(100, 1));
  cache.store("b", make_blob(100, 2));
  CHECK(cache.lookup("a"));  // b is now the least recently used
  cache.store("c", make_blob(100, 3));
  CHECK(cache.lookup("a"));
  CHECK_FALSE(cache.lookup("b"));
  CHECK(cache.lookup("c"));
  cache.store("d", make_blob(200, 4));  // 300 bytes with c or a: both older ones go
  CHECK(cache.stats().memory_entries == 1);
  CHECK(cache.stats().memory_bytes == 200);
  cache.store("e", make_blob(300, 5));  // larger than the whole level: not kept
  CHECK_FALSE(cache.lookup("e"));
  CHECK(cache.lookup("d"));
  CHECK(cache.list().empty());
  CHECK_FALSE(fs::exists(d.path / "never"));
}
