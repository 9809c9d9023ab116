#include "template/jinja_eval.h"

#include <algorithm>

#include "template/jinja_builtins.h"
#include "template/jinja_error.h"
#include "template/jinja_ops.h"
#include "template/jinja_parser.h"

namespace strata::tmpl {

// Variables visible at one level: the render's (root), a for-loop iteration's, a macro call's.
// Lookup walks outwards; assignment writes to the innermost scope, as jinja2 scopes `set`.
struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<int, Value>> vars;

    explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}

    const Value* find(int slot) const {
        for (const Scope* s = this; s; s = s->parent.get()) {
            for (const auto& [k, v] : s->vars)
                if (k == slot) return &v;
        }
        return nullptr;
    }
    void set(int slot, Value v) {
        for (auto& [k, x] : vars) {
            if (k == slot) {
                x = std::move(v);
                return;
            }
        }
        vars.emplace_back(slot, std::move(v));
    }
};

namespace {

constexpr const char* kLimitError = "ResourceLimitError";

// A macro, or the `caller` of a call block: its definition and the scope it was defined in.
// The scope is held weakly: a macro is usually stored in the very scope it closes over, and a
// strong reference would make a cycle that outlives the render.
class Macro : public Object {
public:
    Macro(std::shared_ptr<const MacroDef> def, const std::shared_ptr<Scope>& closure) : def_(std::move(def)), closure_(closure) {}
    std::string type_name() const override { return "Macro"; }
    bool callable() const override { return true; }
    Value call(Interpreter& interp, const CallArgs& args) const override {
        const std::shared_ptr<Scope> closure = closure_.lock();
        if (!closure) fail("TemplateRuntimeError", "macro '" + def_->name + "' called after the scope that defined it ended");
        return interp.call_macro(*def_, closure, args);
    }
    Value attribute(std::string_view name) const override {
        if (name == "name") return Value(def_->name);
        return Object::attribute(name);
    }
    std::string to_str() const override { return "<Macro '" + def_->name + "'>"; }

private:
    std::shared_ptr<const MacroDef> def_;
    std::weak_ptr<Scope> closure_;
};

// The `loop` variable of a for loop. One object per loop, advanced in place, as jinja2's
// LoopContext is; it owns the items so that it stays valid if a template keeps it.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
public:
    explicit LoopObject(ListData items) : items_(std::move(items)) {}
    const ListData& items() const { return items_; }
    void advance(size_t index) { index_ = index; }

    std::string type_name() const override { return "LoopContext"; }
    std::string to_str() const override {
        return "<LoopContext " + std::to_string(index_ + 1) + "/" + std::to_string(items_.size()) + ">";
    }
    Value attribute(std::string_view name) const override {
        const auto n = static_cast<int64_t>(items_.size());
        const auto i = static_cast<int64_t>(index_);
        if (name == "index") return Value(i + 1);
        if (name == "index0") return Value(i);
        if (name == "revindex") return Value(n - i);
        if (name == "revindex0") return Value(n - i - 1);
        if (name == "first") return Value(i == 0);
        if (name == "last") return Value(i == n - 1);
        if (name == "length") return Value(n);
        if (name == "depth") return Value(int64_t{1});
        if (name == "depth0") return Value(int64_t{0});
        if (name == "previtem") return i > 0 ? items_[index_ - 1] : Value::undefined("there is no previous item");
        if (name == "nextitem") return i + 1 < n ? items_[index_ + 1] : Value::undefined("there is no next item");
        if (name == "cycle" || name == "changed") return Value::object(std::make_shared<LoopMethod>(shared_from_this(), name));
        return Object::attribute(name);
    }

private:
    class LoopMethod : public Object {
    public:
        LoopMethod(std::shared_ptr<const LoopObject> loop, std::string_view name) : loop_(std::move(loop)), name_(name) {}
        std::string type_name() const override { return "method"; }
        bool callable() const override { return true; }
        Value call(Interpreter&, const CallArgs& args) const override {
            if (name_ == "cycle") {
                if (args.positional.empty()) type_error("no items for cycling given");
                return args.positional[loop_->index_ % args.positional.size()];
            }
            const Value current = Value::list(args.positional);
            if (loop_->has_last_changed_ && equals(loop_->last_changed_, current)) return Value(false);
            loop_->last_changed_ = current;
            loop_->has_last_changed_ = true;
            return Value(true);
        }

