// The syntax user messages quote code in: C++ (nl::ndarray(..., nl::shared_hbm)) or Python
// (nl.ndarray(..., buffer=nl.shared_hbm)), so a Python user never reads C++ in an error.
#pragma once
#include <string_view>

namespace neuron::dsl {

enum class Syntax { cpp, python };

// The syntax of the kernel being traced on this thread; outside a trace, the process default
// (C++, or Python once the Python module is loaded: set_default_syntax).
Syntax syntax();
void set_default_syntax(Syntax s);

// Makes `s` this thread's syntax while alive (a trace sets the syntax of its kernel's source:
// a C++ kernel called from Python still reports in C++).
class SyntaxScope {
 public:
  explicit SyntaxScope(Syntax s);
  ~SyntaxScope();
  SyntaxScope(const SyntaxScope&) = delete;
  SyntaxScope& operator=(const SyntaxScope&) = delete;

 private:
  int saved_;
};

// The spelling of a piece of code in the current syntax:
//   user_error(span, rule, "create outputs with {}",
//              spell("nl::ndarray(..., nl::shared_hbm)", "nl.ndarray(..., buffer=nl.shared_hbm)"));
std::string_view spell(std::string_view cpp, std::string_view python);

}  // namespace neuron::dsl
