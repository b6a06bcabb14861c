// neuron-opgen: reads a C++ header with Clang (LibTooling), finds the kernel functions marked as
// operators with NEURON_OP("namespace") (neuron/op.hpp) and writes
//  - a C++ source registering each in the kernel registry (NEURON_KERNEL, neuron/registry.hpp):
//    its tensors (the nl::tensor parameters, first), then its parameters (bool, integers,
//    floating point, std::string, neuron::DType, enums) with their defaults, the kernel's doc
//    comment and each parameter's (a comment just before the parameter);
//  - with --schema, a JSON file of the operators' schemas (PyTorch schema strings, outputs,
//    source lines);
//  - with --library, also the C function neuron_op_library_schema() returning that JSON, for
//    an operator library (neuron_add_op_library in cmake/NeuronOpLibrary.cmake) that
//    neuron.load_ops reads.
//
//   neuron-opgen HEADER... -o OUT.cpp [--schema OUT.json] [--include NAME] [--namespace NS]
//                [--library] -- COMPILER FLAGS...
//
// A malformed operator (a tensor after a parameter, an argument or return type an operator
// cannot have, a namespace other than --namespace) is reported as "file:line:col: error: ..."
// and the tool exits with status 1. An operator found through several headers counts once.
// Function bodies are skipped: only declarations are read.
#include <clang/AST/ASTConsumer.h>
#include <clang/AST/ASTContext.h>
#include <clang/AST/Attr.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/FrontendAction.h>
#include <clang/Lex/Lexer.h>
#include <clang/Tooling/CompilationDatabase.h>
#include <clang/Tooling/Tooling.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Param {
  std::string name, cpp_type, kind;  // kind: bool, int, float, str, dtype, choice
  // The default as a C++ expression valid anywhere (evaluated: a number, true / false, a
  // qualified enumerator; a string's source text) and as the operator schema writes it; both
  // empty when the parameter is required.
  std::string default_cpp, default_schema;
  std::vector<std::string> choices;  // enum: the enumerators' names
  std::string enum_type;             // enum: the qualified type
  std::string doc;                   // the comment before the parameter, if any
};

struct Op {
  std::string ns, name, qualified, doc, file;
  unsigned line = 0;
  std::vector<std::string> inputs;
  std::vector<Param> params;
  int outputs = 1;
};

struct Error {
  std::string where, message;
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

bool is_tensor(clang::QualType t) {
  t = t.getNonReferenceType().getUnqualifiedType().getCanonicalType();
  auto* rd = t->getAsCXXRecordDecl();
  return rd && rd->getQualifiedNameAsString() == "neuron::nl::tensor";
}

// Outputs of a kernel returning nl::tensor (1) or std::tuple of them (their count); -1 else.
int output_count(clang::QualType t) {
  if (is_tensor(t)) return 1;
  auto* spec = llvm::dyn_cast_or_null<clang::ClassTemplateSpecializationDecl>(
      t.getCanonicalType()->getAsCXXRecordDecl());
  if (!spec || spec->getQualifiedNameAsString() != "std::tuple") return -1;
  const auto& args = spec->getTemplateArgs();
  if (args.size() != 1 || args[0].getKind() != clang::TemplateArgument::Pack) return -1;
  int n = 0;
  for (const auto& a : args[0].pack_elements()) {
    if (a.getKind() != clang::TemplateArgument::Type || !is_tensor(a.getAsType())) return -1;
    ++n;
  }
  return n > 0 ? n : -1;
}

class Visitor : public clang::RecursiveASTVisitor<Visitor> {
 public:
  Visitor(clang::ASTContext& ctx, std::vector<Op>& ops, std::vector<Error>& errors)
      : ctx_(ctx), sm_(ctx.getSourceManager()), ops_(ops), errors_(errors) {}

  bool VisitFunctionDecl(clang::FunctionDecl* fn) {
    if (!fn->isFirstDecl()) return true;
    for (const auto* attr : fn->specific_attrs<clang::AnnotateAttr>()) {
      llvm::StringRef a = attr->getAnnotation();
      if (a.consume_front("neuron_op:")) add(fn, a.str());
    }
    return true;
  }

 private:
  std::string where(clang::SourceLocation loc) const {
    auto p = sm_.getPresumedLoc(sm_.getExpansionLoc(loc));
    if (p.isInvalid()) return "<unknown>";
    return std::string(p.getFilename()) + ":" + std::to_string(p.getLine()) + ":" +
           std::to_string(p.getColumn());
  }
  void error(clang::SourceLocation loc, std::string message) {
    errors_.push_back({where(loc), std::move(message)});
  }
  std::string text(clang::SourceRange r) const {
    return clang::Lexer::getSourceText(clang::CharSourceRange::getTokenRange(r), sm_,
                                       ctx_.getLangOpts())
        .str();
  }

