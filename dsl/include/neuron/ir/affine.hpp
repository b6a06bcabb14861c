// Affine index expressions: constant + sum(coeff * var) over loop variables and program ids.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace neuron {

// Variables are named: loop variables "i0", "i1", ... (numbered in trace order so the C++ and
// Python front ends produce identical IR), program ids "pid0".."pid3" and grid sizes
// "npid0".."npid3". Terms are kept sorted by name with non-zero coefficients, so equal
// expressions have equal representations and == is structural equality.
struct Affine {
  struct Term {
    std::string var;
    int64_t coeff = 0;
    bool operator==(const Term&) const = default;
  };
  int64_t constant = 0;
  std::vector<Term> terms;

  Affine() = default;
  Affine(int64_t c) : constant(c) {}  // NOLINT: implicit on purpose, ints are affine
  static Affine var(std::string name, int64_t coeff = 1);

  bool is_constant() const { return terms.empty(); }
  int64_t coeff_of(const std::string& var) const;
  bool uses(const std::string& var) const { return coeff_of(var) != 0; }

  // Smallest and largest value given each variable's inclusive range; unknown variables throw.
  using Ranges = std::map<std::string, std::pair<int64_t, int64_t>>;
  std::pair<int64_t, int64_t> bounds(const Ranges& ranges) const;
  int64_t eval(const std::map<std::string, int64_t>& env) const;
  Affine substitute(const std::string& var, const Affine& value) const;

  std::string str() const;  // "i0*128 + pid0 + 3", "0"
  bool operator==(const Affine&) const = default;

  friend Affine operator+(const Affine& a, const Affine& b);
  friend Affine operator-(const Affine& a, const Affine& b);
  friend Affine operator*(const Affine& a, int64_t k);
  friend Affine operator*(int64_t k, const Affine& a) { return a * k; }
  friend Affine operator-(const Affine& a) { return a * -1; }
  Affine& operator+=(const Affine& b) { return *this = *this + b; }
};

std::string program_id_var(int axis);    // "pid<axis>"
std::string num_programs_var(int axis);  // "npid<axis>"

size_t hash_value(const Affine& a);

}  // namespace neuron