    private:
        std::shared_ptr<const LoopObject> loop_;
        std::string name_;
    };

    ListData items_;
    size_t index_ = 0;
    mutable Value last_changed_;
    mutable bool has_last_changed_ = false;
};

const char* cmp_symbol(CmpOp op) {
    switch (op) {
        case CmpOp::Lt: return "<";
        case CmpOp::Le: return "<=";
        case CmpOp::Gt: return ">";
        case CmpOp::Ge: return ">=";
        default: return "==";
    }
}

bool orderable(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) return true;
    if (a.is_string() && b.is_string()) return true;
    return a.is_sequence_data() && a.kind() == b.kind();
}

}  // namespace

// ---- Template -------------------------------------------------------------------------------

Template::Template(std::string_view source, std::string where, const LexOptions& options)
    : program_(std::make_shared<Program>(parse_template(source, where, options))) {}

std::string Template::render(const Variables& variables, const RenderLimits& limits) const {
    Interpreter interp(*program_, limits);
    return interp.render(variables);
}

// ---- Interpreter ----------------------------------------------------------------------------

namespace {
uintptr_t stack_position() { return reinterpret_cast<uintptr_t>(__builtin_frame_address(0)); }
}  // namespace

struct Interpreter::DepthGuard {
    Interpreter& in;
    explicit DepthGuard(Interpreter& interp) : in(interp) {
        if (++in.depth_ > in.limits_.max_depth) fail("RecursionError", "maximum recursion depth exceeded");
        const uintptr_t here = stack_position();
        const uintptr_t used = here < in.stack_base_ ? in.stack_base_ - here : here - in.stack_base_;
        if (used > in.limits_.max_stack_bytes) fail("RecursionError", "maximum recursion depth exceeded (stack)");
    }
    ~DepthGuard() { --in.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
};

Interpreter::Interpreter(const Program& program, const RenderLimits& limits) : program_(program), limits_(limits) {
    globals_.resize(program.slot_names.size(), nullptr);
    for (size_t k = 0; k < program.slot_names.size(); ++k) {
        globals_[k] = find_global(program.slot_names[k]);
        if (program.slot_names[k] == "loop") loop_slot_ = static_cast<int>(k);
    }
}

// Namespaces are the only mutable values, so the only way to build a reference cycle (a
// namespace holding itself, or a macro whose scope it sits in); emptying them ends the cycles.
Interpreter::~Interpreter() {
    for (const Value& ns : namespaces_) ns.namespace_data().entries.clear();
}

void Interpreter::track_namespace(const Value& ns) { namespaces_.push_back(ns); }

std::string Interpreter::render(const Variables& variables) {
    auto root = std::make_shared<Scope>(nullptr);
    for (const auto& [name, value] : variables) {
        const auto it = std::find(program_.slot_names.begin(), program_.slot_names.end(), name);
        if (it != program_.slot_names.end()) root->set(static_cast<int>(it - program_.slot_names.begin()), value);
    }
    std::string out;
    out_ = &out;
    stack_base_ = stack_position();
    try {
        exec_body(program_.body, root);
    } catch (const RuntimeFailure& f) {
        TemplateError::Kind kind = TemplateError::Kind::Runtime;
        if (f.type() == "TemplateError") kind = TemplateError::Kind::Raised;
        else if (f.type() == kLimitError || f.type() == "RecursionError" || f.type() == "MemoryError")
            kind = TemplateError::Kind::Limit;
        throw TemplateError(kind, f.type(), f.what(), program_.where, line_, 0);
    }
    return out;
}

void Interpreter::charge(uint64_t n) {
    steps_ += n;
    if (steps_ > limits_.max_steps)
        fail(kLimitError, "template exceeded its work budget of " + std::to_string(limits_.max_steps) + " steps");
}

void Interpreter::charge_built(const Value& v) {
    const size_t size = v.is_string() ? v.str().size() : v.is_sequence_data() ? v.items().size() : 0;
    if (size > kMaxBuiltSize) fail("MemoryError", "value too large (over " + std::to_string(kMaxBuiltSize) + " bytes or items)");
    if (v.is_string()) charge(1 + size / 256);
    else if (v.is_sequence_data()) charge(1 + size / 16);
}

void Interpreter::write(std::string_view text) {
    out_->append(text);
    if (out_->size() > limits_.max_output)
        fail(kLimitError, "template output exceeded " + std::to_string(limits_.max_output) + " bytes");
}

void Interpreter::write_value(const Value& v) {
    if (v.is_string()) {
        write(v.str());
        return;
    }
    std::string s;
    append_str(s, v);
    write(s);
}

std::string Interpreter::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    try {
        exec_body(body, scope);
    } catch (...) {
        out_ = saved;
        throw;
    }
    out_ = saved;
    return buffer;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
    for (const auto& s : body) {
        const Flow f = exec(*s, scope);
        if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    DepthGuard guard(*this);
    line_ = s.line;
    switch (s.kind) {
        case StmtKind::Text: write(s.text); break;
        case StmtKind::Output: write_value(eval(*s.expr, scope)); break;
        case StmtKind::If: {
            for (const auto& [cond, body] : s.branches) {
                if (eval(*cond, scope).truthy()) return exec_body(body, scope);
            }
            return exec_body(s.else_body, scope);
        }
        case StmtKind::For: exec_for(s, scope); break;
        case StmtKind::Set: assign(s.target, eval(*s.expr, scope), scope); break;
        case StmtKind::SetBlock: {
            Value captured(capture(s.body, scope));
            if (s.filters) captured = eval_filter(*s.filters, scope, &captured);
            assign(s.target, captured, scope);
            break;
        }
        case StmtKind::Macro: scope->set(s.target.slot, Value::object(std::make_shared<Macro>(s.macro, scope))); break;
        case StmtKind::CallBlock: {
            const Expr& call = *s.expr;
            Value callee = eval(*call.children[0], scope);
            CallArgs args = eval_args(call.call, scope);
            args.named.emplace_back("caller", Value::object(std::make_shared<Macro>(s.macro, scope)));
            write_value(this->call(callee, args));
            break;
        }
        case StmtKind::FilterBlock: {
            const Value captured(capture(s.body, scope));
            write_value(eval_filter(*s.filters, scope, &captured));
            break;
        }
        case StmtKind::Break: return Flow::Break;
        case StmtKind::Continue: return Flow::Continue;
        case StmtKind::With: {
            auto inner = std::make_shared<Scope>(scope);
            std::vector<Value> values;
            for (const auto& [target, expr] : s.assignments) values.push_back(eval(*expr, scope));
            for (size_t k = 0; k < values.size(); ++k) assign(s.assignments[k].first, values[k], inner);
            return exec_body(s.body, inner);
        }
        case StmtKind::Scope: return exec_body(s.body, scope);
    }
    return Flow::Normal;
}

void Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    const Value iterable = eval(*s.expr, scope);
    ListData items = iterate(iterable);
    charge(1 + items.size() / 64);
    if (s.loop_filter) {
        // The filter sees the loop target but not `loop` (jinja2 filters before counting).
        ListData kept;
        for (Value& item : items) {
            charge(1);
            auto probe = std::make_shared<Scope>(scope);
            assign(s.target, item, probe);
            if (eval(*s.loop_filter, probe).truthy()) kept.push_back(std::move(item));
        }
        items = std::move(kept);
    }
    if (items.empty()) {
        auto inner = std::make_shared<Scope>(scope);
        exec_body(s.else_body, inner);
        return;
    }
    auto loop = std::make_shared<LoopObject>(std::move(items));
    const Value loop_value = Value::object(loop);
    const ListData& loop_items = loop->items();
    for (size_t k = 0; k < loop_items.size(); ++k) {
        charge(1);
        loop->advance(k);
        auto inner = std::make_shared<Scope>(scope);
        if (loop_slot_ >= 0) inner->set(loop_slot_, loop_value);
        assign(s.target, loop_items[k], inner);
        if (exec_body(s.body, inner) == Flow::Break) break;
    }
}