  // The `//` comment lines just before a parameter (Clang attaches no comment to a parameter):
  // the last comment before it, when only comment lines lie between the two.
  std::string param_doc(const clang::ParmVarDecl* pv) const {
    auto [fid, offset] = sm_.getDecomposedLoc(sm_.getExpansionLoc(pv->getBeginLoc()));
    const auto* comments = ctx_.Comments.getCommentsInFile(fid);
    if (!comments) return "";
    auto it = comments->lower_bound(offset);
    if (it == comments->begin()) return "";
    --it;
    llvm::StringRef between = sm_.getBufferData(fid).substr(it->first, offset - it->first);
    llvm::SmallVector<llvm::StringRef, 8> lines;
    between.split(lines, '\n');
    for (llvm::StringRef line : lines) {
      line = line.trim();
      if (!line.empty() && !line.startswith("//")) return "";
    }
    return it->second->getFormattedText(sm_, ctx_.getDiagnostics());
  }

  // Evaluates a parameter's default (so the generated code, outside the header's namespaces,
  // does not depend on names the header could see unqualified).
  bool set_default(const clang::ParmVarDecl* pv, clang::QualType canon, Param& p) {
    const clang::Expr* e = pv->getDefaultArg();
    if (p.kind == "str") {
      // `std::string mode = "sum"`: the literal inside the string's construction
      const clang::StringLiteral* lit = nullptr;
      for (const clang::Expr* x = e; x && !lit;) {
        x = x->IgnoreImplicit();
        if ((lit = llvm::dyn_cast<clang::StringLiteral>(x))) break;
        if (const auto* c = llvm::dyn_cast<clang::CXXConstructExpr>(x))
          x = c->getNumArgs() >= 1 ? c->getArg(0) : nullptr;
        else if (const auto* m = llvm::dyn_cast<clang::MaterializeTemporaryExpr>(x))
          x = m->getSubExpr();
        else if (const auto* b = llvm::dyn_cast<clang::CXXBindTemporaryExpr>(x))
          x = b->getSubExpr();
        else if (const auto* f = llvm::dyn_cast<clang::CXXFunctionalCastExpr>(x))
          x = f->getSubExpr();
        else
          x = nullptr;
      }
      if (!lit) return false;
      p.default_cpp = quoted(lit->getString().str());
      p.default_schema = quoted(lit->getString().str());
      return true;
    }
    if (p.kind == "bool") {
      bool b = false;
      if (!e->EvaluateAsBooleanCondition(b, ctx_)) return false;
      p.default_cpp = b ? "true" : "false";
      p.default_schema = b ? "True" : "False";
      return true;
    }
    if (p.kind == "float") {
      clang::Expr::EvalResult r;
      if (!e->EvaluateAsRValue(r, ctx_)) return false;
      double v = r.Val.isFloat() ? r.Val.getFloat().convertToDouble()
                 : r.Val.isInt() ? double(r.Val.getInt().getSExtValue())
                                 : NAN;
      if (std::isnan(v)) return false;
      char buf[32];
      for (int digits = 1; digits <= 17; ++digits) {  // the shortest text that reads back
        std::snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (std::strtod(buf, nullptr) == v) break;
      }
      p.default_cpp = p.default_schema = buf;
      if (p.default_cpp.find_first_of(".en") == std::string::npos) p.default_cpp += ".0";
      return true;
    }
    clang::Expr::EvalResult r;
    if (!e->EvaluateAsInt(r, ctx_)) return false;
    const llvm::APSInt v = r.Val.getInt();
    if (p.kind == "int") {
      p.default_cpp = p.default_schema = std::to_string(v.getExtValue());
      return true;
    }
    const auto* ed = canon->getAs<clang::EnumType>()->getDecl();  // choice or dtype
    for (const auto* c : ed->enumerators())
      if (llvm::APSInt::isSameValue(c->getInitVal(), v)) {
        p.default_cpp = p.enum_type + "::" + c->getNameAsString();
        p.default_schema = quoted(c->getNameAsString());
        return true;
      }
    return false;
  }

