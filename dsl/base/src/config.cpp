// Reading NEURON_* environment variables into Config.
#include "neuron/base/config.hpp"

#include <pwd.h>
#include <unistd.h>

#include <charconv>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "neuron/base/error.hpp"
#include "neuron/base/matmul_kernel.hpp"

namespace neuron {

static bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string_view s(v);
  return !(s.empty() || s == "0" || s == "false" || s == "off" || s == "no");
}

static std::string default_cache_dir() {
  // XDG: a relative $XDG_CACHE_HOME is invalid and must be ignored.
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && x[0] == '/')
    return std::string(x) + "/neuron";
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) home = pw->pw_dir;
  }
  if (home && *home) return std::string(home) + "/.cache/neuron";
  return "/tmp/neuron-cache-" + std::to_string(getuid());
}

static std::uint64_t parse_bytes(const char* name, std::string_view s) {
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  std::string_view unit(end, s.data() + s.size() - end);
  int shift = -1;
  if (unit.empty() || unit == "B")
    shift = 0;
  else if (unit == "K" || unit == "KiB")
    shift = 10;
  else if (unit == "M" || unit == "MiB")
    shift = 20;
  else if (unit == "G" || unit == "GiB")
    shift = 30;
  if (ec != std::errc() || shift < 0 || value > (UINT64_MAX >> shift))
    user_error(Span{}, "config",
               "{}='{}' is not a byte count (digits with an optional K, M or G suffix)", name, s);
  return value << shift;
}

static CacheMode parse_cache_mode(std::string_view s) {
  if (s == "on" || s == "1") return CacheMode::on;
  if (s == "off" || s == "0") return CacheMode::off;
  if (s == "must-hit") return CacheMode::must_hit;
  user_error(Span{}, "config", "NEURON_CACHE='{}' is not one of off, on, must-hit", s);
}

bool config_openmp_team() {
  const char* t = std::getenv("NEURON_OPENMP_TEAM");
  if (!t || !*t) return true;
  const std::string_view s(t);
  if (s != "0" && s != "1")
    user_error(Span{}, "config",
               "NEURON_OPENMP_TEAM='{}' is not 0 or 1: set it to 1 (the default: grids run on "
               "the loaded OpenMP runtime's threads) or 0 (the toolkit's own worker threads)",
               s);
  return s == "1";
}

int config_threads() {
  const char* t = std::getenv("NEURON_THREADS");
  if (!t || !*t) return 0;
  std::string_view s(t);
  int n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < 0)
    user_error(Span{}, "config", "NEURON_THREADS='{}' is not a thread count (0 = all cores)", s);
  return n;
}

std::string config_matmul_isa() {
  const char* m = std::getenv("NEURON_MATMUL_ISA");
  return m ? std::string(m) : std::string();
}

Config config() {
  Config c;
  c.dump_ir = env_flag("NEURON_DUMP_IR");
  if (const char* t = std::getenv("NEURON_TARGET"); t && *t) c.target = t;
  const char* dir = std::getenv("NEURON_CACHE_DIR");
  c.cache_dir = dir && *dir ? std::string(dir) : default_cache_dir();
  if (const char* m = std::getenv("NEURON_CACHE_MAX_BYTES"); m && *m)
    c.cache_max_bytes = parse_bytes("NEURON_CACHE_MAX_BYTES", m);
  if (const char* m = std::getenv("NEURON_CACHE"); m && *m) c.cache_mode = parse_cache_mode(m);
  if (const char* m = std::getenv("NEURON_CACHE_MEMORY_ENTRIES"); m && *m) {
    std::string_view s(m);
    std::size_t n = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size())
      user_error(Span{}, "config",
                 "NEURON_CACHE_MEMORY_ENTRIES='{}' is not an entry count (digits; 0 keeps none)", s);
    c.cache_memory_entries = n;
  }
  // Native backend knobs.
  c.threads = config_threads();
  c.openmp_team = config_openmp_team();
  if (const char* l = std::getenv("NEURON_LOG"); l && *l) {
    std::string_view s(l);
    for (size_t pos = 0; pos <= s.size();) {
      size_t comma = s.find(',', pos);
      if (comma == std::string_view::npos) comma = s.size();
      if (s.substr(pos, comma - pos) == "compile") c.log_compile = true;
      pos = comma + 1;
    }
  }
  if (const char* k = std::getenv("NEURON_NATIVE_KERNELS"); k && *k) {
    std::string_view s(k);
    if (s != "bitcode" && s != "host")
      user_error(Span{}, "config", "NEURON_NATIVE_KERNELS='{}' is not one of bitcode, host", s);
    c.native_kernels = std::string(s);
  }
  if (const char* h = std::getenv("NEURON_HOST_KERNELS_ABOVE"); h && *h) {
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(h, &end, 10);
    if (*end || errno || n < 0)
      user_error(Span{}, "config",
                 "NEURON_HOST_KERNELS_ABOVE='{}' is not a count of instructions (digits)", h);
    c.host_kernels_above = n;
  }
  if (const char* b = std::getenv("NEURON_PARTITION_BLOCKS"); b && *b) {
    std::string_view s(b);
    if (s != "0" && s != "1")
      user_error(Span{}, "config", "NEURON_PARTITION_BLOCKS='{}' is not 0 or 1", s);
    c.partition_blocks = s == "1";
  }
  if (const char* b = std::getenv("NEURON_SBUF_FOLDING"); b && *b) {
    std::string_view s(b);
    if (s != "0" && s != "1")
      user_error(Span{}, "config", "NEURON_SBUF_FOLDING='{}' is not 0 or 1", s);
    c.sbuf_folding = s == "1";
  }
  if (const char* b = std::getenv("NEURON_FUSED_CHAINS"); b && *b) {
    std::string_view s(b);
    if (s != "0" && s != "1")
      user_error(Span{}, "config", "NEURON_FUSED_CHAINS='{}' is not 0 or 1", s);
    c.fused_chains = s == "1";
  }
  if (const char* b = std::getenv("NEURON_TRANSPOSED_MATMUL"); b && *b) {
    std::string_view s(b);
    if (s != "0" && s != "1")
      user_error(Span{}, "config", "NEURON_TRANSPOSED_MATMUL='{}' is not 0 or 1", s);
    c.transposed_matmul = s == "1";
  }
  if (const char* b = std::getenv("NEURON_STREAM_STORES_MIN_BYTES"); b && *b)
    c.stream_store_bytes = parse_bytes("NEURON_STREAM_STORES_MIN_BYTES", b);
  c.matmul_isa = config_matmul_isa();
  if (!c.matmul_isa.empty() && !neuron_matmul_variant_supported(c.matmul_isa.c_str())) {
    user_error(Span{}, "config",
               "NEURON_MATMUL_ISA='{}' is not a matmul variant this CPU runs; it runs: {} "
               "(unset it to use the fastest)",
               c.matmul_isa, neuron_matmul_supported_variants());
  }
  if (const char* d = std::getenv("NEURON_PROFILE"); d && *d) c.profile_dir = d;
  c.eager = env_flag("NEURON_EAGER");
  c.strict = env_flag("NEURON_STRICT");
  return c;
}

}  // namespace neuron
