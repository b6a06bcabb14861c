// Affine expression arithmetic, bounds and printing.
#include "neuron/ir/affine.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "neuron/base/error.hpp"

namespace neuron {

static void normalize(Affine& a) {
  std::sort(a.terms.begin(), a.terms.end(),
            [](const Affine::Term& x, const Affine::Term& y) { return x.var < y.var; });
  std::vector<Affine::Term> out;
  for (auto& t : a.terms) {
    if (!out.empty() && out.back().var == t.var)
      out.back().coeff += t.coeff;
    else
      out.push_back(t);
  }
  std::erase_if(out, [](const Affine::Term& t) { return t.coeff == 0; });
  a.terms = std::move(out);
}

Affine Affine::var(std::string name, int64_t coeff) {
  Affine a;
  if (coeff != 0) a.terms.push_back({std::move(name), coeff});
  return a;
}

int64_t Affine::coeff_of(const std::string& v) const {
  for (auto& t : terms)
    if (t.var == v) return t.coeff;
  return 0;
}

Affine operator+(const Affine& a, const Affine& b) {
  Affine r = a;
  r.constant += b.constant;
  r.terms.insert(r.terms.end(), b.terms.begin(), b.terms.end());
  normalize(r);
  return r;
}

Affine operator-(const Affine& a, const Affine& b) { return a + b * -1; }

Affine operator*(const Affine& a, int64_t k) {
  Affine r = a;
  r.constant *= k;
  for (auto& t : r.terms) t.coeff *= k;
  normalize(r);
  return r;
}

std::pair<int64_t, int64_t> Affine::bounds(const Ranges& ranges) const {
  int64_t lo = constant, hi = constant;
  for (auto& t : terms) {
    auto it = ranges.find(t.var);
    NEURON_ASSERT(it != ranges.end(), "affine bounds: variable '{}' has no range", t.var);
    int64_t a = t.coeff * it->second.first, b = t.coeff * it->second.second;
    lo += std::min(a, b);
    hi += std::max(a, b);
  }
  return {lo, hi};
}

int64_t Affine::eval(const std::map<std::string, int64_t>& env) const {
  int64_t v = constant;
  for (auto& t : terms) {
    auto it = env.find(t.var);
    NEURON_ASSERT(it != env.end(), "affine eval: variable '{}' is unbound", t.var);
    v += t.coeff * it->second;
  }
  return v;
}

Affine Affine::substitute(const std::string& v, const Affine& value) const {
  int64_t k = coeff_of(v);
  if (k == 0) return *this;
  Affine rest = *this;
  std::erase_if(rest.terms, [&](const Term& t) { return t.var == v; });
  return rest + value * k;
}

// Magnitude of v as unsigned, so that printing the most negative int64 is well defined.
static uint64_t magnitude(int64_t v) {
  return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
}

std::string Affine::str() const {
  std::string s;
  for (auto& t : terms) {
    if (!s.empty())
      s += t.coeff < 0 ? " - " : " + ";
    else if (t.coeff < 0)
      s += "-";
    uint64_t c = magnitude(t.coeff);
    s += c == 1 ? t.var : fmt::format("{}*{}", t.var, c);
  }
  if (s.empty()) return fmt::format("{}", constant);
  if (constant != 0) s += fmt::format(" {} {}", constant < 0 ? '-' : '+', magnitude(constant));
  return s;
}

std::string program_id_var(int axis) { return fmt::format("pid{}", axis); }
std::string num_programs_var(int axis) { return fmt::format("npid{}", axis); }

size_t hash_value(const Affine& a) {
  size_t h = std::hash<int64_t>()(a.constant);
  for (auto& t : a.terms)
    h = h * 1000003u ^ (std::hash<std::string>()(t.var) + 31u * std::hash<int64_t>()(t.coeff));
  return h;
}

}  // namespace neuron