  void add(clang::FunctionDecl* fn, std::string ns) {
    Op op;
    op.ns = std::move(ns);
    op.name = fn->getNameAsString();
    op.qualified = "::" + fn->getQualifiedNameAsString();
    if (fn->getDescribedFunctionTemplate() || fn->isTemplateInstantiation())
      return error(fn->getLocation(), "operator '" + op.name +
                                          "' is a function template; an "
                                          "operator is a plain function (write one per type, each "
                                          "with its own name)");
    for (const Op& other : ops_)
      if (other.qualified == op.qualified)
        return error(fn->getLocation(), "operator '" + op.name + "' is declared again (also at " +
                                            other.file + ":" + std::to_string(other.line) +
                                            "); operators cannot be overloaded: give "
                                            "each its own name");
    auto p = sm_.getPresumedLoc(sm_.getExpansionLoc(fn->getLocation()));
    op.file = p.getFilename();
    op.line = p.getLine();
    if (const clang::RawComment* c = ctx_.getRawCommentForDeclNoCache(fn))
      op.doc = c->getFormattedText(sm_, ctx_.getDiagnostics());
    if (op.ns.empty() || op.ns.find_first_of(" :\"") != std::string::npos)
      return error(fn->getLocation(), "NEURON_OP takes the operators' namespace, an identifier (as "
                                      "in NEURON_OP(mylib)); got '" + op.ns + "'");
    op.outputs = output_count(fn->getReturnType());
    if (op.outputs < 0)
      return error(fn->getLocation(),
                   "operator '" + op.name + "' returns '" + fn->getReturnType().getAsString() +
                       "'; an operator returns nl::tensor or a std::tuple of nl::tensor");
    bool in_params = false;
    for (const clang::ParmVarDecl* pv : fn->parameters()) {
      clang::QualType t = pv->getType();
      std::string pname = pv->getNameAsString();
      if (pname.empty())
        return error(pv->getLocation(), "every argument of operator '" + op.name +
                                            "' needs a name (the operator's schema uses it)");
      if (is_tensor(t)) {
        if (in_params)
          return error(pv->getLocation(),
                       "tensor '" + pname + "' of operator '" + op.name +
                           "' comes after a parameter; the tensors come first, then the "
                           "parameters");
        op.inputs.push_back(pname);
        continue;
      }
      in_params = true;
      Param prm;
      prm.name = pname;
      prm.doc = param_doc(pv);
      clang::QualType base = t.getNonReferenceType().getUnqualifiedType();
      clang::QualType canon = base.getCanonicalType();
      prm.cpp_type = base.getAsString(ctx_.getPrintingPolicy());
      if (canon->isBooleanType()) {
        prm.kind = "bool";
      } else if (const auto* et = canon->getAs<clang::EnumType>()) {
        const clang::EnumDecl* ed = et->getDecl();
        prm.enum_type = "::" + ed->getQualifiedNameAsString();
        if (prm.enum_type == "::neuron::DType") {
          prm.kind = "dtype";
        } else {
          prm.kind = "choice";
          for (const auto* e : ed->enumerators()) prm.choices.push_back(e->getNameAsString());
        }
        prm.cpp_type = prm.enum_type;
      } else if (canon->isIntegerType()) {
        prm.kind = "int";
      } else if (canon->isRealFloatingType()) {
        prm.kind = "float";
      } else if (auto* rd = canon->getAsCXXRecordDecl();
                 rd && rd->isInStdNamespace() && rd->getName() == "basic_string") {
        prm.kind = "str";
        prm.cpp_type = "std::string";
      } else {
        return error(pv->getLocation(),
                     "parameter '" + pname + "' of operator '" + op.name + "' has type '" +
                         t.getAsString() +
                         "'; a parameter is a bool, an integer, a floating-point number, "
                         "std::string, neuron::DType or an enum");
      }
      if (pv->hasDefaultArg() && !pv->hasUnparsedDefaultArg() && !set_default(pv, canon, prm))
        return error(pv->getDefaultArgRange().getBegin(),
                     "the default of parameter '" + pname + "' of operator '" + op.name +
                         "' is not a constant neuron-opgen can evaluate");
      op.params.push_back(std::move(prm));
    }
    ops_.push_back(std::move(op));
  }

