// Tiny factories for building Kernel IR by hand in pass and error tests.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "neuron/ir/ir.hpp"

namespace neuron::tb {

inline BufferPtr buf(std::string name, Memory m, std::vector<int64_t> shape,
                     DType dt = DType::float32, Span span = {}) {
  auto b = std::make_shared<Buffer>();
  b->name = std::move(name);
  b->memory = m;
  b->shape = std::move(shape);
  b->dtype = dt;
  b->span = std::move(span);
  return b;
}

inline BufferPtr sbuf(std::string name, std::vector<int64_t> shape, DType dt = DType::float32) {
  return buf(std::move(name), Memory::sbuf, std::move(shape), dt);
}
inline BufferPtr psum(std::string name, std::vector<int64_t> shape, DType dt = DType::float32) {
  return buf(std::move(name), Memory::psum, std::move(shape), dt);
}
inline BufferPtr hbm(std::string name, std::vector<int64_t> shape, DType dt = DType::float32) {
  return buf(std::move(name), Memory::shared_hbm, std::move(shape), dt);
}

inline DimSlice ds(Affine start, int64_t size, int64_t step = 1, bool keep = true) {
  return DimSlice{std::move(start), size, step, keep};
}

inline Access whole(BufferPtr b) {
  return Access::whole(std::move(b));
}
inline Access view(BufferPtr b, std::vector<DimSlice> dims) {
  Access a;
  a.buffer = std::move(b);
  a.dims = std::move(dims);
  return a;
}

inline StmtPtr alloc(BufferPtr b, Span s = {}) {
  return Alloc::make(std::move(b), std::move(s));
}
inline StmtPtr op(Opcode c, std::vector<Arg> args, Span s = {}) {
  return Op::make(c, std::move(args), std::move(s));
}
inline StmtPtr block(std::vector<StmtPtr> stmts) {
  return Block::make(std::move(stmts));
}
inline StmtPtr affine_for(std::string var, int64_t extent, std::vector<StmtPtr> body) {
  return For::make(std::move(var), extent, LoopKind::affine, Block::make(std::move(body)));
}
inline StmtPtr seq_for(std::string var, int64_t extent, std::vector<StmtPtr> body) {
  return For::make(std::move(var), extent, LoopKind::sequential, Block::make(std::move(body)));
}

inline Kernel kernel(std::vector<BufferPtr> inputs, std::vector<BufferPtr> outputs,
                     std::vector<StmtPtr> body, std::string name = "k") {
  Kernel k;
  k.name = std::move(name);
  k.inputs = std::move(inputs);
  k.outputs = std::move(outputs);
  k.body = Block::make(std::move(body));
  return k;
}

inline std::string s(const char* v) {
  return std::string(v);
}
inline int64_t i(int64_t v) {
  return v;
}

}  // namespace neuron::tb
