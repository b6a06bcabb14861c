// The kernel registry: C++ kernels by name, with their tensor arguments and typed parameters
// (defaults, doc strings), so Python (neuron.registry) and tools can list and trace them.
//
// Registering is one line next to the kernel, in its header:
//
//   inline nl::tensor scale(nl::tensor x, double factor, bool relu) { ... }
//   NEURON_KERNEL(scale, scale, "out = x * factor, then relu if asked", neuron::inputs("x"),
//                 neuron::param<double>("factor", 2.0, "the multiplier"),
//                 neuron::param<bool>("relu", false, "apply relu"));
//
// The registration runs when a program that includes the header starts (an inline variable),
// so every program including it (the Python module includes the examples' and the kernel
// library's headers) sees the kernel. Two different kernels under one name are an error at
// startup (UserError "kernel-registry").
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "neuron/trace.hpp"

namespace neuron {

// A parameter value as the registry passes it around; each kernel parameter has one kind.
using ParamValue = std::variant<bool, int64_t, double, std::string, DType>;

enum class ParamKind { boolean, integer, real, string, dtype, choice };
std::string_view param_kind_name(ParamKind k);  // "bool", "int", "float", "str", "dtype", "choice"

struct ParamInfo {
  std::string name;
  ParamKind kind = ParamKind::integer;
  std::optional<ParamValue> default_value;  // none: the caller must give it
  std::string doc;
  std::vector<std::string> choices;          // kind choice: the names of the values (a string each)
  int64_t min = INT64_MIN, max = INT64_MAX;  // kind integer: the range of the C++ type
};

struct RegisteredKernel {
  std::string name, doc;
  std::vector<std::string> inputs;  // tensor arguments, in order
  std::vector<ParamInfo> params;    // then the parameters, in order
  Span span;                        // where it was registered
  // Traces with one value per parameter, already checked against `params` (trace_registered
  // checks and fills defaults; call that instead).
  std::function<Kernel(const std::vector<TensorSpec>&, const std::vector<ParamValue>&)> trace;
};

class Registry {
 public:
  static Registry& global();
  // Throws UserError "kernel-registry" when the name is taken.
  void add(RegisteredKernel k);
  const RegisteredKernel* find(std::string_view name) const;  // nullptr when unknown
  std::vector<const RegisteredKernel*> list() const;          // by name

