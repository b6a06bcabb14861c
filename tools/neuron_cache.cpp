// neuron-cache: inspect and clear the compile cache (the directory NEURON_CACHE_DIR names).
#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <string_view>

#include "neuron/runtime/cache.hpp"

using namespace neuron;

namespace {

int usage(std::FILE* out) {
  fmt::print(out,
             "usage: neuron-cache [--dir DIR] <command>\n"
             "  info          directory, mode, size bound, entry count and bytes, build id\n"
             "  list          entries, least recently used first\n"
             "  clear         remove every entry\n"
             "  clear --stale remove entries written by other toolkit builds, or unreadable\n"
             "The directory is NEURON_CACHE_DIR, else $XDG_CACHE_HOME/neuron, else "
             "~/.cache/neuron.\n");
  return out == stdout ? 0 : 2;
}

std::string human_bytes(std::uint64_t n) {
  if (n >= (std::uint64_t(1) << 30)) return fmt::format("{:.1f} GiB", double(n) / (1 << 30));
  if (n >= (std::uint64_t(1) << 20)) return fmt::format("{:.1f} MiB", double(n) / (1 << 20));
  if (n >= 1024) return fmt::format("{:.1f} KiB", double(n) / 1024);
  return fmt::format("{} B", n);
}

std::string_view mode_name(CacheMode m) {
  switch (m) {
    case CacheMode::off:
      return "off";
    case CacheMode::on:
      return "on";
    case CacheMode::must_hit:
      return "must-hit";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CacheOptions opts = CacheOptions::from_config(config());
    int i = 1;
    if (i + 1 < argc && std::strcmp(argv[i], "--dir") == 0) {
      opts.dir = argv[i + 1];
      i += 2;
    }
    if (i >= argc) return usage(stderr);
    std::string_view cmd = argv[i];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") return usage(stdout);
    // The tool always looks at the directory, whatever NEURON_CACHE says for kernels.
    opts.mode = CacheMode::on;
    CompileCache cache(opts);

    if (cmd == "info" && i + 1 == argc) {
      auto entries = cache.list();
      std::uint64_t bytes = 0, stale = 0;
      for (auto& e : entries) {
        bytes += e.file_bytes;
        stale += !(e.header_ok && e.current_build);
      }
      fmt::print("directory:   {}\n", opts.dir);
      fmt::print("mode:        {} (NEURON_CACHE)\n", mode_name(config().cache_mode));
      fmt::print("max size:    {} (NEURON_CACHE_MAX_BYTES)\n", human_bytes(opts.max_disk_bytes));
      fmt::print("entries:     {} ({} from other builds or unreadable)\n", entries.size(), stale);
      fmt::print("size:        {}\n", human_bytes(bytes));
      fmt::print("build id:    {}\n", toolkit_build_id());
      return 0;
    }
    if (cmd == "list" && i + 1 == argc) {
      for (auto& e : cache.list()) {
        std::string_view state = !e.header_ok      ? "unreadable"
                                 : e.current_build ? "current"
                                                   : "stale";
        fmt::print("{}  {:>10}  {:%Y-%m-%d %H:%M:%S}  {}\n", e.key, human_bytes(e.file_bytes),
                   std::chrono::floor<std::chrono::seconds>(e.last_used), state);
      }
      return 0;
    }
    if (cmd == "clear" && i + 1 == argc) {
      std::size_t n = cache.list().size();
      cache.clear();
      fmt::print("removed {} entries from {}\n", n, opts.dir);
      return 0;
    }
    if (cmd == "clear" && i + 2 == argc && std::string_view(argv[i + 1]) == "--stale") {
      fmt::print("removed {} stale entries from {}\n", cache.remove_stale(), opts.dir);
      return 0;
    }
    return usage(stderr);
  } catch (const std::exception& e) {
    fmt::print(stderr, "neuron-cache: {}\n", e.what());
    return 1;
  }
}
