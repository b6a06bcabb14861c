// Profiler outputs: trace JSON (parsed by Python's json module), summary and verdicts on the
// naive and blocked matmuls of examples/profile_matmul.hpp, the HTML report in headless
// Chromium, and the NEURON_PROFILE hook.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "profile_matmul.hpp"
#include "neuron/base/target.hpp"
#include "neuron/runtime/profile.hpp"
#include "neuron/runtime/run.hpp"

using namespace neuron;
namespace fs = std::filesystem;

namespace {

Profile profile_of(const char* name, nl::tensor (*fn)(nl::tensor, nl::tensor), int64_t M,
                   int64_t K, int64_t N, const std::string& target = "trn2") {
  auto kernel = trace(name, fn, {{{K, M}, DType::bfloat16}, {{K, N}, DType::bfloat16}});
  CompileOptions o = default_compile_options();
  o.target = target;
  SimOptions so;
  so.execute = false;
  return simulate_profiled(compile(kernel, o), {}, {1}, so).profile;
}

std::string temp_dir(const char* what) {
  auto d = fs::temp_directory_path() / fmt::format("neuron-test-{}-{}", what, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool have(const char* tool) {
  return std::system(fmt::format("command -v {} >/dev/null 2>&1", tool).c_str()) == 0;
}

// The line of examples/profile_matmul.hpp holding `text` (first match), read from the source.
int source_line(const std::string& text) {
  std::ifstream f(std::string(NEURON_SOURCE_DIR) + "/examples/profile_matmul.hpp");
  std::string line;
  for (int n = 1; std::getline(f, line); ++n)
    if (line.find(text) != std::string::npos) return n;
  return -1;
}

}  // namespace

TEST_CASE("naive matmul: DMA-bound, top wait on the rhs load line") {
  Profile p = profile_of("matmul_naive", examples::matmul_naive, 512, 1024, 1024);
  ProfileStats st = analyze(p);
  CHECK(st.verdict.rfind("DMA-bound", 0) == 0);
  REQUIRE(!st.top_waits.empty());
  const auto& w = st.top_waits[0];
  CHECK(p.units[static_cast<size_t>(w.waiter_unit)] == "TensorE");
  const ProfileInstr& prod = p.instrs[static_cast<size_t>(w.producer_instr)];
  CHECK(prod.opcode == "dma_copy");
  CHECK(prod.span.file.find("profile_matmul.hpp") != std::string::npos);
  int load_line = source_line("auto b = nl::load(rhs");
  REQUIRE(load_line > 0);
  CHECK(prod.span.line == load_line);
  CHECK(w.kind == DepKind::raw);
  std::string text = summary_text(p);
  CHECK(text.find("verdict           DMA-bound") != std::string::npos);
  // Live data never exceeds what the allocator gave out.
  CHECK(st.sbuf_live_peak <= static_cast<double>(p.sbuf_alloc_bytes) + 1e-6);
  CHECK(st.psum_live_peak <= static_cast<double>(p.psum_alloc_bytes) + 1e-6);
  CHECK(text.find(fmt::format("profile_matmul.hpp:{}", load_line)) != std::string::npos);
}

TEST_CASE("blocked bf16 matmul 4096^3 on trn2: compute-bound, TensorE >= 85% of peak") {
  Profile p = profile_of("matmul_blocked", examples::matmul_blocked, 4096, 4096, 4096);
  ProfileStats st = analyze(p);
  // 2 * 4096^3 FLOPs, all on TensorE.
  CHECK(st.tensor_flops == 2.0 * 4096 * 4096 * 4096);
  // Peak time: 4096^3 / (128 * 128) columns streamed at one per cycle, 2.4 GHz.
  const double ideal_ns = 4096.0 * 4096 * 4096 / (128 * 128) / 2.4;
  CHECK(st.tensor_hfu == doctest::Approx(ideal_ns / p.total_ns));
  CHECK(st.tensor_hfu >= 0.85);
  CHECK(st.verdict == "compute-bound on TensorE");
  MESSAGE(fmt::format("blocked 4096^3 bf16 on trn2: TensorE HFU {:.1f}%, {:.1f} us",
                      100 * st.tensor_hfu, p.total_ns / 1000));
  // HBM traffic: lhsT once (32 MiB), rhs once per 512-row block (8 x 32 MiB), out (32 MiB).
  CHECK(st.hbm_bytes == (1 + 8 + 1) * 4096LL * 4096 * 2);
}

TEST_CASE("trace JSON parses and has a track per engine and DMA queue, slices and flows") {
  Profile p = profile_of("matmul_naive", examples::matmul_naive, 256, 256, 512);
  std::string dir = temp_dir("trace");
  auto paths = write_profile(p, dir, "naive");
  REQUIRE(paths.size() == 3);
  for (auto& path : paths) CHECK(fs::file_size(path) > 0);
  if (!have("python3")) {
    MESSAGE("python3 not installed: skipping the JSON parse check");
    return;
  }
  std::string script = dir + "/check.py";
  std::ofstream(script) << R"(import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
names = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
want = {"TensorE", "VectorE", "ScalarE", "GpSimdE"} | {"DMA q%d" % q for q in range(16)}
assert want <= names, names
slices = [e for e in ev if e["ph"] == "X"]
assert len(slices) == int(sys.argv[2]), len(slices)
mm = [e for e in slices if e["name"] == "nc_matmul"]
assert mm and all(e["args"]["flops"] == 2 * 128 * 128 * 512 for e in mm)
assert all("profile_matmul.hpp:" in e["args"]["source"] for e in slices)
assert any("waited_for" in e["args"] for e in mm)
starts = {e["id"] for e in ev if e["ph"] == "s"}
ends = {e["id"] for e in ev if e["ph"] == "f"}
assert starts and starts == ends
print("ok")
)";
  std::string cmd = fmt::format("python3 {} {} {} > {}/py.out 2>&1", script, paths[0],
                                p.events.size(), dir);
  int rc = std::system(cmd.c_str());
  INFO(read(dir + "/py.out"));
  CHECK(rc == 0);
  fs::remove_all(dir);
}

TEST_CASE("HTML report loads in headless Chromium without console errors") {
  const char* browser = have("chromium") ? "chromium" : have("chromium-browser") ? "chromium-browser"
                                                                                : nullptr;
  if (!browser) {
    MESSAGE("chromium not installed (scripts/setup.sh installs it): skipping the HTML check");
    return;
  }
  Profile p = profile_of("matmul_naive", examples::matmul_naive, 256, 256, 512);
  std::string dir = temp_dir("html");
  auto paths = write_profile(p, dir, "naive");
  std::string html = read(paths[2]);
  // An inline script, nothing fetched from the network.
  CHECK(html.find("<script src") == std::string::npos);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  std::string flags = "--headless --disable-gpu --no-sandbox --enable-logging=stderr --v=0";
  std::string png = dir + "/shot.png";
  int rc = std::system(fmt::format("timeout 60 {} {} --screenshot={} --window-size=1400,900 "
                                   "file://{} > {}/shot.log 2>&1",
                                   browser, flags, png, paths[2], dir)
                           .c_str());
  CHECK(rc == 0);
  REQUIRE(fs::exists(png));
  CHECK(fs::file_size(png) > 10000);
  rc = std::system(fmt::format("timeout 60 {} {} --dump-dom file://{} > {}/dom.html 2> {}/dom.log",
                               browser, flags, paths[2], dir, dir)
                       .c_str());
  CHECK(rc == 0);
  std::string dom = read(dir + "/dom.html"), log = read(dir + "/shot.log") + read(dir + "/dom.log");
  CHECK(dom.find("<svg") != std::string::npos);
  CHECK(dom.find("TensorE") != std::string::npos);
  CHECK(dom.find("verdict: " + analyze(p).verdict) != std::string::npos);
  // The script ran: the details panel and the view range are filled in.
  CHECK(dom.find("Click an instruction on the timeline.") != std::string::npos);
  CHECK(dom.find(" us</span>") != std::string::npos);
  INFO(log);
  CHECK(log.find(":CONSOLE") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("NEURON_PROFILE=dir writes trace, summary and report for every simulated kernel") {
  std::string dir = temp_dir("env");
  ::setenv("NEURON_PROFILE", dir.c_str(), 1);
  const int64_t K = 128, M = 128, N = 512;
  auto kernel = trace("matmul_naive", examples::matmul_naive,
                      {{{K, M}, DType::bfloat16}, {{K, N}, DType::bfloat16}});
  auto compiled = compile(kernel, default_compile_options());
  Tensor a = Tensor::empty({K, M}, DType::bfloat16), b = Tensor::empty({K, N}, DType::bfloat16);
  for (int64_t i = 0; i < K * M; ++i) a.set(i, (i % 7) / 8.0f);
  for (int64_t i = 0; i < K * N; ++i) b.set(i, (i % 5) / 4.0f);
  std::vector<Tensor> outs;
  try {
    outs = simulate(compiled, {a, b});
  } catch (...) {
    ::unsetenv("NEURON_PROFILE");
    throw;
  }
  ::unsetenv("NEURON_PROFILE");
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    CHECK(name.rfind("matmul_naive-", 0) == 0);
    ++files;
  }
  CHECK(files == 3);
  // The outputs are still computed: spot-check one element against a double loop.
  REQUIRE(outs.size() == 1);
  double ref = 0;
  for (int64_t k = 0; k < K; ++k) ref += double(a.get(k * M + 3)) * b.get(k * N + 7);
  CHECK(outs[0].get(3 * N + 7) == doctest::Approx(ref).epsilon(1e-2));
  fs::remove_all(dir);
}

TEST_CASE("C++ profile(): timing only on a chosen target, and a comparison of two versions") {
  auto naive = trace("matmul_naive", examples::matmul_naive,
                     {{{512, 512}, DType::bfloat16}, {{512, 1024}, DType::bfloat16}});
  auto blocked = trace("matmul_blocked", examples::matmul_blocked,
                       {{{512, 512}, DType::bfloat16}, {{512, 1024}, DType::bfloat16}});
  SimResult a = profile(naive, {}, {.target = "trn1"});
  SimResult b = profile(blocked, {}, {.target = "trn1"});
  CHECK(a.outputs.empty());
  CHECK(a.profile.target == "trn1");
  CHECK_FALSE(a.profile.executed);
  CHECK(a.profile.launch_ns == target_by_name("trn1").launch_ns);
  ProfileDiff d = compare_profiles(a.profile, b.profile, "naive", "blocked");
  CHECK(d.before_ns == a.profile.total_ns);
  CHECK(d.after_ns == b.profile.total_ns);
  CHECK(d.after_ns < d.before_ns);
  REQUIRE(!d.units.empty());
  CHECK(d.units[0].what == "TensorE");
  // TensorE does the same work in both: the same FLOPs, so similar engine time per line.
  CHECK(analyze(a.profile).tensor_flops == analyze(b.profile).tensor_flops);
  std::string text = compare_text(d);
  CHECK(text.find("naive") != std::string::npos);
  CHECK(text.find("faster") != std::string::npos);
  CHECK(html_report(b.profile, &d).find("Comparison: naive &rarr; blocked") != std::string::npos);
}