 private:
  mutable std::mutex mutex_;
  std::map<std::string, RegisteredKernel, std::less<>> kernels_;
};

// Traces a registered kernel. `specs` give one tensor per input (an empty name takes the
// registered one); `params` by name, the others take their defaults. An unknown kernel or
// parameter, a missing required one, a value of the wrong kind or out of range, or the wrong
// number of tensors are UserErrors ("unknown-kernel", "kernel-param", "call-signature").
Kernel trace_registered(std::string_view name, std::vector<TensorSpec> specs,
                        const std::map<std::string, ParamValue, std::less<>>& params = {},
                        Span span = Span::current());

// A value with a parameter's kind checked (and an int put in range / converted to a float
// for a float parameter); the value `params` holds after defaults. Throws "kernel-param".
ParamValue check_param(const RegisteredKernel& k, const ParamInfo& p, const ParamValue& v,
                       const Span& span);

// ---- declaring a registration ----------------------------------------------------------------

struct Inputs {
  std::vector<std::string> names;
};
template <typename... S>
Inputs inputs(S&&... names) {
  return Inputs{{std::string(std::forward<S>(names))...}};
}

// One typed parameter: T is the type the kernel function takes (bool, an integer type, a
// floating type, std::string, DType, or an enum declared with neuron::choice).
template <typename T>
struct Param {
  ParamInfo info;
  std::vector<std::pair<std::string, T>> values;  // enums: name -> value
};

namespace registry_detail {

template <typename T>
constexpr ParamKind kind_of() {
  if constexpr (std::is_same_v<T, bool>)
    return ParamKind::boolean;
  else if constexpr (std::is_integral_v<T>)
    return ParamKind::integer;
  else if constexpr (std::is_floating_point_v<T>)
    return ParamKind::real;
  else if constexpr (std::is_same_v<T, std::string>)
    return ParamKind::string;
  else if constexpr (std::is_same_v<T, DType>)
    return ParamKind::dtype;
  else if constexpr (std::is_enum_v<T>)
    return ParamKind::choice;
  else
    static_assert(!sizeof(T*),
                  "a kernel parameter is a bool, an integer, a floating-point "
                  "number, std::string, DType or an enum (neuron::choice)");
}

template <typename T>
ParamValue to_value(const T& v, const std::vector<std::pair<std::string, T>>& names) {
  if constexpr (std::is_same_v<T, bool>)
    return v;
  else if constexpr (std::is_integral_v<T>)
    return int64_t(v);
  else if constexpr (std::is_floating_point_v<T>)
    return double(v);
  else if constexpr (std::is_enum_v<T> && !std::is_same_v<T, DType>) {
    for (auto& [n, e] : names)
      if (e == v) return n;
    internal_error("an enum parameter default has no name in its neuron::choice list");
  } else {
    return v;
  }
}

// The C++ value of a checked ParamValue.
template <typename T>
T from_value(const Param<T>& p, const ParamValue& v) {
  if constexpr (std::is_same_v<T, bool>)
    return std::get<bool>(v);
  else if constexpr (std::is_integral_v<T>)
    return T(std::get<int64_t>(v));
  else if constexpr (std::is_floating_point_v<T>)
    return T(std::get<double>(v));
  else if constexpr (std::is_enum_v<T> && !std::is_same_v<T, DType>) {
    for (auto& [n, e] : p.values)
      if (n == std::get<std::string>(v)) return e;
    internal_error("enum parameter '{}' got an unchecked value", p.info.name);
  } else {
    return std::get<T>(v);
  }
}

template <typename T>
Param<T> make(std::string name, std::optional<T> def, std::string doc,
              std::vector<std::pair<std::string, T>> names = {}) {
  Param<T> p;
  p.info.name = std::move(name);
  p.info.kind = kind_of<T>();
  p.info.doc = std::move(doc);
  for (auto& [n, v] : names) p.info.choices.push_back(n);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    p.info.min = std::is_signed_v<T> ? int64_t(std::numeric_limits<T>::min()) : 0;
    p.info.max = uint64_t(std::numeric_limits<T>::max()) > uint64_t(INT64_MAX)
                     ? INT64_MAX
                     : int64_t(std::numeric_limits<T>::max());
  }
  p.values = std::move(names);
  if (def) p.info.default_value = to_value(*def, p.values);
  return p;
}

}  // namespace registry_detail

// A parameter with a default, and a required one.
template <typename T>
Param<T> param(std::string name, T default_value, std::string doc) {
  return registry_detail::make<T>(std::move(name), std::move(default_value), std::move(doc));
}
template <typename T>
Param<T> param(std::string name, std::string doc) {
  return registry_detail::make<T>(std::move(name), std::nullopt, std::move(doc));
}

// An enum parameter: Python passes one of the names (a string).
template <typename E>
Param<E> choice(std::string name, E default_value, std::vector<std::pair<std::string, E>> names,
                std::string doc) {
  static_assert(std::is_enum_v<E>, "neuron::choice takes an enum type");
  return registry_detail::make<E>(std::move(name), default_value, std::move(doc), std::move(names));
}

// Registers fn (taking the inputs' tensors, then the parameters) under `name`. Returns true,
// so that NEURON_KERNEL can keep the result in a variable.
template <typename Fn, typename... P>
bool register_kernel(Span span, std::string name, Fn fn, std::string doc, Inputs in,
                     Param<P>... params) {
  RegisteredKernel k;
  k.name = name;
  k.doc = std::move(doc);
  k.inputs = std::move(in.names);
  (k.params.push_back(params.info), ...);
  k.span = span;
  k.trace = [name, fn, span, params...](const std::vector<TensorSpec>& specs,
                                        const std::vector<ParamValue>& values) -> Kernel {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return trace(
          name, fn, specs,
          Params<P...>{std::tuple<P...>(registry_detail::from_value(params, values[I])...)}, span);
    }
    (std::index_sequence_for<P...>{});
  };
  Registry::global().add(std::move(k));
  return true;
}

}  // namespace neuron

// Registers kernel function `fn` under the name `name` (an identifier) with a doc string, its
// tensor arguments (neuron::inputs("a", "b")) and its parameters (neuron::param<T>(...),
// neuron::choice(...)), in the order the function takes them. Use at namespace scope in a
// header.
#define NEURON_KERNEL(name, fn, doc, ...)             \
  inline const bool neuron_kernel_registered_##name = \
      ::neuron::register_kernel(::neuron::Span::current(), #name, fn, doc, __VA_ARGS__)
