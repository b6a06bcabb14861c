// Factories and accessors of the Kernel IR nodes.
#include "neuron/ir/ir.hpp"

#include <algorithm>

namespace neuron {

int64_t Buffer::elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t Buffer::free_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> row_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

std::vector<size_t> Access::kept() const {
  std::vector<size_t> k;
  if (!order.empty()) {
    for (int d : order) k.push_back(static_cast<size_t>(d));
    return k;
  }
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d].keep) k.push_back(d);
  return k;
}

void Access::normalize_order() {
  if (order.empty()) return;
  std::vector<int> o;
  for (int d : order)
    if (dims[static_cast<size_t>(d)].keep) o.push_back(d);
  order = std::is_sorted(o.begin(), o.end()) ? std::vector<int>{} : o;
}

std::vector<int64_t> Access::shape() const {
  std::vector<int64_t> s;
  for (size_t d : kept()) s.push_back(dims[d].size);
  return s;
}

Access Access::whole(BufferPtr b) {
  Access a;
  for (auto d : b->shape) a.dims.push_back(DimSlice{Affine(0), d, 1, true});
  a.buffer = std::move(b);
  return a;
}

StmtPtr Block::make(std::vector<StmtPtr> stmts, Span span) {
  auto n = std::make_shared<Block>();
  n->stmts = std::move(stmts);
  n->span = std::move(span);
  return n;
}

StmtPtr For::make(std::string var, int64_t extent, LoopKind kind, StmtPtr body, Span span) {
  auto n = std::make_shared<For>();
  n->var = std::move(var);
  n->extent = extent;
  n->loop_kind = kind;
  n->body = std::move(body);
  n->span = std::move(span);
  return n;
}

StmtPtr For::make_dynamic(std::string var, Affine start, Affine stop, int64_t step,
                          std::string cond, StmtPtr body, Span span) {
  auto n = std::make_shared<For>();
  n->var = std::move(var);
  n->loop_kind = LoopKind::dynamic;
  n->start = std::move(start);
  n->stop = std::move(stop);
  n->step = step;
  n->cond = std::move(cond);
  n->body = std::move(body);
  n->span = std::move(span);
  return n;
}

StmtPtr For::with_body(StmtPtr b) const {
  auto n = std::make_shared<For>(*this);
  n->body = std::move(b);
  return n;
}

bool is_register_var(std::string_view var) {
  if (var.size() < 2 || var[0] != 'r') return false;
  for (size_t i = 1; i < var.size(); ++i)
    if (var[i] < '0' || var[i] > '9') return false;
  return true;
}

std::string register_var(int n) {
  return "r" + std::to_string(n);
}

StmtPtr Alloc::make(BufferPtr buffer, Span span) {
  auto n = std::make_shared<Alloc>();
  n->buffer = std::move(buffer);
  n->span = std::move(span);
  return n;
}

StmtPtr Op::make(Opcode code, std::vector<Arg> args, Span span) {
  auto n = std::make_shared<Op>();
  n->code = code;
  n->args = std::move(args);
  n->span = std::move(span);
  return n;
}

const Value* Op::find(std::string_view name) const {
  for (auto& a : args)
    if (a.name == name) return &a.value;
  return nullptr;
}

const Access* Op::access(std::string_view name) const {
  auto v = find(name);
  return v ? std::get_if<Access>(v) : nullptr;
}

int64_t Op::get_int(std::string_view name, int64_t fallback) const {
  auto v = find(name);
  if (!v) return fallback;
  if (auto i = std::get_if<int64_t>(v)) return *i;
  if (auto d = std::get_if<double>(v)) return static_cast<int64_t>(*d);
  return fallback;
}

double Op::get_float(std::string_view name, double fallback) const {
  auto v = find(name);
  if (!v) return fallback;
  if (auto d = std::get_if<double>(v)) return *d;
  if (auto i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  return fallback;
}

std::string Op::get_string(std::string_view name, const std::string& fallback) const {
  auto v = find(name);
  if (!v) return fallback;
  if (auto s = std::get_if<std::string>(v)) return *s;
  return fallback;
}

std::vector<int64_t> Op::get_ints(std::string_view name) const {
  auto v = find(name);
  if (!v) return {};
  if (auto l = std::get_if<std::vector<int64_t>>(v)) return *l;
  if (auto i = std::get_if<int64_t>(v)) return {*i};
  return {};
}

std::string_view loop_kind_name(LoopKind k) {
  switch (k) {
    case LoopKind::affine:
      return "affine_range";
    case LoopKind::sequential:
      return "sequential_range";
    case LoopKind::dynamic:
      return "dynamic_range";
  }
  return "?";
}

}  // namespace neuron
