// Turns a fault an instruction kernel reported while running (instr_kernels.hpp: an index read
// at run time outside its range) into the UserError both executors throw.
#pragma once
#include "neuron/base/instr_kernels.hpp"
#include "neuron/codegen/program.hpp"

namespace neuron::native {

// Throws UserError rule "out-of-bounds" at the instruction's line when `f` is a fault;
// `where` names the program (e.g. "pid0=3") or is empty.
void raise_fault(const Program& p, const Fault& f, const std::string& where = "");

}  // namespace neuron::native
