// The syntax of user messages: per thread while a trace runs, else the process default.
#include "neuron/dsl/syntax.hpp"

#include <atomic>

namespace neuron::dsl {

namespace {

std::atomic<Syntax> default_syntax{Syntax::cpp};
thread_local int scoped = -1;  // -1: no scope; else a Syntax value

}  // namespace

Syntax syntax() {
  return scoped < 0 ? default_syntax.load(std::memory_order_relaxed) : Syntax(scoped);
}

void set_default_syntax(Syntax s) {
  default_syntax.store(s, std::memory_order_relaxed);
}

SyntaxScope::SyntaxScope(Syntax s) : saved_(scoped) {
  scoped = int(s);
}

SyntaxScope::~SyntaxScope() {
  scoped = saved_;
}

std::string_view spell(std::string_view cpp, std::string_view python) {
  return syntax() == Syntax::python ? python : cpp;
}

}  // namespace neuron::dsl
