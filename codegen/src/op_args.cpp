// The keyword-argument signature of every opcode, from docs/ir.md.
#include "op_args.hpp"

namespace neuron::passes {

namespace {
constexpr bool req = true, opt = false;
}  // namespace

const std::vector<ArgSpec>& op_arg_specs(Opcode code) {
  using K = ArgKind;
  static const std::vector<ArgSpec> dst_src = {{"dst", K::view, req}, {"src", K::view, req}};
  // Indirect rows: src_rows/dst_rows is a [P, 1] integer tile whose element p selects the row
  // of src/dst moved by partition p (src/dst dim `rows_dim`); oob_mode 0 errors on an index
  // outside that dim, 1 skips its row.
  static const std::vector<ArgSpec> dma = {{"dst", K::view, req},       {"src", K::view, req},
                                           {"src_rows", K::view, opt},  {"dst_rows", K::view, opt},
                                           {"oob_mode", K::integer, opt}};
  static const std::vector<ArgSpec> gather = {
      {"dst", K::view, req}, {"data", K::view, req}, {"indices", K::view, req}};
  static const std::vector<ArgSpec> local_gather = {{"dst", K::view, req},
                                                    {"src", K::view, req},
                                                    {"index", K::view, req},
                                                    {"num_elem_per_idx", K::integer, opt},
                                                    {"num_valid_indices", K::integer, opt}};
  static const std::vector<ArgSpec> register_load = {{"reg", K::name, req}, {"src", K::view, req}};
  static const std::vector<ArgSpec> register_store = {{"dst", K::view, req}, {"reg", K::name, req}};
  static const std::vector<ArgSpec> register_move = {
      {"reg", K::name, req}, {"value", K::integer, opt}, {"src", K::name, opt}};
  static const std::vector<ArgSpec> matmul = {{"dst", K::view, req},
                                              {"x", K::view, req},
                                              {"y", K::view, req},
                                              {"transpose_x", K::integer, req}};
  static const std::vector<ArgSpec> unary = {
      {"dst", K::view, req}, {"x", K::view, req}, {"func", K::name, req}};
  static const std::vector<ArgSpec> binary = {{"dst", K::view, req},
                                              {"x", K::view_or_number, req},
                                              {"y", K::view_or_number, req},
                                              {"op", K::name, req}};
  static const std::vector<ArgSpec> reduce = {
      {"dst", K::view, req}, {"x", K::view, req}, {"op", K::name, req}, {"axes", K::ints, req}};
  static const std::vector<ArgSpec> where = {{"dst", K::view, req},
                                             {"cond", K::view, req},
                                             {"x", K::view_or_number, req},
                                             {"y", K::view_or_number, req}};
  static const std::vector<ArgSpec> nc_matmul = {{"dst", K::view, req},
                                                 {"stationary", K::view, req},
                                                 {"moving", K::view, req},
                                                 {"accumulate", K::integer, opt}};
  static const std::vector<ArgSpec> nc_transpose = {{"dst", K::view, req}, {"data", K::view, req}};
  static const std::vector<ArgSpec> activation = {{"dst", K::view, req},
                                                  {"data", K::view, req},
                                                  {"func", K::name, req},
                                                  {"bias", K::view, opt},
                                                  {"scale", K::view_or_number, opt},
                                                  {"reduce_op", K::name, opt},
                                                  {"reduce_res", K::view, opt}};
  static const std::vector<ArgSpec> tensor_tensor = {{"dst", K::view, req},
                                                     {"data1", K::view, req},
                                                     {"data2", K::view, req},
                                                     {"op", K::name, req}};
  static const std::vector<ArgSpec> tensor_scalar = {{"dst", K::view, req},
                                                     {"data", K::view, req},
                                                     {"op0", K::name, req},
                                                     {"operand0", K::view_or_number, req},
                                                     {"reverse0", K::integer, opt},
                                                     {"op1", K::name, opt},
                                                     {"operand1", K::view_or_number, opt},
                                                     {"reverse1", K::integer, opt}};
  static const std::vector<ArgSpec> tensor_reduce = {{"dst", K::view, req},
                                                     {"data", K::view, req},
                                                     {"op", K::name, req},
                                                     {"axes", K::ints, req},
                                                     {"negate", K::integer, opt}};
  static const std::vector<ArgSpec> predicated = {
      {"dst", K::view, req}, {"src", K::view, req}, {"predicate", K::view, req}};
  static const std::vector<ArgSpec> memset = {{"dst", K::view, req}, {"value", K::number, req}};
  static const std::vector<ArgSpec> iota = {{"dst", K::view, req},
                                            {"pattern", K::ints, req},
                                            {"offset", K::integer, opt},
                                            {"channel_multiplier", K::integer, opt}};
  static const std::vector<ArgSpec> affine_select = {{"dst", K::view, req},
                                                     {"on_true", K::view, req},
                                                     {"pattern", K::ints, req},
                                                     {"offset", K::integer, opt},
                                                     {"channel_multiplier", K::integer, opt},
                                                     {"cmp_op", K::name, opt},
                                                     {"on_false", K::number, req}};
  static const std::vector<ArgSpec> device_print = {{"src", K::view, req},
                                                    {"prefix", K::name, opt}};
  switch (code) {
    case Opcode::nl_load:
    case Opcode::nl_store:
    case Opcode::dma_copy:
      return dma;
    case Opcode::nl_copy:
    case Opcode::tensor_copy:
      return dst_src;
    case Opcode::nc_n_gather:
      return gather;
    case Opcode::local_gather:
      return local_gather;
    case Opcode::register_load:
      return register_load;
    case Opcode::register_store:
      return register_store;
    case Opcode::register_move:
      return register_move;
    case Opcode::nl_transpose:
      return dst_src;
    case Opcode::nl_matmul:
      return matmul;
    case Opcode::nl_unary:
      return unary;
    case Opcode::nl_binary:
      return binary;
    case Opcode::nl_reduce:
      return reduce;
    case Opcode::nl_where:
      return where;
    case Opcode::nc_matmul:
      return nc_matmul;
    case Opcode::nc_transpose:
      return nc_transpose;
    case Opcode::activation:
      return activation;
    case Opcode::tensor_tensor:
      return tensor_tensor;
    case Opcode::tensor_scalar:
      return tensor_scalar;
    case Opcode::tensor_reduce:
      return tensor_reduce;
    case Opcode::tensor_copy_predicated:
      return predicated;
    case Opcode::memset:
      return memset;
    case Opcode::iota:
      return iota;
    case Opcode::affine_select:
      return affine_select;
    case Opcode::device_print:
      return device_print;
  }
  return dst_src;
}

std::string_view arg_kind_name(ArgKind k) {
  switch (k) {
    case ArgKind::view:
      return "a view";
    case ArgKind::integer:
      return "an integer";
    case ArgKind::number:
      return "a number";
    case ArgKind::name:
      return "a name";
    case ArgKind::ints:
      return "an integer list";
    case ArgKind::view_or_number:
      return "a view or a number";
  }
  return "?";
}

bool value_has_kind(const Value& v, ArgKind k) {
  switch (k) {
    case ArgKind::view:
      return std::holds_alternative<Access>(v);
    case ArgKind::integer:
      return std::holds_alternative<int64_t>(v);
    case ArgKind::number:
      return std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v);
    case ArgKind::name:
      return std::holds_alternative<std::string>(v);
    case ArgKind::ints:
      return std::holds_alternative<std::vector<int64_t>>(v) || std::holds_alternative<int64_t>(v);
    case ArgKind::view_or_number:
      return std::holds_alternative<Access>(v) || std::holds_alternative<int64_t>(v) ||
             std::holds_alternative<double>(v);
  }
  return false;
}

}  // namespace neuron::passes