  clang::ASTContext& ctx_;
  clang::SourceManager& sm_;
  std::vector<Op>& ops_;
  std::vector<Error>& errors_;
};

class Action : public clang::ASTFrontendAction {
 public:
  Action(std::vector<Op>& ops, std::vector<Error>& errors) : ops_(ops), errors_(errors) {}
  std::unique_ptr<clang::ASTConsumer> CreateASTConsumer(clang::CompilerInstance& ci,
                                                        llvm::StringRef) override {
    ci.getFrontendOpts().SkipFunctionBodies = true;
    struct Consumer : clang::ASTConsumer {
      std::vector<Op>& ops;
      std::vector<Error>& errors;
      Consumer(std::vector<Op>& o, std::vector<Error>& e) : ops(o), errors(e) {}
      void HandleTranslationUnit(clang::ASTContext& ctx) override {
        Visitor(ctx, ops, errors).TraverseDecl(ctx.getTranslationUnitDecl());
      }
    };
    return std::make_unique<Consumer>(ops_, errors_);
  }

 private:
  std::vector<Op>& ops_;
  std::vector<Error>& errors_;
};

// The torch schema type of a parameter.
std::string schema_type(const Param& p) {
  if (p.kind == "choice" || p.kind == "dtype") return "str";
  return p.kind;
}

std::string param_code(const Param& p) {
  std::string doc = quoted(p.doc);
  if (p.kind == "choice") {
    std::string names;
    for (const auto& c : p.choices)
      names += (names.empty() ? "" : ", ") + std::string("{") + quoted(c) + ", " + p.enum_type +
               "::" + c + "}";
    // neuron::choice always has a default: a required enum parameter takes the first one
    std::string def = p.default_cpp.empty() ? p.enum_type + "::" + p.choices.front()
                                            : p.default_cpp;
    return "neuron::choice(" + quoted(p.name) + ", " + def + ", {" + names + "}, " + doc + ")";
  }
  std::string t = p.kind == "dtype" ? "::neuron::DType" : p.cpp_type;
  if (p.default_cpp.empty())
    return "neuron::param<" + t + ">(" + quoted(p.name) + ", " + doc + ")";
  // static_cast, not t(...): `unsigned int(3)` is no C++ expression
  return "neuron::param<" + t + ">(" + quoted(p.name) + ", static_cast<" + t + ">(" +
         p.default_cpp + "), " + doc + ")";
}

std::string torch_schema(const Op& op) {
  std::string s = op.name + "(";
  bool first = true;
  for (const auto& i : op.inputs) {
    s += (first ? "" : ", ") + std::string("Tensor ") + i;
    first = false;
  }
  for (const auto& p : op.params) {
    s += (first ? "" : ", ") + schema_type(p) + " " + p.name;
    if (!p.default_schema.empty()) s += "=" + p.default_schema;
    first = false;
  }
  s += ") -> ";
  if (op.outputs == 1) return s + "Tensor";
  s += "(";
  for (int i = 0; i < op.outputs; ++i) s += (i ? ", " : "") + std::string("Tensor");
  return s + ")";
}

void write_cpp(std::ostream& o, const std::vector<Op>& ops,
               const std::vector<std::string>& includes) {
  o << "// Generated by neuron-opgen: do not edit.\n";
  for (const auto& inc : includes) o << "#include " << quoted(inc) << "\n";
  o << "#include <neuron/registry.hpp>\n\n";
  o << "namespace neuron_opgen_generated {\n";
  for (const auto& op : ops) {
    // The registration's span (neuron.registry.info(name).span) is the operator's line.
    o << "#line " << op.line << " " << quoted(op.file) << "\n";
    o << "NEURON_KERNEL(" << op.name << ", " << op.qualified << ", " << quoted(op.doc)
      << ", neuron::inputs(";
    for (size_t i = 0; i < op.inputs.size(); ++i) o << (i ? ", " : "") << quoted(op.inputs[i]);
    o << ")";
    for (const auto& p : op.params) o << ",\n              " << param_code(p);
    o << ");\n";
  }
  o << "}  // namespace neuron_opgen_generated\n";
}

void write_schema(std::ostream& o, const std::vector<Op>& ops) {
  o << "{\"operators\": [";
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    o << (i ? ",\n  " : "\n  ") << "{\"namespace\": " << quoted(op.ns)
      << ", \"name\": " << quoted(op.name) << ", \"schema\": " << quoted(torch_schema(op))
      << ", \"outputs\": " << op.outputs << ", \"doc\": " << quoted(op.doc)
      << ", \"file\": " << quoted(op.file) << ", \"line\": " << op.line << ", \"inputs\": [";
    for (size_t j = 0; j < op.inputs.size(); ++j) o << (j ? ", " : "") << quoted(op.inputs[j]);
    o << "], \"params\": [";
    for (size_t j = 0; j < op.params.size(); ++j) {
      const Param& p = op.params[j];
      o << (j ? ", " : "") << "{\"name\": " << quoted(p.name) << ", \"kind\": " << quoted(p.kind)
        << ", \"default\": " << (p.default_cpp.empty() ? "null" : quoted(p.default_cpp)) << "}";
    }
    o << "]}";
  }
  o << "\n]}\n";
}

