// The template interpreter: renders a parsed Program with jinja2's scoping (a for loop body and
// a macro body each get their own scope; `set` elsewhere assigns in the enclosing one), Python
// value semantics and the limits that keep an untrusted template from running away.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"
#include "template/jinja_value.h"

namespace strata::tmpl {

struct RenderLimits {
    size_t max_output = size_t{64} << 20;  // bytes of rendered text (also per captured block)
    // Work units: one per loop iteration, macro call or filter element, one per 256 bytes of
    // string built by an operator or filter.
    uint64_t max_steps = 10'000'000;
    int max_depth = 1500;  // nested evaluation frames, macro recursion included
    // Machine stack a render may use below where it started: the frame count above cannot know
    // how large frames are (debug and sanitizer builds make them several times larger).
    size_t max_stack_bytes = size_t{2} << 20;
};

// Variables a render sees, in addition to the globals (range, namespace, raise_exception, ...).
using Variables = std::vector<std::pair<std::string, Value>>;

// A parsed template. Parse once, render many times; rendering is const and thread-safe.
class Template {
public:
    // Throws TemplateError (Syntax); `where` names the template in messages.
    explicit Template(std::string_view source, std::string where = "template", const LexOptions& options = {});

    // Throws TemplateError (Runtime, Raised or Limit).
    std::string render(const Variables& variables, const RenderLimits& limits = {}) const;

    const std::string& where() const { return program_->where; }

private:
    std::shared_ptr<const Program> program_;
};

struct Scope;

// One render in progress. Builtins receive it to call back into the template (macros passed to
// filters, filters and tests named by string) and to charge their work to the budget.
class Interpreter {
public:
    Interpreter(const Program& program, const RenderLimits& limits);
    ~Interpreter();
    Interpreter(const Interpreter&) = delete;
    Interpreter& operator=(const Interpreter&) = delete;

    std::string render(const Variables& variables);

    Value call(const Value& callee, const CallArgs& args);
    Value apply_filter(std::string_view name, const Value& subject, const CallArgs& args);
    bool apply_test(std::string_view name, const Value& subject, const CallArgs& args);
    // Charges `n` work units; throws when the budget is spent.
    void charge(uint64_t n);
    int current_line() const { return line_; }

    // Used by the Macro object.
    Value call_macro(const MacroDef& def, const std::shared_ptr<Scope>& closure, const CallArgs& args);
    // Every namespace() made during the render, emptied at the end to break reference cycles.
    void track_namespace(const Value& ns);

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
    Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
    void exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope);
    Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
    Value eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* subject);
    CallArgs eval_args(const CallSpec& spec, const std::shared_ptr<Scope>& scope);
    Value lookup(int slot, const std::string& name, const std::shared_ptr<Scope>& scope) const;
    void assign(const Target& t, const Value& v, const std::shared_ptr<Scope>& scope);
    std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
    void write(std::string_view text);
    void write_value(const Value& v);
    void charge_built(const Value& v);
    bool compare(CmpOp op, const Value& a, const Value& b);

    struct DepthGuard;

    const Program& program_;
    RenderLimits limits_;
    std::vector<const Value*> globals_;  // by slot
    std::vector<Value> namespaces_;
    int loop_slot_ = -1;
    std::string* out_ = nullptr;
    uint64_t steps_ = 0;
    int depth_ = 0;
    uintptr_t stack_base_ = 0;
    int line_ = 0;
};

}  // namespace strata::tmpl
