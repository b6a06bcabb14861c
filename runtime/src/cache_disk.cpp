// The compile cache's disk level: entry format, atomic writes, validation and LRU eviction.
// Several processes may share a directory; only rename() publishes a file, so readers see a
// complete old entry, a complete new one, or none.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "neuron/runtime/cache.hpp"
#include "neuron/runtime/sha256.hpp"

namespace neuron {

namespace fs = std::filesystem;

namespace {

// Entry layout, little-endian:
//   0  char[8]  magic "NRNCACHE"
//   8  u32      format version
//  12  u32      key length K
//  16  u32      build id length B
//  20  u32      reserved (0)
//  24  u64      payload size P
//  32  u8[32]   SHA-256 of the payload
//  64  K bytes key, B bytes build id, P bytes payload
constexpr char kMagic[8] = {'N', 'R', 'N', 'C', 'A', 'C', 'H', 'E'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kFixedHeader = 64;
constexpr std::uint32_t kMaxIdLength = 256;
constexpr std::string_view kSuffix = ".neuronc";
constexpr std::string_view kTempPrefix = ".tmp.";
// A temp file this old belongs to a writer that died; eviction removes it.
constexpr auto kAbandonedTemp = std::chrono::hours(1);

void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::uint8_t(v >> (8 * i));
}
void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = std::uint8_t(v >> (8 * i));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t(p[i]) << (8 * i);
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t(p[i]) << (8 * i);
  return v;
}

// Keys become file names, so they must be plain (cache_key() gives 64 hex digits).
void check_key(const std::string& key) {
  bool ok = !key.empty() && key.size() <= kMaxIdLength;
  for (char c : key)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  NEURON_ASSERT(ok, "compile cache key '{}' is not 1-{} characters of [A-Za-z0-9_-]", key,
                kMaxIdLength);
}

std::string entry_path(const std::string& dir, const std::string& key) {
  return fmt::format("{}/{}{}", dir, key, kSuffix);
}

struct Header {
  std::uint32_t version = 0;
  std::string key, build_id;
  std::uint64_t payload_size = 0;
  std::array<std::uint8_t, 32> checksum{};
  std::size_t size = 0;  // bytes before the payload
};

// Parses the header from the first bytes of a file; returns the reason it is unusable.
std::optional<std::string> parse_header(const std::uint8_t* data, std::size_t n, Header& h) {
  if (n < kFixedHeader)
    return fmt::format("truncated: {} bytes, shorter than the {}-byte header", n, kFixedHeader);
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0) return std::string("bad magic");
  h.version = get_u32(data + 8);
  if (h.version != kFormatVersion)
    return fmt::format("format version {} (this build reads {})", h.version, kFormatVersion);
  std::uint32_t key_len = get_u32(data + 12), id_len = get_u32(data + 16);
  if (key_len > kMaxIdLength || id_len > kMaxIdLength)
    return fmt::format("header lengths out of range (key {}, build id {})", key_len, id_len);
  h.size = kFixedHeader + key_len + id_len;
  if (n < h.size) return fmt::format("truncated: {} bytes, inside the header", n);
  h.payload_size = get_u64(data + 24);
  std::memcpy(h.checksum.data(), data + 32, 32);
  h.key.assign(reinterpret_cast<const char*>(data + kFixedHeader), key_len);
  h.build_id.assign(reinterpret_cast<const char*>(data + kFixedHeader + key_len), id_len);
  return std::nullopt;
}

std::chrono::system_clock::time_point to_system(const struct stat& st) {
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

// Sets mtime from the fine-grained clock: the kernel's own "now" for file times is coarse
// (a few ms), which would make recently used entries tie.
void set_mtime_now(int fd) {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  timespec times[2] = {now, now};
  (void)futimens(fd, times);
}

bool read_all(int fd, std::uint8_t* out, std::size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, out, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    out += r;
    n -= std::size_t(r);
  }
  return true;
}

