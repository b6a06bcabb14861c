// neuron::trace: runs an ordinary C++ function once with symbolic tensors and records the
// Kernel IR it describes.
#pragma once
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "neuron/dsl/builder.hpp"
#include "neuron/dsl/tensor.hpp"
#include "neuron/ir/ir.hpp"

namespace neuron {

// One kernel argument for neuron::trace: its shape, dtype and (optionally) its name.
struct TensorSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::float32;
  std::string name = {};  // empty: "in0", "in1", ...
};

namespace dsl {

inline constexpr size_t max_kernel_args = 12;

template <typename T>
struct is_tuple : std::false_type {};
template <typename... T>
struct is_tuple<std::tuple<T...>> : std::true_type {};

// The kernel's return value as a list of outputs; nullopt for void.
template <typename R>
std::vector<nl::tensor> outputs_of(R&& r) {
  using T = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<T, nl::tensor>) {
    return {r};
  } else if constexpr (std::is_same_v<T, std::vector<nl::tensor>>) {
    return r;
  } else if constexpr (is_tuple<T>::value) {
    std::vector<nl::tensor> out;
    std::apply([&](const auto&... t) { (out.push_back(t), ...); }, r);
    return out;
  } else {
    static_assert(!sizeof(T*),
                  "a kernel returns void, nl::tensor, std::vector<nl::tensor> or "
                  "std::tuple of nl::tensor");
  }
}

// fn(in[0], ..., in[N-1], params...): the tensors first, then the parameters.
template <typename Fn, typename... P, size_t... I>
std::optional<std::vector<nl::tensor>> call_n(Fn& fn, const std::vector<nl::tensor>& in,
                                              const std::tuple<P...>& params,
                                              std::index_sequence<I...>) {
  using R = std::invoke_result_t<Fn&, decltype((void)I, std::declval<nl::tensor>())...,
                                 const P&...>;
  return std::apply(
      [&](const P&... p) -> std::optional<std::vector<nl::tensor>> {
        if constexpr (std::is_void_v<R>) {
          fn(in[I]..., p...);
          return std::nullopt;
        } else {
          return outputs_of(fn(in[I]..., p...));
        }
      },
      params);
}

template <typename Fn, typename... P, size_t... I>
constexpr bool invocable_n(std::index_sequence<I...>) {
  return std::is_invocable_v<Fn&, decltype((void)I, std::declval<nl::tensor>())..., const P&...>;
}

// Calls fn with as many tensors as it takes, then the parameters; the tensor count must match
// the specs.
template <typename Fn, size_t N, typename... P>
std::optional<std::vector<nl::tensor>> call_kernel(Fn& fn, const std::vector<nl::tensor>& in,
                                                   const std::tuple<P...>& params,
                                                   const Span& span) {
  if constexpr (N > max_kernel_args) {
    if (sizeof...(P) == 0)
      user_error(span, "call-signature",
                 "the kernel function cannot be called with {} nl::tensor arguments (one per "
                 "TensorSpec)",
                 in.size());
    user_error(span, "call-signature",
               "the kernel function cannot be called with {} nl::tensor arguments (one per "
               "TensorSpec) followed by the {} values given to neuron::params (in that order, "
               "of those types)",
               in.size(), sizeof...(P));
  } else {
    if constexpr (invocable_n<Fn, P...>(std::make_index_sequence<N>{})) {
      if (in.size() == N) return call_n(fn, in, params, std::make_index_sequence<N>{});
    }
    return call_kernel<Fn, N + 1>(fn, in, params, span);
  }
}

}  // namespace dsl

// The compile-time parameters of a kernel, passed to it after its tensors:
//   nl::tensor scale(nl::tensor x, double factor, bool relu);
//   neuron::trace("scale", scale, {{{128, 512}, nl::float32}}, neuron::params(2.0, true));
// They are ordinary C++ values used while tracing (loop bounds, tile sizes, constants,
// dtypes, which ops to record), so the IR they produce is all that the compiler, the cache key
// and the executors see: values that change nothing in the IR share one compile, and values
// that change it give a different IR text and so a different cache key.
template <typename... P>
struct Params {
  std::tuple<P...> values;
};

template <typename... P>
Params<std::decay_t<P>...> params(P&&... values) {
  return {std::tuple<std::decay_t<P>...>(std::forward<P>(values)...)};
}

// Traces `fn` into a Kernel. fn takes one nl::tensor per spec (kernel inputs, shared_hbm,
// named by TensorSpec::name or "in0", "in1", ...), then the values of `params`, and returns
// its outputs: an nl::tensor, a std::vector or std::tuple of them, or nothing (then every
// nl::shared_hbm tensor it created is an output, in creation order). Outputs are created with
// nl::ndarray(..., nl::shared_hbm).
template <typename Fn, typename... P>
Kernel trace(std::string name, Fn&& fn, const std::vector<TensorSpec>& specs,
             const Params<P...>& params, Span span = Span::current()) {
  dsl::TraceScope scope(std::move(name), span);
  std::vector<nl::tensor> inputs = scope.inputs(specs);
  auto outputs = dsl::call_kernel<std::remove_reference_t<Fn>, 0>(fn, inputs, params.values, span);
  return scope.finish(outputs);
}

template <typename Fn>
Kernel trace(std::string name, Fn&& fn, const std::vector<TensorSpec>& specs,
             Span span = Span::current()) {
  return trace(std::move(name), std::forward<Fn>(fn), specs, Params<>{}, std::move(span));
}

}  // namespace neuron
