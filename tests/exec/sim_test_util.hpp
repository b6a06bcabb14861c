// Helpers for simulator tests: build engine programs (patterns, instructions, loops) by hand.
#pragma once
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "neuron/codegen/program.hpp"
#include "neuron/runtime/tensor.hpp"

namespace neuron::sim_test {

using Dim = AccessPattern::Dim;

// ---- building programs by hand ------------------------------------------------------------

// On-chip pattern: `parts` partitions from `pstart`, byte offset `off`, free dims.
inline AccessPattern chip(Memory mem, DType dt, int64_t off, int64_t parts,
                          std::vector<Dim> free = {}, Affine pstart = 0, int64_t pstep = 1) {
  AccessPattern ap;
  ap.memory = mem;
  ap.dtype = dt;
  ap.partition = pstart;
  ap.offset = off;
  ap.dims.push_back({pstep, parts});
  for (auto& d : free) ap.dims.push_back(d);
  return ap;
}
inline AccessPattern sb(DType dt, int64_t off, int64_t parts, std::vector<Dim> free = {}) {
  return chip(Memory::sbuf, dt, off, parts, std::move(free));
}
inline AccessPattern ps(DType dt, int64_t off, int64_t parts, std::vector<Dim> free = {}) {
  return chip(Memory::psum, dt, off, parts, std::move(free));
}
// HBM pattern over tensor `t` with element offset `off`.
inline AccessPattern hbm(int t, DType dt, Affine off, std::vector<Dim> dims) {
  AccessPattern ap;
  ap.memory = Memory::shared_hbm;
  ap.tensor = t;
  ap.dtype = dt;
  ap.offset = std::move(off);
  ap.dims = std::move(dims);
  return ap;
}
// Row-major [rows, cols] view of a tensor with `ld` elements per row.
inline AccessPattern hbm2(int t, DType dt, int64_t rows, int64_t cols, int64_t ld, Affine off = 0) {
  return hbm(t, dt, std::move(off), {{ld, rows}, {1, cols}});
}

inline ProgNode instr(Opcode op, AccessPattern dst, std::vector<AccessPattern> src,
                      InstrArgs args = {}, int line = 0) {
  ProgNode n;
  n.kind = ProgNode::Kind::instr;
  n.instr.op = op;
  n.instr.dst = std::move(dst);
  n.instr.src = std::move(src);
  n.instr.args = std::move(args);
  n.instr.span = Span{"kernel.py", line, 5};
  return n;
}
inline ProgNode dma(AccessPattern dst, AccessPattern src, int line = 0) {
  return instr(Opcode::dma_copy, std::move(dst), {std::move(src)}, {}, line);
}
inline ProgNode loop(std::string var, int64_t extent, std::vector<ProgNode> body) {
  ProgNode n;
  n.kind = ProgNode::Kind::loop;
  n.var = std::move(var);
  n.extent = extent;
  n.body = std::move(body);
  return n;
}

inline TensorDecl decl(std::string name, std::vector<int64_t> shape, DType dt,
                       TensorDecl::Role role) {
  TensorDecl d;
  d.name = std::move(name);
  d.shape = std::move(shape);
  d.dtype = dt;
  d.role = role;
  return d;
}
inline const auto kIn = TensorDecl::Role::input;
inline const auto kOut = TensorDecl::Role::output;

inline Program program(std::vector<TensorDecl> tensors, std::vector<ProgNode> body) {
  Program p;
  p.name = "test";
  p.target = "trn2";
  p.tensors = std::move(tensors);
  p.body = std::move(body);
  return p;
}

inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -2.0f,
                                        float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
// Small multiples of 1/8: exact in bf16, and their products and short sums exact in fp32.
inline std::vector<float> exact_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-16, 16);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng)) / 8.0f;
  return v;
}

inline uint16_t bits16(const Tensor& t, int64_t i) {
  uint16_t v;
  std::memcpy(&v, t.data_as<std::byte>() + 2 * i, 2);
  return v;
}

inline Dim row(int64_t n) {
  return {1, n};
}

}  // namespace neuron::sim_test