bool write_all(int fd, const std::uint8_t* data, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= std::size_t(w);
  }
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool is_entry_name(const std::string& name) {
  return name.size() > kSuffix.size() && name.ends_with(kSuffix) && name[0] != '.';
}

}  // namespace

std::optional<Blob> CompileCache::lookup_disk(const std::string& key, const CacheOptions& opts) {
  check_key(key);
  std::string path = entry_path(opts.dir, key);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return std::nullopt;  // absent or unreadable: a plain miss
  struct stat st;
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;

  std::vector<std::uint8_t> data(std::size_t(st.st_size));
  std::optional<std::string> bad;
  Header h;
  if (!read_all(f.fd, data.data(), data.size())) bad = "read failed";
  if (!bad) bad = parse_header(data.data(), data.size(), h);
  if (!bad && h.key != key) bad = fmt::format("holds key {} instead", h.key);
  if (!bad && h.build_id != toolkit_build_id())
    bad = fmt::format("written by another toolkit build ({})", h.build_id);
  if (!bad && data.size() - h.size != h.payload_size)
    bad = fmt::format("truncated or padded: payload is {} bytes, header says {}",
                      data.size() - h.size, h.payload_size);
  if (!bad && sha256({data.data() + h.size, data.size() - h.size}) != h.checksum)
    bad = std::string("payload checksum mismatch (corrupt)");

  if (!bad) {
    set_mtime_now(f.fd);
    return Blob(data.begin() + std::ptrdiff_t(h.size), data.end());
  }
  std::string id = "corrupt:" + path;
  warn_once(opts, id, fmt::format("ignoring {}: {}; removing it and compiling again", path, *bad));
  {
    std::lock_guard lock(mutex_);
    ++stats_.corrupt_entries;
  }
  // Remove only the file we judged: another process may have renamed a good one over it.
  struct stat now;
  if (::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev &&
      ::unlink(path.c_str()) == 0)
    forget_warning(id);  // a later bad file at this path is a new entry: report it too
  return std::nullopt;
}

bool CompileCache::store_disk(const std::string& key, const Blob& blob, const CacheOptions& opts) {
  check_key(key);
  static std::atomic<std::uint64_t> counter{0};
  auto fail = [&](const std::string& what, int err) {
    warn_once(opts, "store:" + opts.dir,
              fmt::format("cannot write to {} ({}: {}); compiled kernels will not be saved "
                          "there by this process",
                          opts.dir, what, std::strerror(err)));
    return false;
  };

  std::error_code ec;
  fs::create_directories(opts.dir, ec);
  if (ec) return fail("creating the directory", ec.value());

  std::string_view id = toolkit_build_id();
  std::vector<std::uint8_t> header(kFixedHeader + key.size() + id.size());
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put_u32(header.data() + 8, kFormatVersion);
  put_u32(header.data() + 12, std::uint32_t(key.size()));
  put_u32(header.data() + 16, std::uint32_t(id.size()));
  put_u64(header.data() + 24, blob.size());
  auto sum = sha256(blob);
  std::memcpy(header.data() + 32, sum.data(), sum.size());
  std::memcpy(header.data() + kFixedHeader, key.data(), key.size());
  std::memcpy(header.data() + kFixedHeader + key.size(), id.data(), id.size());

  // Unique per process and call, in the same directory so rename() is atomic.
  std::string temp =
      fmt::format("{}/{}{}.{}.{}", opts.dir, kTempPrefix, key, ::getpid(), counter.fetch_add(1));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fail("creating a temporary file", errno);
  bool ok = write_all(fd, header.data(), header.size()) && write_all(fd, blob.data(), blob.size());
  int err = errno;
  if (ok) set_mtime_now(fd);
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    return fail("writing " + temp, err);
  }
  if (::rename(temp.c_str(), entry_path(opts.dir, key).c_str()) != 0) {
    err = errno;
    ::unlink(temp.c_str());
    if (err == ENOENT) return false;  // a concurrent clear() removed our temp file
    return fail("renaming " + temp, err);
  }
  return true;
}