// The schema JSON as a C function of the library (quoted: the JSON's own escapes survive).
void write_library_entry(std::ostream& o, const std::vector<Op>& ops) {
  std::ostringstream js;
  write_schema(js, ops);
  o << "\n// Read by neuron.load_ops (python/neuron/oplib.py).\n"
    << "extern \"C\" __attribute__((visibility(\"default\"))) const char* "
       "neuron_op_library_schema() {\n  return " << quoted(js.str()) << ";\n}\n";
}

int usage() {
  std::cerr << "usage: neuron-opgen HEADER... -o OUT.cpp [--schema OUT.json] [--include NAME] "
               "[--namespace NS] [--library] -- COMPILER FLAGS...\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> headers;
  std::string out_cpp, out_schema, include, ns;
  bool library = false;
  std::vector<std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      flags.assign(argv + i + 1, argv + argc);
      break;
    }
    if ((a == "-o" || a == "--schema" || a == "--include" || a == "--namespace") &&
        i + 1 < argc) {
      (a == "-o"         ? out_cpp
       : a == "--schema" ? out_schema
       : a == "--include" ? include
                          : ns) = argv[++i];
    } else if (a == "--library") {
      library = true;
    } else if (!a.empty() && a[0] != '-') {
      headers.push_back(a);
    } else {
      return usage();
    }
  }
  if (headers.empty() || out_cpp.empty() || (!include.empty() && headers.size() > 1))
    return usage();
  const std::string header = headers.size() == 1 ? headers[0] : std::to_string(headers.size()) +
                                                                    " headers";
  flags.insert(flags.begin(), {"-xc++-header", "-std=c++20", "-fsyntax-only",
                               "-fparse-all-comments", "-Wno-everything"});
#ifdef NEURON_CLANG_RESOURCE_DIR
  flags.push_back("-resource-dir=" NEURON_CLANG_RESOURCE_DIR);
#endif
  clang::tooling::FixedCompilationDatabase db(".", flags);
  clang::tooling::ClangTool tool(db, headers);
  std::vector<Op> ops;
  std::vector<Error> errors;
  struct Factory : clang::tooling::FrontendActionFactory {
    std::vector<Op>& ops;
    std::vector<Error>& errors;
    Factory(std::vector<Op>& o, std::vector<Error>& e) : ops(o), errors(e) {}
    std::unique_ptr<clang::FrontendAction> create() override {
      return std::make_unique<Action>(ops, errors);
    }
  } factory(ops, errors);
  if (tool.run(&factory) != 0) {
    std::cerr << "neuron-opgen: " << header << " does not compile (the errors above)\n";
    return 1;
  }
  // A header included by another one is read twice: its operators count once.
  std::vector<Op> unique;
  for (auto& op : ops) {
    bool seen = false;
    for (const auto& u : unique) seen = seen || u.qualified == op.qualified;
    if (!seen) unique.push_back(std::move(op));
  }
  ops = std::move(unique);
  for (const auto& op : ops)
    if (!ns.empty() && op.ns != ns)
      errors.push_back({op.file + ":" + std::to_string(op.line),
                        "operator '" + op.name + "' is marked NEURON_OP(" + op.ns +
                            ") but this library's NAMESPACE is '" + ns + "'"});
  std::vector<std::string> seen_errors;  // an error in a shared header is reported once
  for (const auto& e : errors) {
    std::string line = e.where + ": error: " + e.message;
    bool dup = false;
    for (const auto& s : seen_errors) dup = dup || s == line;
    if (!dup) std::cerr << line << "\n", seen_errors.push_back(line);
  }
  if (!errors.empty()) return 1;
  if (ops.empty()) {
    std::cerr << header << ": error: no kernel is marked NEURON_OP(namespace)\n";
    return 1;
  }
  std::ofstream cpp(out_cpp);
  write_cpp(cpp, ops, include.empty() ? headers : std::vector<std::string>{include});
  if (library) write_library_entry(cpp, ops);
  if (!cpp) {
    std::cerr << "neuron-opgen: cannot write " << out_cpp << "\n";
    return 1;
  }
  if (!out_schema.empty()) {
    std::ofstream js(out_schema);
    write_schema(js, ops);
    if (!js) {
      std::cerr << "neuron-opgen: cannot write " << out_schema << "\n";
      return 1;
    }
  }
  return 0;
}