void Interpreter::assign(const Target& t, const Value& v, const std::shared_ptr<Scope>& scope) {
    switch (t.kind) {
        case Target::Kind::Name: scope->set(t.slot, v); return;
        case Target::Kind::Tuple: {
            const ListData items = iterate(v);
            if (items.size() > t.items.size())
                fail("ValueError", "too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
            if (items.size() < t.items.size())
                fail("ValueError", "not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
                                       std::to_string(items.size()) + ")");
            for (size_t k = 0; k < items.size(); ++k) assign(t.items[k], items[k], scope);
            return;
        }
        case Target::Kind::NamespaceAttr: {
            const Value ns = lookup(t.slot, t.name, scope);
            if (!ns.is_namespace()) fail("TemplateRuntimeError", "cannot assign attribute on non-namespace object");
            ns.namespace_data().set(Value(t.attr), v);
            return;
        }
    }
}

Value Interpreter::lookup(int slot, const std::string& name, const std::shared_ptr<Scope>& scope) const {
    if (const Value* v = scope->find(slot)) return *v;
    if (const Value* g = globals_[static_cast<size_t>(slot)]) return *g;
    return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
    if (callee.is_undefined()) raise_undefined(callee);
    if (!callee.is_object() || !callee.obj().callable()) type_error("'" + type_name(callee) + "' object is not callable");
    return callee.obj().call(*this, args);
}

Value Interpreter::apply_filter(std::string_view name, const Value& subject, const CallArgs& args) {
    const FilterFn f = find_filter(name);
    if (!f) fail("TemplateRuntimeError", "No filter named '" + std::string(name) + "' found.");
    return f(*this, subject, args);
}

bool Interpreter::apply_test(std::string_view name, const Value& subject, const CallArgs& args) {
    const TestFn t = find_test(name);
    if (!t) fail("TemplateRuntimeError", "No test named '" + std::string(name) + "' found.");
    return t(*this, subject, args);
}

Value Interpreter::call_macro(const MacroDef& def, const std::shared_ptr<Scope>& closure, const CallArgs& args) {
    DepthGuard guard(*this);
    charge(1);
    auto scope = std::make_shared<Scope>(closure);
    const size_t n_params = def.params.size();
    std::vector<bool> bound(n_params, false);
    ListData extra_positional;
    for (size_t k = 0; k < args.positional.size(); ++k) {
        if (k < n_params) {
            scope->set(def.params[k].first, args.positional[k]);
            bound[k] = true;
        } else {
            extra_positional.push_back(args.positional[k]);
        }
    }
    if (!extra_positional.empty() && !def.uses_varargs)
        type_error("macro '" + def.name + "' takes not more than " + std::to_string(n_params) + " argument(s)");
    DictData extra_named;
    Value caller_value;
    for (const auto& named : args.named) {
        const std::string& name = named.first;
        const Value& value = named.second;
        const auto it = std::find_if(def.params.begin(), def.params.end(), [&](const auto& p) { return p.second == name; });
        if (it != def.params.end()) {
            const auto k = static_cast<size_t>(it - def.params.begin());
            if (bound[k]) type_error("macro '" + def.name + "' got multiple values for argument '" + name + "'");
            scope->set(it->first, value);
            bound[k] = true;
        } else if (name == "caller" && def.uses_caller) {
            caller_value = value;
        } else if (def.uses_kwargs) {
            extra_named.set(Value(name), value);
        } else {
            type_error("macro '" + def.name + "' takes no keyword argument '" + name + "'");
        }
    }
    // Defaults are evaluated in the macro's scope, so a default may refer to earlier parameters.
    const size_t first_default = n_params - def.defaults.size();
    for (size_t k = 0; k < n_params; ++k) {
        if (bound[k]) continue;
        if (k >= first_default) scope->set(def.params[k].first, eval(*def.defaults[k - first_default], scope));
        else scope->set(def.params[k].first, Value::undefined("parameter '" + def.params[k].second + "' was not provided"));
    }
    auto set_special = [&](const char* name, Value v) {
        const auto it = std::find(program_.slot_names.begin(), program_.slot_names.end(), name);
        if (it != program_.slot_names.end()) scope->set(static_cast<int>(it - program_.slot_names.begin()), std::move(v));
    };
    if (def.uses_varargs) set_special("varargs", Value::tuple(std::move(extra_positional)));
    if (def.uses_kwargs) set_special("kwargs", Value::dict(std::move(extra_named)));
    if (def.uses_caller)
        set_special("caller", caller_value.is_undefined() ? Value::undefined("No caller defined") : caller_value);
    const int saved_line = line_;
    Value result(capture(def.body, scope));
    line_ = saved_line;
    return result;
}

CallArgs Interpreter::eval_args(const CallSpec& spec, const std::shared_ptr<Scope>& scope) {
    CallArgs args;
    args.positional.reserve(spec.args.size());
    for (const auto& a : spec.args) args.positional.push_back(eval(*a, scope));
    if (spec.star_args) {
        for (Value& v : iterate(eval(*spec.star_args, scope))) args.positional.push_back(std::move(v));
    }
    for (const auto& [name, expr] : spec.kwargs) args.named.emplace_back(name, eval(*expr, scope));
    if (spec.star_kwargs) {
        const Value d = eval(*spec.star_kwargs, scope);
        if (!d.is_dict()) type_error("argument after ** must be a mapping, not " + type_name(d));
        for (const auto& [k, v] : d.dict_data().entries) {
            if (!k.is_string()) type_error("keywords must be strings");
            args.named.emplace_back(k.str(), v);
        }
    }
    return args;
}

Value Interpreter::eval_filter(const Expr& e, const std::shared_ptr<Scope>& scope, const Value* subject) {
    // A filter with no operand of its own reads the subject of its chain (filter blocks); a
    // chain that reaches here without one (e.g. a filter after `{% set x |`) is an error, not UB.
    if (!e.children[0] && subject == nullptr) fail("TemplateRuntimeError", "filter '" + e.name + "' has nothing to filter");
    const Value input = e.children[0] ? eval(*e.children[0], scope) : *subject;
    line_ = e.line;
    const CallArgs args = eval_args(e.call, scope);
    if (!e.filter) fail("TemplateRuntimeError", "No filter named '" + e.name + "' found.");
    Value result = e.filter(*this, input, args);
    charge_built(result);
    return result;
}

bool Interpreter::compare(CmpOp op, const Value& a, const Value& b) {
    switch (op) {
        case CmpOp::Eq: return equals(a, b);
        case CmpOp::Ne: return !equals(a, b);
        case CmpOp::In: return contains(b, a);
        case CmpOp::NotIn: return !contains(b, a);
        default: break;
    }
    if (a.is_undefined()) raise_undefined(a);
    if (b.is_undefined()) raise_undefined(b);
    if (!orderable(a, b))
        type_error(std::string("'") + cmp_symbol(op) + "' not supported between instances of '" + type_name(a) + "' and '" +
                   type_name(b) + "'");
    switch (op) {
        case CmpOp::Lt: return less_than(a, b);
        case CmpOp::Gt: return less_than(b, a);
        case CmpOp::Le: return !less_than(b, a);
        default: return !less_than(a, b);
    }
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
    DepthGuard guard(*this);
    line_ = e.line;
    switch (e.kind) {
        case ExprKind::Literal: return e.literal;
        case ExprKind::Name: return lookup(e.slot, e.name, scope);
        case ExprKind::GetAttr: return get_attr(eval(*e.children[0], scope), e.name);
        case ExprKind::GetItem: {
            const Value obj = eval(*e.children[0], scope);
            return get_item(obj, eval(*e.children[1], scope));
        }
        case ExprKind::Slice: {
            const Value obj = eval(*e.children[0], scope);
            Value parts[3];
            for (size_t k = 0; k < 3; ++k)
                if (e.children[k + 1]) parts[k] = eval(*e.children[k + 1], scope);
            Value result = slice(obj, parts[0], parts[1], parts[2]);
            charge_built(result);
            return result;
        }
        case ExprKind::Call: {
            const Value callee = eval(*e.children[0], scope);
            const CallArgs args = eval_args(e.call, scope);
            line_ = e.line;
            Value result = call(callee, args);
            charge_built(result);
            return result;
        }
        case ExprKind::Filter: return eval_filter(e, scope, nullptr);
        case ExprKind::Test: {
            const Value subject = eval(*e.children[0], scope);
            const CallArgs args = eval_args(e.call, scope);
            line_ = e.line;
            if (!e.test) fail("TemplateRuntimeError", "No test named '" + e.name + "' found.");
            return Value(e.test(*this, subject, args));
        }
        case ExprKind::Not: return Value(!eval(*e.children[0], scope).truthy());
        case ExprKind::Neg: return negate(eval(*e.children[0], scope));
        case ExprKind::Pos: return unary_plus(eval(*e.children[0], scope));
        case ExprKind::Binary: {
            const Value a = eval(*e.children[0], scope);
            const Value b = eval(*e.children[1], scope);
            line_ = e.line;
            Value result = binary_op(e.bin_op, a, b);
            charge_built(result);
            return result;
        }
        case ExprKind::Concat: {
            std::string out;
            for (const auto& c : e.children) {
                append_str(out, eval(*c, scope));
                if (out.size() > kMaxBuiltSize)
                    fail("MemoryError", "value too large (over " + std::to_string(kMaxBuiltSize) + " bytes)");
            }
            Value result(std::move(out));
            charge_built(result);
            return result;
        }
        case ExprKind::Compare: {
            Value left = eval(*e.children[0], scope);
            for (size_t k = 0; k < e.cmp_ops.size(); ++k) {
                Value right = eval(*e.children[k + 1], scope);
                line_ = e.line;
                if (!compare(e.cmp_ops[k], left, right)) return Value(false);
                left = std::move(right);
            }
            return Value(true);
        }
        case ExprKind::And: {
            Value left = eval(*e.children[0], scope);
            if (!left.truthy()) return left;
            return eval(*e.children[1], scope);
        }
        case ExprKind::Or: {
            Value left = eval(*e.children[0], scope);
            if (left.truthy()) return left;
            return eval(*e.children[1], scope);
        }
        case ExprKind::CondExpr: {
            if (eval(*e.children[0], scope).truthy()) return eval(*e.children[1], scope);
            if (e.children[2]) return eval(*e.children[2], scope);
            return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                    " evaluated to false and no else section was defined.");
        }
        case ExprKind::ListLit:
        case ExprKind::TupleLit: {
            ListData items;
            items.reserve(e.children.size());
            for (const auto& c : e.children) items.push_back(eval(*c, scope));
            return e.kind == ExprKind::ListLit ? Value::list(std::move(items)) : Value::tuple(std::move(items));
        }
        case ExprKind::DictLit: {
            DictData d;
            for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
                Value key = eval(*e.children[k], scope);
                if (!(key.is_string() || key.is_number() || key.is_none() || key.kind() == Kind::Tuple))
                    type_error("unhashable type: '" + type_name(key) + "'");
                d.set(std::move(key), eval(*e.children[k + 1], scope));
            }
            return Value::dict(std::move(d));
        }
    }
    return Value();
}

}  // namespace strata::tmpl
