// Structural equality and hashing of the Kernel IR; spans are deliberately ignored.
#include "neuron/ir/equality.hpp"

#include <bit>
#include <cmath>
#include <functional>

namespace neuron {

namespace {

// Doubles compare by bit pattern so that 0.0 and -0.0 differ (they print differently), except
// that every NaN equals every NaN (the text form keeps no payload).
bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

void mix(size_t& h, size_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
}

template <typename T>
size_t hash_of(const T& v) {
  return std::hash<T>()(v);
}

bool equal_buffer(const BufferPtr& a, const BufferPtr& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  return a->name == b->name && a->memory == b->memory && a->shape == b->shape &&
         a->dtype == b->dtype && a->offset == b->offset && a->slots == b->slots &&
         a->slot_var == b->slot_var && a->core == b->core;
}

size_t hash_buffer(const BufferPtr& b) {
  size_t h = 0x62756666;
  if (!b) return h;
  mix(h, hash_of(b->name));
  mix(h, static_cast<size_t>(b->memory));
  for (auto d : b->shape) mix(h, hash_of(d));
  mix(h, static_cast<size_t>(b->dtype));
  mix(h, hash_of(b->offset));
  mix(h, hash_of(b->slots));
  mix(h, hash_of(b->slot_var));
  mix(h, hash_of(b->core));
  return h;
}

size_t hash_access(const Access& a) {
  size_t h = hash_buffer(a.buffer);
  for (auto& d : a.dims) {
    mix(h, hash_value(d.start));
    mix(h, hash_of(d.size));
    mix(h, hash_of(d.step));
    mix(h, d.keep ? 1 : 2);
  }
  for (auto s : a.storage) mix(h, hash_of(s));
  mix(h, hash_of(a.origin));
  if (a.as_dtype) mix(h, hash_of(static_cast<int64_t>(*a.as_dtype)) + 11);
  for (auto o : a.order) mix(h, hash_of(static_cast<int64_t>(o)) + 7);
  return h;
}

bool equal_value(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  if (auto x = std::get_if<Access>(&a)) return equal(*x, std::get<Access>(b));
  if (auto x = std::get_if<double>(&a)) return same_double(*x, std::get<double>(b));
  if (auto x = std::get_if<int64_t>(&a)) return *x == std::get<int64_t>(b);
  if (auto x = std::get_if<std::string>(&a)) return *x == std::get<std::string>(b);
  return std::get<std::vector<int64_t>>(a) == std::get<std::vector<int64_t>>(b);
}

size_t hash_val(const Value& v) {
  size_t h = v.index();
  if (auto x = std::get_if<Access>(&v)) mix(h, hash_access(*x));
  if (auto x = std::get_if<int64_t>(&v)) mix(h, hash_of(*x));
  if (auto x = std::get_if<double>(&v))
    mix(h, std::isnan(*x) ? 0x6e616e : hash_of(std::bit_cast<uint64_t>(*x)));
  if (auto x = std::get_if<std::string>(&v)) mix(h, hash_of(*x));
  if (auto x = std::get_if<std::vector<int64_t>>(&v))
    for (auto i : *x) mix(h, hash_of(i));
  return h;
}

bool equal_buffers(const std::vector<BufferPtr>& a, const std::vector<BufferPtr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!equal_buffer(a[i], b[i])) return false;
  return true;
}

}  // namespace

bool equal(const Access& a, const Access& b) {
  return equal_buffer(a.buffer, b.buffer) && a.dims == b.dims && a.storage == b.storage &&
         a.origin == b.origin && a.order == b.order && a.as_dtype == b.as_dtype;
}

bool equal(const StmtPtr& a, const StmtPtr& b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind) return false;
  switch (a->kind) {
    case StmtKind::Block: {
      auto& x = static_cast<const Block&>(*a).stmts;
      auto& y = static_cast<const Block&>(*b).stmts;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case StmtKind::For: {
      auto& x = static_cast<const For&>(*a);
      auto& y = static_cast<const For&>(*b);
      return x.var == y.var && x.extent == y.extent && x.loop_kind == y.loop_kind &&
             x.start == y.start && x.stop == y.stop && x.step == y.step && x.cond == y.cond &&
             equal(x.body, y.body);
    }
    case StmtKind::Alloc:
      return equal_buffer(static_cast<const Alloc&>(*a).buffer,
                          static_cast<const Alloc&>(*b).buffer);
    case StmtKind::Op: {
      auto& x = static_cast<const Op&>(*a);
      auto& y = static_cast<const Op&>(*b);
      if (x.code != y.code || x.args.size() != y.args.size()) return false;
      for (size_t i = 0; i < x.args.size(); ++i)
        if (x.args[i].name != y.args[i].name || !equal_value(x.args[i].value, y.args[i].value))
          return false;
      return true;
    }
  }
  return false;
}

bool equal(const Kernel& a, const Kernel& b) {
  return a.name == b.name && equal_buffers(a.inputs, b.inputs) &&
         equal_buffers(a.outputs, b.outputs) && equal(a.body, b.body);
}

size_t hash_value(const StmtPtr& s) {
  if (!s) return 0x6e756c6c;
  size_t h = static_cast<size_t>(s->kind) + 1;
  switch (s->kind) {
    case StmtKind::Block:
      for (auto& c : static_cast<const Block&>(*s).stmts) mix(h, hash_value(c));
      break;
    case StmtKind::For: {
      auto& f = static_cast<const For&>(*s);
      mix(h, hash_of(f.var));
      mix(h, hash_of(f.extent));
      mix(h, static_cast<size_t>(f.loop_kind));
      if (f.is_dynamic()) {
        mix(h, hash_value(f.start));
        mix(h, hash_value(f.stop));
        mix(h, hash_of(f.step));
        mix(h, hash_of(f.cond));
      }
      mix(h, hash_value(f.body));
      break;
    }
    case StmtKind::Alloc:
      mix(h, hash_buffer(static_cast<const Alloc&>(*s).buffer));
      break;
    case StmtKind::Op: {
      auto& o = static_cast<const Op&>(*s);
      mix(h, static_cast<size_t>(o.code));
      for (auto& a : o.args) {
        mix(h, hash_of(a.name));
        mix(h, hash_val(a.value));
      }
      break;
    }
  }
  return h;
}

size_t hash_value(const Kernel& k) {
  size_t h = hash_of(k.name);
  mix(h, k.inputs.size());
  for (auto& b : k.inputs) mix(h, hash_buffer(b));
  mix(h, k.outputs.size());
  for (auto& b : k.outputs) mix(h, hash_buffer(b));
  mix(h, hash_value(k.body));
  return h;
}

}  // namespace neuron
