#include "template/jinja_parser.h"

#include <initializer_list>
#include <optional>
#include <unordered_map>

#include "template/jinja_builtins.h"
#include "template/jinja_error.h"

namespace strata::tmpl {

namespace {

class Parser {
public:
    Parser(std::vector<Token> tokens, Program& program) : toks_(std::move(tokens)), prog_(program) {}

    Body parse_all() {
        Body body = parse_body({});
        if (cur().kind != Tok::Eof) fail_here("unexpected '" + describe(cur()) + "'");
        return body;
    }

private:
    // ---- token stream -------------------------------------------------------------------------

    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t ahead = 1) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
    const Token& advance() {
        const Token& t = toks_[pos_];
        if (pos_ + 1 < toks_.size()) ++pos_;
        return t;
    }
    bool is_op(std::string_view op) const { return cur().kind == Tok::Op && cur().text == op; }
    bool is_name(std::string_view name) const { return cur().kind == Tok::Name && cur().text == name; }
    bool skip_op(std::string_view op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!is_name(name)) return false;
        advance();
        return true;
    }

    static std::string describe(const Token& t) {
        switch (t.kind) {
            case Tok::Name:
            case Tok::Op: return t.text;
            case Tok::String: return "string";
            default: return token_description(t.kind);
        }
    }

