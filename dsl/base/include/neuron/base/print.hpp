// Where device_print output of native kernels goes: set per worker thread for the current run.
#pragma once
#include <iosfwd>

namespace neuron::native {

void set_print_stream(std::ostream* os);  // null: std::cout
std::ostream* print_stream();

}  // namespace neuron::native
