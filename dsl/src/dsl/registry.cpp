// The kernel registry: registration, lookup, and tracing a kernel with checked parameters.
#include "neuron/registry.hpp"

#include <cmath>

namespace neuron {

std::string_view param_kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::boolean:
      return "bool";
    case ParamKind::integer:
      return "int";
    case ParamKind::real:
      return "float";
    case ParamKind::string:
      return "str";
    case ParamKind::dtype:
      return "dtype";
    case ParamKind::choice:
      return "choice";
  }
  return "?";
}

Registry& Registry::global() {
  static Registry r;
  return r;
}

void Registry::add(RegisteredKernel k) {
  std::lock_guard lock(mutex_);
  if (auto it = kernels_.find(k.name); it != kernels_.end())
    user_error(k.span, "kernel-registry", "kernel '{}' is already registered (at {})", k.name,
               it->second.span.str());
  std::string name = k.name;
  kernels_.emplace(std::move(name), std::move(k));
}

const RegisteredKernel* Registry::find(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<const RegisteredKernel*> Registry::list() const {
  std::lock_guard lock(mutex_);
  std::vector<const RegisteredKernel*> out;
  for (auto& [name, k] : kernels_) out.push_back(&k);
  return out;
}

namespace {

std::string value_text(const ParamValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return fmt::format("'{}'", x);
        else if constexpr (std::is_same_v<T, DType>)
          return std::string(dtype_name(x));
        else
          return fmt::format("{}", x);
      },
      v);
}

std::string_view kind_of_value(const ParamValue& v) {
  static constexpr std::string_view names[] = {"bool", "int", "float", "str", "dtype"};
  return names[v.index()];
}

}  // namespace

ParamValue check_param(const RegisteredKernel& k, const ParamInfo& p, const ParamValue& v,
                       const Span& span) {
  auto wrong = [&]() {
    user_error(span, "kernel-param", "parameter '{}' of kernel '{}' is {} {}; got {} {}", p.name,
               k.name, p.kind == ParamKind::integer ? "an" : "a", param_kind_name(p.kind),
               kind_of_value(v), value_text(v));
  };
  switch (p.kind) {
    case ParamKind::boolean:
      if (!std::holds_alternative<bool>(v)) wrong();
      return v;
    case ParamKind::integer: {
      if (!std::holds_alternative<int64_t>(v)) wrong();
      int64_t x = std::get<int64_t>(v);
      if (x < p.min || x > p.max)
        user_error(span, "kernel-param",
                   "parameter '{}' of kernel '{}' is {}; outside the range [{}, {}] of its C++ "
                   "type",
                   p.name, k.name, x, p.min, p.max);
      return v;
    }
    case ParamKind::real:
      if (auto* i = std::get_if<int64_t>(&v)) return double(*i);  // 2 for a float: 2.0
      if (!std::holds_alternative<double>(v)) wrong();
      return v;
    case ParamKind::string:
      if (!std::holds_alternative<std::string>(v)) wrong();
      return v;
    case ParamKind::dtype:
      if (!std::holds_alternative<DType>(v)) wrong();
      return v;
    case ParamKind::choice: {
      auto* s = std::get_if<std::string>(&v);
      if (s)
        for (auto& c : p.choices)
          if (c == *s) return v;
      user_error(span, "kernel-param", "parameter '{}' of kernel '{}' is one of '{}'; got {}",
                 p.name, k.name, fmt::join(p.choices, "', '"), value_text(v));
    }
  }
  return v;
}

Kernel trace_registered(std::string_view name, std::vector<TensorSpec> specs,
                        const std::map<std::string, ParamValue, std::less<>>& params, Span span) {
  const RegisteredKernel* k = Registry::global().find(name);
  if (!k) {
    std::vector<std::string> names;
    for (auto* r : Registry::global().list()) names.push_back(r->name);
    user_error(span, "unknown-kernel", "no kernel named '{}' is registered (registered: {})", name,
               names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
  }
  if (specs.size() != k->inputs.size())
    user_error(span, "call-signature", "kernel '{}' takes {} tensor(s) ({}), got {}", k->name,
               k->inputs.size(), fmt::join(k->inputs, ", "), specs.size());
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name.empty()) specs[i].name = k->inputs[i];
  for (auto& [n, v] : params) {
    bool known = false;
    for (auto& p : k->params) known |= p.name == n;
    if (!known) {
      std::vector<std::string> names;
      for (auto& p : k->params) names.push_back(p.name);
      user_error(span, "kernel-param", "kernel '{}' has no parameter '{}' (its parameters: {})",
                 k->name, n,
                 names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
    }
  }
  std::vector<ParamValue> values;
  for (auto& p : k->params) {
    auto it = params.find(p.name);
    if (it != params.end()) {
      values.push_back(check_param(*k, p, it->second, span));
    } else if (p.default_value) {
      values.push_back(*p.default_value);
    } else {
      user_error(span, "kernel-param", "kernel '{}' needs parameter '{}' ({}: {})", k->name, p.name,
                 param_kind_name(p.kind), p.doc);
    }
  }
  return k->trace(specs, values);
}

}  // namespace neuron
