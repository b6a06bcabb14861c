// The kernel registry: NEURON_KERNEL registrations, lookup and listing, and tracing by name
// with typed, defaulted, checked parameters.
#include <doctest/doctest.h>

#include "neuron/ir/printer.hpp"
#include "neuron/language.hpp"
#include "neuron/registry.hpp"

using namespace neuron;

namespace registry_test {

enum class Mode { copy, negate };

inline nl::tensor every_kind(nl::tensor x, nl::tensor y, int32_t rows, double scale, bool twice,
                             std::string name, DType dtype, Mode mode) {
  auto out = nl::ndarray(x.shape(), dtype, nl::shared_hbm, name);
  auto t = nl::load(x(nl::ds(0, rows))) * scale + nl::load(y(nl::ds(0, rows)));
  if (twice) t = t + t;
  if (mode == Mode::negate) t = nl::negative(t);
  nl::store(out(nl::ds(0, rows)), nl::copy(t, dtype));
  return out;
}

NEURON_KERNEL(registry_test_every_kind, every_kind, "one parameter of each kind",
              neuron::inputs("x", "y"), neuron::param<int32_t>("rows", 128, "rows stored"),
              neuron::param<double>("scale", "required multiplier"),
              neuron::param<bool>("twice", false, "double the result"),
              neuron::param<std::string>("name", "out", "the output's name"),
              neuron::param<DType>("dtype", DType::float32, "the output dtype"),
              neuron::choice("mode", Mode::copy, {{"copy", Mode::copy}, {"negate", Mode::negate}},
                             "what to do last"));

}  // namespace registry_test

namespace {

const std::vector<TensorSpec> two = {{{128, 16}, DType::float32}, {{128, 16}, DType::float32}};

std::string rule_of(auto fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.rule() + ": " + e.message();
  }
  return "no error";
}

}  // namespace

TEST_CASE("registry: a NEURON_KERNEL line registers name, doc, tensors and parameters") {
  const RegisteredKernel* k = Registry::global().find("registry_test_every_kind");
  REQUIRE(k != nullptr);
  CHECK(k->doc == "one parameter of each kind");
  CHECK(k->inputs == std::vector<std::string>{"x", "y"});
  REQUIRE(k->params.size() == 6);
  CHECK(k->params[0].kind == ParamKind::integer);
  CHECK(k->params[0].min == INT32_MIN);
  CHECK(k->params[0].max == INT32_MAX);
  CHECK(std::get<int64_t>(*k->params[0].default_value) == 128);
  CHECK(!k->params[1].default_value);  // required
  CHECK(k->params[2].kind == ParamKind::boolean);
  CHECK(k->params[3].kind == ParamKind::string);
  CHECK(k->params[4].kind == ParamKind::dtype);
  CHECK(k->params[5].kind == ParamKind::choice);
  CHECK(k->params[5].choices == std::vector<std::string>{"copy", "negate"});
  CHECK(std::get<std::string>(*k->params[5].default_value) == "copy");
  CHECK(k->span.file.find("test_registry.cpp") != std::string::npos);
  bool listed = false;
  for (auto* r : Registry::global().list()) listed |= r->name == "registry_test_every_kind";
  CHECK(listed);
}

TEST_CASE("registry: tracing by name equals tracing the function with the same values") {
  Kernel by_name = trace_registered("registry_test_every_kind", two,
                                    {{"scale", int64_t{2}},
                                     {"twice", true},
                                     {"name", std::string("result")},
                                     {"dtype", DType::bfloat16},
                                     {"mode", std::string("negate")},
                                     {"rows", int64_t{64}}});
  std::vector<TensorSpec> named = two;
  named[0].name = "x";
  named[1].name = "y";
  Kernel direct = trace("registry_test_every_kind", registry_test::every_kind, named,
                        params(int32_t{64}, 2.0, true, std::string("result"), DType::bfloat16,
                               registry_test::Mode::negate),
                        Registry::global().find("registry_test_every_kind")->span);
  CHECK(print(by_name) == print(direct));
  // Defaults fill what is not given; the tensors are named by the registration.
  std::string text = print(trace_registered("registry_test_every_kind", two, {{"scale", 1.5}}));
  CHECK(text.find("x: float32[128, 16]") != std::string::npos);
  CHECK(text.find("negative") == std::string::npos);
  CHECK(text.find("1.5") != std::string::npos);
}

TEST_CASE("registry: unknown kernels and parameters, wrong kinds and counts are user errors") {
  auto traced = [](std::map<std::string, ParamValue, std::less<>> p,
                   std::vector<TensorSpec> s = two) {
    return [=] { trace_registered("registry_test_every_kind", s, p); };
  };
  CHECK(rule_of([] {
          trace_registered("no_such_kernel", two);
        }).starts_with("unknown-kernel: no kernel named 'no_such_kernel' is registered"));
  CHECK(rule_of(traced({})) ==
        "kernel-param: kernel 'registry_test_every_kind' needs parameter 'scale' (float: "
        "required multiplier)");
  CHECK(rule_of(traced({{"scale", 1.0}, {"sclae", 1.0}}))
            .starts_with(
                "kernel-param: kernel 'registry_test_every_kind' has no parameter 'sclae' (its "
                "parameters: rows, scale, twice, name, dtype, mode)"));
  CHECK(rule_of(traced({{"scale", std::string("big")}})) ==
        "kernel-param: parameter 'scale' of kernel 'registry_test_every_kind' is a float; got "
        "str 'big'");
  CHECK(rule_of(traced({{"scale", 1.0}, {"twice", int64_t{1}}})) ==
        "kernel-param: parameter 'twice' of kernel 'registry_test_every_kind' is a bool; got "
        "int 1");
  CHECK(rule_of(traced({{"scale", 1.0}, {"rows", int64_t{1} << 40}}))
            .starts_with("kernel-param: parameter 'rows' of kernel 'registry_test_every_kind' is "
                         "1099511627776; "
                         "outside the range [-2147483648, 2147483647]"));
  CHECK(rule_of(traced({{"scale", 1.0}, {"mode", std::string("twist")}})) ==
        "kernel-param: parameter 'mode' of kernel 'registry_test_every_kind' is one of 'copy', "
        "'negate'; got 'twist'");
  CHECK(rule_of(traced({{"scale", 1.0}}, {two[0]})) ==
        "call-signature: kernel 'registry_test_every_kind' takes 2 tensor(s) (x, y), got 1");
}

TEST_CASE("registry: a second kernel under a registered name is refused") {
  RegisteredKernel again;
  again.name = "registry_test_every_kind";
  CHECK(rule_of([&] { Registry::global().add(again); })
            .starts_with("kernel-registry: kernel 'registry_test_every_kind' is already "
                         "registered (at "));
}
