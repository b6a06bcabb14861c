// Target tables for trn1, trn2 (default) and trn3: every hardware figure the toolkit uses.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace neuron {

struct Target {
  std::string name;
  int partitions = 128;
  int64_t sbuf_bytes_per_partition = 0;  // usable bytes per partition
  int64_t psum_bytes_per_partition = 16384;
  int psum_banks = 8;
  int64_t psum_bank_bytes = 2048;
  int64_t gemm_stationary_fmax = 128;
  int64_t gemm_moving_fmax = 512;
};

// Throws UserError (rule "target") naming the known targets when `name` is unknown.
const Target& target_by_name(std::string_view name);
const Target& default_target();  // trn2
std::vector<std::string> target_names();

}  // namespace neuron