    [[noreturn]] void fail_at(const Token& t, const std::string& message) const {
        throw TemplateError(TemplateError::Kind::Syntax, "TemplateSyntaxError", message, prog_.where, t.line, t.column);
    }
    [[noreturn]] void fail_here(const std::string& message) const { fail_at(cur(), message); }

    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_here("expected token '" + std::string(op) + "', got '" + describe(cur()) + "'");
    }
    std::string expect_name() {
        if (cur().kind != Tok::Name) fail_here("expected token 'name', got '" + describe(cur()) + "'");
        return advance().text;
    }
    void expect_name(std::string_view name) {
        if (!skip_name(name)) fail_here("expected token '" + std::string(name) + "', got '" + describe(cur()) + "'");
    }
    void expect(Tok kind) {
        if (cur().kind != kind)
            fail_here(std::string("expected token '") + token_description(kind) + "', got '" + describe(cur()) + "'");
        advance();
    }

    // Bounds recursion: every nesting level of the grammar passes through one of these.
    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxParseDepth) p.fail_here("template nested too deeply");
        }
        ~DepthGuard() { --p.depth_; }
        DepthGuard(const DepthGuard&) = delete;
        DepthGuard& operator=(const DepthGuard&) = delete;
    };

    int slot_of(const std::string& name) {
        const auto it = slots_.find(name);
        if (it != slots_.end()) return it->second;
        const int slot = static_cast<int>(prog_.slot_names.size());
        prog_.slot_names.push_back(name);
        slots_.emplace(name, slot);
        return slot;
    }

    // Every child goes through here so that each node knows the depth of its tree: chains such
    // as `a + b + c ...` or `x|f|g ...` grow the tree without recursing in the parser.
    void add_child(Expr& parent, ExprPtr child) {
        if (child) raise_depth(parent, child->depth + 1);
        parent.children.push_back(std::move(child));
    }
    void add_call_depth(Expr& e) {
        for (const auto& a : e.call.args) raise_depth(e, a->depth + 1);
        for (const auto& [k, a] : e.call.kwargs) raise_depth(e, a->depth + 1);
        if (e.call.star_args) raise_depth(e, e.call.star_args->depth + 1);
        if (e.call.star_kwargs) raise_depth(e, e.call.star_kwargs->depth + 1);
    }
    void raise_depth(Expr& e, int depth) {
        if (depth > kMaxExprDepth) fail_here("expression nested too deeply");
        if (depth > e.depth) e.depth = depth;
    }

    ExprPtr make(ExprKind kind, int line) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->line = line;
        return e;
    }

    // ---- statements ---------------------------------------------------------------------------

    // Statements up to (not including) a block tag named in `end_tags`; the cursor is left on
    // that tag's name. With no end tags, up to the end of the template.
    Body parse_body(std::initializer_list<std::string_view> end_tags) {
        DepthGuard guard(*this);
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.kind == Tok::Eof) {
                if (end_tags.size() == 0) return body;
                fail_here("Unexpected end of template. Jinja was looking for the following tags: " + tag_list(end_tags) + "." +
                          innermost_block());
            }
            if (t.kind == Tok::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Text;
                s->line = t.line;
                s->text = t.text;
                body.push_back(std::move(s));
                advance();
            } else if (t.kind == Tok::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->kind = StmtKind::Output;
                s->line = t.line;
                advance();
                s->expr = parse_tuple(true, false);
                expect(Tok::VarEnd);
                body.push_back(std::move(s));
            } else if (t.kind == Tok::BlockBegin) {
                const Token& name = peek();
                if (name.kind != Tok::Name) fail_at(name, "tag name expected");
                for (std::string_view end : end_tags) {
                    if (name.text == end) {
                        advance();
                        return body;
                    }
                }
                advance();
                body.push_back(parse_statement(end_tags));
            } else {
                fail_here("unexpected '" + describe(t) + "'");
            }
        }
    }

    static std::string tag_list(std::initializer_list<std::string_view> tags) {
        std::string out;
        for (std::string_view t : tags) out += (out.empty() ? "'" : " or '") + std::string(t) + "'";
        return out;
    }

    // The body of a block statement: `%}`, statements, the end tag (consumed with its `%}`
    // when `drop_end` is set, else the cursor stays on the end tag's name).
    Body block_body(std::initializer_list<std::string_view> end_tags, bool drop_end = true) {
        expect(Tok::BlockEnd);
        Body body = parse_body(end_tags);
        if (drop_end) {
            advance();
            expect(Tok::BlockEnd);
        }
        return body;
    }

    std::string innermost_block() const {
        if (open_blocks_.empty()) return "";
        return " The innermost block that needs to be closed is '" + open_blocks_.back() + "'.";
    }

    // Tracks the innermost open block for error messages.
    struct OpenBlock {
        Parser& p;
        OpenBlock(Parser& parser, const std::string& tag) : p(parser) { p.open_blocks_.push_back(tag); }
        ~OpenBlock() { p.open_blocks_.pop_back(); }
        OpenBlock(const OpenBlock&) = delete;
        OpenBlock& operator=(const OpenBlock&) = delete;
    };

    StmtPtr parse_statement(std::initializer_list<std::string_view> enclosing_end_tags) {
        const Token& t = cur();
        auto s = std::make_unique<Stmt>();
        s->line = t.line;
        const std::string tag = t.text;
        advance();
        const bool is_known = tag == "for" || tag == "if" || tag == "set" || tag == "macro" || tag == "call" || tag == "filter" ||
                              tag == "with" || tag == "generation";
        std::optional<OpenBlock> open;
        if (is_known) open.emplace(*this, tag);
        if (tag == "for") parse_for(*s);
        else if (tag == "if") parse_if(*s);
        else if (tag == "set") parse_set(*s);
        else if (tag == "macro") parse_macro(*s);
        else if (tag == "call") parse_call_block(*s);
        else if (tag == "filter") parse_filter_block(*s);
        else if (tag == "with") parse_with(*s);
        else if (tag == "break" || tag == "continue") {
            if (loop_depth_ == 0) fail_at(t, "'" + tag + "' outside loop");
            s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
            expect(Tok::BlockEnd);
        } else if (tag == "generation") {
            s->kind = StmtKind::Scope;
            s->body = block_body({"endgeneration"});
        } else {
            std::string message = "Encountered unknown tag '" + tag + "'.";
            if (enclosing_end_tags.size() != 0)
                message += " Jinja was looking for the following tags: " + tag_list(enclosing_end_tags) + "." + innermost_block();
            fail_at(t, message);
        }
        return s;
    }

    void parse_for(Stmt& s) {
        s.kind = StmtKind::For;
        s.target = parse_target(true, false, {"in"});
        expect_name("in");
        s.expr = parse_tuple(false, false, {"recursive"});
        if (skip_name("if")) s.loop_filter = parse_expression(true);
        if (skip_name("recursive")) fail_here("recursive for loops are not supported");
        ++loop_depth_;
        s.body = block_body({"endfor", "else"}, false);
        --loop_depth_;
        const bool has_else = advance().text == "else";
        if (has_else) s.else_body = block_body({"endfor"});
        else expect(Tok::BlockEnd);
    }

    void parse_if(Stmt& s) {
        s.kind = StmtKind::If;
        while (true) {
            ExprPtr cond = parse_tuple(false, false);
            Body body = block_body({"elif", "else", "endif"}, false);
            s.branches.emplace_back(std::move(cond), std::move(body));
            const std::string next = advance().text;
            if (next == "elif") continue;
            if (next == "else") s.else_body = block_body({"endif"});
            else expect(Tok::BlockEnd);
            return;
        }
    }

    void parse_set(Stmt& s) {
        s.target = parse_target(true, true, {});
        if (skip_op("=")) {
            s.kind = StmtKind::Set;
            s.expr = parse_tuple(true, false);
            expect(Tok::BlockEnd);
            return;
        }
        s.kind = StmtKind::SetBlock;
        if (is_op("|")) s.filters = parse_filters(nullptr, false);
        s.body = block_body({"endset"});
    }

    // Assignment targets: names (and tuples of names) or, for set, a namespace attribute.
    Target parse_target(bool with_tuple, bool with_namespace, std::initializer_list<std::string_view> extra_end) {
        Target first = parse_target_primary(with_namespace);
        if (!with_tuple || !is_op(",")) return first;
        Target tuple;
        tuple.kind = Target::Kind::Tuple;
        tuple.items.push_back(std::move(first));
        while (skip_op(",")) {
            if (is_tuple_end(extra_end)) break;
            tuple.items.push_back(parse_target_primary(with_namespace));
        }
        return tuple;
    }

    Target parse_target_primary(bool with_namespace) {
        if (skip_op("(")) {
            Target t = parse_target(true, with_namespace, {});
            expect_op(")");
            return t;
        }
        const Token& tok = cur();
        if (is_tuple_end({})) fail_here("Expected an expression, got '" + describe(tok) + "'");
        if (tok.kind != Tok::Name) fail_here("can't assign to '" + describe(tok) + "'");
        Target t;
        t.name = advance().text;
        if (t.name == "true" || t.name == "false" || t.name == "none" || t.name == "True" || t.name == "False" ||
            t.name == "None")
            fail_at(tok, "can't assign to 'const'");
        if (with_namespace && is_op(".")) {
            advance();
            t.kind = Target::Kind::NamespaceAttr;
            t.attr = expect_name();
        }
        t.slot = slot_of(t.name);
        return t;
    }

    void parse_signature(MacroDef& m) {
        expect_op("(");
        while (!is_op(")")) {
            if (!m.params.empty()) expect_op(",");
            if (is_op(")")) break;
            const std::string name = expect_name();
            m.params.emplace_back(slot_of(name), name);
            if (skip_op("=")) m.defaults.push_back(parse_expression(true));
            else if (!m.defaults.empty()) fail_here("non-default argument follows default argument");
        }
        expect_op(")");
    }

    void parse_macro_body(MacroDef& m, std::string_view end_tag) {
        macros_.push_back(&m);
        const int saved_loops = loop_depth_;
        loop_depth_ = 0;  // break/continue cannot reach a loop outside the macro
        m.body = block_body({end_tag});
        loop_depth_ = saved_loops;
        macros_.pop_back();
    }

    void parse_macro(Stmt& s) {
        s.kind = StmtKind::Macro;
        s.macro = std::make_shared<MacroDef>();
        s.macro->name = expect_name();
        s.target.slot = slot_of(s.macro->name);
        s.target.name = s.macro->name;
        parse_signature(*s.macro);
        parse_macro_body(*s.macro, "endmacro");
    }

    void parse_call_block(Stmt& s) {
        s.kind = StmtKind::CallBlock;
        s.macro = std::make_shared<MacroDef>();
        s.macro->name = "caller";
        if (is_op("(")) parse_signature(*s.macro);
        const Token& at = cur();
        s.expr = parse_expression(true);
        if (s.expr->kind != ExprKind::Call) fail_at(at, "expected call");
        parse_macro_body(*s.macro, "endcall");
    }

    void parse_filter_block(Stmt& s) {
        s.kind = StmtKind::FilterBlock;
        s.filters = parse_filters(nullptr, true);
        s.body = block_body({"endfilter"});
    }

    void parse_with(Stmt& s) {
        s.kind = StmtKind::With;
        while (cur().kind != Tok::BlockEnd) {
            if (!s.assignments.empty()) expect_op(",");
            Target t = parse_target(false, false, {});
            expect_op("=");
            s.assignments.emplace_back(std::move(t), parse_expression(true));
        }
        s.body = block_body({"endwith"});
    }

    // ---- expressions --------------------------------------------------------------------------

    bool is_tuple_end(std::initializer_list<std::string_view> extra_end) const {
        const Token& t = cur();
        if (t.kind == Tok::VarEnd || t.kind == Tok::BlockEnd || t.kind == Tok::Eof) return true;
        if (t.kind == Tok::Op && t.text == ")") return true;
        if (t.kind == Tok::Name)
            for (std::string_view e : extra_end)
                if (t.text == e) return true;
        return false;
    }

    ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, std::initializer_list<std::string_view> extra_end = {}) {
        const int line = cur().line;
        std::vector<ExprPtr> items;
        bool is_tuple = false;
        while (true) {
            if (!items.empty()) expect_op(",");
            if (is_tuple_end(extra_end)) break;
            items.push_back(parse_expression(with_condexpr));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!items.empty()) return std::move(items[0]);
            if (!explicit_parens) fail_here("Expected an expression, got '" + describe(cur()) + "'");
        }
        auto e = make(ExprKind::TupleLit, line);
        for (auto& item : items) add_child(*e, std::move(item));
        return e;
    }

    ExprPtr parse_expression(bool with_condexpr) {
        DepthGuard guard(*this);
        if (!with_condexpr) return parse_or();
        ExprPtr expr = parse_or();
        while (is_name("if")) {
            const int line = advance().line;
            auto cond = make(ExprKind::CondExpr, line);
            ExprPtr test = parse_or();
            ExprPtr otherwise;
            if (skip_name("else")) otherwise = parse_expression(true);
            add_child(*cond, std::move(test));
            add_child(*cond, std::move(expr));
            add_child(*cond, std::move(otherwise));
            expr = std::move(cond);
        }
        return expr;
    }

    ExprPtr binary(ExprKind kind, ExprPtr left, ExprPtr right, int line) {
        auto e = make(kind, line);
        add_child(*e, std::move(left));
        add_child(*e, std::move(right));
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr left = parse_and();
        while (is_name("or")) {
            const int line = advance().line;
            left = binary(ExprKind::Or, std::move(left), parse_and(), line);
        }
        return left;
    }

    ExprPtr parse_and() {
        ExprPtr left = parse_not();
        while (is_name("and")) {
            const int line = advance().line;
            left = binary(ExprKind::And, std::move(left), parse_not(), line);
        }
        return left;
    }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto e = make(ExprKind::Not, advance().line);
            add_child(*e, parse_not());
            return e;
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        const int line = cur().line;
        ExprPtr first = parse_math1();
        std::unique_ptr<Expr> cmp;
        while (true) {
            CmpOp op;
            if (cur().kind == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
                                          cur().text == ">" || cur().text == ">=")) {
                const std::string& t = cur().text;
                op = t == "=="   ? CmpOp::Eq
                     : t == "!=" ? CmpOp::Ne
                     : t == "<"  ? CmpOp::Lt
                     : t == "<=" ? CmpOp::Le
                     : t == ">"  ? CmpOp::Gt
                                 : CmpOp::Ge;
                advance();
            } else if (is_name("in")) {
                op = CmpOp::In;
                advance();
            } else if (is_name("not") && peek().kind == Tok::Name && peek().text == "in") {
                op = CmpOp::NotIn;
                advance();
                advance();
            } else {
                break;
            }
            if (!cmp) {
                cmp = make(ExprKind::Compare, line);
                add_child(*cmp, std::move(first));
            }
            cmp->cmp_ops.push_back(op);
            add_child(*cmp, parse_math1());
        }
        return cmp ? std::move(cmp) : std::move(first);
    }

    ExprPtr arith(BinOp op, ExprPtr left, ExprPtr right, int line) {
        auto e = binary(ExprKind::Binary, std::move(left), std::move(right), line);
        e->bin_op = op;
        return e;
    }

    ExprPtr parse_math1() {
        ExprPtr left = parse_concat();
        while (is_op("+") || is_op("-")) {
            const BinOp op = cur().text == "+" ? BinOp::Add : BinOp::Sub;
            const int line = advance().line;
            left = arith(op, std::move(left), parse_concat(), line);
        }
        return left;
    }

    ExprPtr parse_concat() {
        const int line = cur().line;
        ExprPtr first = parse_math2();
        if (!is_op("~")) return first;
        auto e = make(ExprKind::Concat, line);
        add_child(*e, std::move(first));
        while (skip_op("~")) add_child(*e, parse_math2());
        return e;
    }

    ExprPtr parse_math2() {
        ExprPtr left = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            const std::string& t = cur().text;
            const BinOp op = t == "*" ? BinOp::Mul : t == "/" ? BinOp::Div : t == "//" ? BinOp::FloorDiv : BinOp::Mod;
            const int line = advance().line;
            left = arith(op, std::move(left), parse_pow(), line);
        }
        return left;
    }

    ExprPtr parse_pow() {
        ExprPtr left = parse_unary(true);
        while (is_op("**")) {
            const int line = advance().line;
            left = arith(BinOp::Pow, std::move(left), parse_unary(true), line);
        }
        return left;
    }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        ExprPtr node;
        if (is_op("-") || is_op("+")) {
            const ExprKind kind = cur().text == "-" ? ExprKind::Neg : ExprKind::Pos;
            node = make(kind, advance().line);
            add_child(*node, parse_unary(false));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        const int line = t.line;
        if (t.kind == Tok::Name) {
            const std::string name = advance().text;
            auto e = make(ExprKind::Literal, line);
            if (name == "true" || name == "True") e->literal = Value(true);
            else if (name == "false" || name == "False") e->literal = Value(false);
            else if (name == "none" || name == "None") e->literal = Value::none();
            else {
                e->kind = ExprKind::Name;
                e->name = name;
                e->slot = slot_of(name);
                if (!macros_.empty()) {
                    if (name == "caller") macros_.back()->uses_caller = true;
                    else if (name == "varargs") macros_.back()->uses_varargs = true;
                    else if (name == "kwargs") macros_.back()->uses_kwargs = true;
                }
            }
            return e;
        }
        if (t.kind == Tok::String) {
            std::string s;
            while (cur().kind == Tok::String) s += advance().text;  // adjacent literals join
            auto e = make(ExprKind::Literal, line);
            e->literal = Value(std::move(s));
            return e;
        }
        if (t.kind == Tok::Int || t.kind == Tok::Float) {
            auto e = make(ExprKind::Literal, line);
            e->literal = t.kind == Tok::Int ? Value(t.int_value) : Value(t.float_value);
            advance();
            return e;
        }
        if (skip_op("(")) {
            ExprPtr e = parse_tuple(true, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) return parse_list();
        if (is_op("{")) return parse_dict();
        fail_here("unexpected '" + describe(t) + "'");
    }

    ExprPtr parse_list() {
        auto e = make(ExprKind::ListLit, advance().line);
        while (!is_op("]")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("]")) break;
            add_child(*e, parse_expression(true));
        }
        expect_op("]");
        return e;
    }

    ExprPtr parse_dict() {
        auto e = make(ExprKind::DictLit, advance().line);
        while (!is_op("}")) {
            if (!e->children.empty()) expect_op(",");
            if (is_op("}")) break;
            add_child(*e, parse_expression(true));
            expect_op(":");
            add_child(*e, parse_expression(true));
        }
        expect_op("}");
        return e;
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
            else if (is_op("(")) node = parse_call(std::move(node));
            else return node;
        }
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        while (true) {
            if (is_op("|")) node = parse_filters(std::move(node), false);
            else if (is_name("is")) node = parse_test(std::move(node));
            else if (is_op("(")) node = parse_call(std::move(node));
            else return node;
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        const Token& t = advance();
        const int line = t.line;
        if (t.text == ".") {
            const Token& attr = cur();
            if (attr.kind == Tok::Name) {
                auto e = make(ExprKind::GetAttr, line);
                e->name = advance().text;
                add_child(*e, std::move(node));
                return e;
            }
            if (attr.kind != Tok::Int) fail_here("expected name or number");
            auto key = make(ExprKind::Literal, line);
            key->literal = Value(advance().int_value);
            auto e = make(ExprKind::GetItem, line);
            add_child(*e, std::move(node));
            add_child(*e, std::move(key));
            return e;
        }
        // `[` subscript: one key, a slice, or several (a tuple key).
        std::vector<ExprPtr> keys;
        while (!is_op("]")) {
            if (!keys.empty()) expect_op(",");
            keys.push_back(parse_subscribed(node, line));
            if (keys.back()->kind == ExprKind::Slice) {
                expect_op("]");
                return std::move(keys.back());
            }
        }
        expect_op("]");
        auto e = make(ExprKind::GetItem, line);
        add_child(*e, std::move(node));
        if (keys.size() == 1) {
            add_child(*e, std::move(keys[0]));
        } else {
            auto tuple = make(ExprKind::TupleLit, line);
            for (auto& key : keys) add_child(*tuple, std::move(key));
            add_child(*e, std::move(tuple));
        }
        return e;
    }

    // One subscript item; a slice takes `node` as its subject.
    ExprPtr parse_subscribed(ExprPtr& node, int line) {
        ExprPtr start;
        if (!is_op(":")) {
            start = parse_expression(true);
            if (!is_op(":")) return start;
        }
        advance();  // the first colon
        ExprPtr stop, step;
        if (!is_op(":") && !is_op("]") && !is_op(",")) stop = parse_expression(true);
        if (skip_op(":")) {
            if (!is_op("]") && !is_op(",")) step = parse_expression(true);
        }
        auto e = make(ExprKind::Slice, line);
        add_child(*e, std::move(node));
        add_child(*e, std::move(start));
        add_child(*e, std::move(stop));
        add_child(*e, std::move(step));
        return e;
    }

    void parse_call_args(CallSpec& spec) {
        const Token& open = cur();
        expect_op("(");
        bool need_comma = false;
        while (!is_op(")")) {
            if (need_comma) {
                expect_op(",");
                if (is_op(")")) break;
            }
            if (skip_op("*")) {
                if (spec.star_args || spec.star_kwargs) fail_at(open, "invalid syntax for function call expression");
                spec.star_args = parse_expression(true);
            } else if (skip_op("**")) {
                if (spec.star_kwargs) fail_at(open, "invalid syntax for function call expression");
                spec.star_kwargs = parse_expression(true);
            } else if (cur().kind == Tok::Name && peek().kind == Tok::Op && peek().text == "=") {
                if (spec.star_kwargs) fail_at(open, "invalid syntax for function call expression");
                std::string key = advance().text;
                advance();
                spec.kwargs.emplace_back(std::move(key), parse_expression(true));
            } else {
                if (spec.star_args || spec.star_kwargs || !spec.kwargs.empty())
                    fail_at(open, "invalid syntax for function call expression");
                spec.args.push_back(parse_expression(true));
            }
            need_comma = true;
        }
        expect_op(")");
    }

    ExprPtr parse_call(ExprPtr node) {
        auto e = make(ExprKind::Call, cur().line);
        parse_call_args(e->call);
        add_call_depth(*e);
        add_child(*e, std::move(node));
        return e;
    }

    std::string dotted_name() {
        std::string name = expect_name();
        while (skip_op(".")) name += "." + expect_name();
        return name;
    }

    // `| name(args) | ...`; `start_inline` for {% filter name %}, where no pipe comes first.
    ExprPtr parse_filters(ExprPtr node, bool start_inline) {
        while (is_op("|") || start_inline) {
            if (!start_inline) advance();
            start_inline = false;
            auto e = make(ExprKind::Filter, cur().line);
            e->name = dotted_name();
            e->filter = find_filter(e->name);  // an unknown filter fails only if it runs, as in jinja2
            if (is_op("(")) parse_call_args(e->call);
            add_call_depth(*e);
            add_child(*e, std::move(node));
            node = std::move(e);
        }
        return node;
    }

    ExprPtr parse_test(ExprPtr node) {
        const int line = advance().line;  // `is`
        const bool negated = skip_name("not");
        auto e = make(ExprKind::Test, line);
        e->name = dotted_name();
        e->test = find_test(e->name);
        if (is_op("(")) {
            parse_call_args(e->call);
        } else if ((cur().kind == Tok::Name || cur().kind == Tok::String || cur().kind == Tok::Int || cur().kind == Tok::Float ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail_here("You cannot chain multiple tests with is");
            e->call.args.push_back(parse_postfix(parse_primary()));
        }
        add_call_depth(*e);
        add_child(*e, std::move(node));
        if (!negated) return e;
        auto n = make(ExprKind::Not, line);
        add_child(*n, std::move(e));
        return n;
    }

    std::vector<Token> toks_;
    size_t pos_ = 0;
    Program& prog_;
    std::unordered_map<std::string, int> slots_;
    std::vector<MacroDef*> macros_;
    std::vector<std::string> open_blocks_;
    int depth_ = 0;
    int loop_depth_ = 0;
};

}  // namespace

Program parse_template(std::string_view source, const std::string& where, const LexOptions& options) {
    Program program;
    program.where = where;
    Parser parser(tokenize(source, where, options), program);
    program.body = parser.parse_all();
    return program;
}

}  // namespace strata::tmpl