void CompileCache::touch_disk_entry(const std::string& key, const CacheOptions& opts) {
  Fd f;
  f.fd = ::open(entry_path(opts.dir, key).c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd >= 0) set_mtime_now(f.fd);
}

void CompileCache::evict_disk(const std::string& keep_key, const CacheOptions& opts) {
  struct File {
    std::string path;
    std::uint64_t bytes;
    std::chrono::system_clock::time_point mtime;
    bool keep;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  auto now = std::chrono::system_clock::now();
  std::string keep_name = keep_key + std::string(kSuffix);
  std::error_code ec;
  for (fs::directory_iterator it(opts.dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    bool temp = name.starts_with(kTempPrefix);
    if (!temp && !is_entry_name(name)) continue;
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (temp) {
      // In-flight writes count toward the size but are never evicted, unless abandoned.
      if (now - to_system(st) > kAbandonedTemp && ::unlink(it->path().c_str()) == 0) continue;
      total += std::uint64_t(st.st_size);
      continue;
    }
    total += std::uint64_t(st.st_size);
    files.push_back(
        {it->path().string(), std::uint64_t(st.st_size), to_system(st), name == keep_name});
  }
  if (total <= opts.max_disk_bytes) return;
  // Oldest first; the entry just stored goes last (it is only dropped if it alone is too big).
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) {
    if (a.keep != b.keep) return b.keep;
    if (a.mtime != b.mtime) return a.mtime < b.mtime;
    return a.path < b.path;
  });
  std::uint64_t evicted = 0;
  for (const File& f : files) {
    if (total <= opts.max_disk_bytes) break;
    if (f.keep)  // it alone is over the bound: say so once, or nothing would ever be cached
      warn_once(opts, "bound:" + opts.dir,
                fmt::format("a compiled kernel of {} bytes is larger than the disk cache bound "
                            "(NEURON_CACHE_MAX_BYTES={} bytes); such kernels are not kept in {}",
                            f.bytes, opts.max_disk_bytes, opts.dir));
    // Another process may have evicted it already; either way it no longer counts.
    ::unlink(f.path.c_str());
    total -= f.bytes;
    ++evicted;
  }
  std::lock_guard lock(mutex_);
  stats_.disk_evictions += evicted;
}

std::vector<CacheEntryInfo> CompileCache::list() const {
  CacheOptions opts = options();
  std::vector<CacheEntryInfo> out;
  if (opts.mode == CacheMode::off || opts.dir.empty()) return out;
  std::error_code ec;
  for (fs::directory_iterator it(opts.dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!is_entry_name(name)) continue;
    CacheEntryInfo info;
    info.path = it->path().string();
    info.key = name.substr(0, name.size() - kSuffix.size());
    Fd f;
    f.fd = ::open(info.path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f.fd < 0 || fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    info.file_bytes = std::uint64_t(st.st_size);
    info.last_used = to_system(st);
    std::uint8_t head[kFixedHeader + 2 * kMaxIdLength];
    ssize_t n = ::read(f.fd, head, sizeof head);
    Header h;
    if (n > 0 && !parse_header(head, std::size_t(n), h) && h.key == info.key) {
      info.header_ok = true;
      info.payload_bytes = h.payload_size;
      info.build_id = h.build_id;
      info.current_build = h.build_id == toolkit_build_id();
    }
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return a.last_used != b.last_used ? a.last_used < b.last_used : a.key < b.key;
  });
  return out;
}

void CompileCache::clear() {
  clear_memory();
  CacheOptions opts = options();
  if (opts.mode == CacheMode::off || opts.dir.empty()) return;
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(opts.dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    // Only our own files: the directory may be shared with something else.
    if (is_entry_name(name) || name.starts_with(kTempPrefix)) doomed.push_back(it->path());
  }
  for (const fs::path& p : doomed) ::unlink(p.c_str());
}

std::size_t CompileCache::remove_stale() {
  std::size_t removed = 0;
  for (const CacheEntryInfo& e : list())
    if ((!e.header_ok || !e.current_build) && ::unlink(e.path.c_str()) == 0) ++removed;
  return removed;
}

}  // namespace neuron
