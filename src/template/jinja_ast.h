// The parsed form of a template: expression and statement trees the interpreter walks. Names
// are resolved to small integer slots at parse time so that variable lookup compares ints.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace strata::tmpl {

class Interpreter;
using FilterFn = Value (*)(Interpreter&, const Value& subject, const CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& subject, const CallArgs& args);

enum class ExprKind : uint8_t {
    Literal,   // literal
    Name,      // slot, name
    GetAttr,   // children[0].name
    GetItem,   // children[0][children[1]]
    Slice,     // children[0][children[1]:children[2]:children[3]] (absent parts are null)
    Call,      // children[0](call)
    Filter,    // children[0] | name(call); children[0] is null for a filter block's chain
    Test,      // children[0] is name(call)
    Not,       // not children[0]
    Neg,       // -children[0]
    Pos,       // +children[0]
    Binary,    // children[0] op children[1]
    Concat,    // children joined with ~
    Compare,   // children[0] cmp_ops[0] children[1] cmp_ops[1] children[2] ...
    And,       // children[0] and children[1]
    Or,        // children[0] or children[1]
    CondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
    ListLit,   // [children...]
    TupleLit,  // (children...)
    DictLit,   // {children[0]: children[1], ...}
};

enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallSpec {
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    ExprPtr star_args;    // *args
    ExprPtr star_kwargs;  // **kwargs
};

struct Expr {
    ExprKind kind = ExprKind::Literal;
    int line = 0;
    int depth = 1;  // of the tree below and including this node
    Value literal;
    int slot = -1;     // Name
    std::string name;  // Name, GetAttr attribute, Filter / Test name
    BinOp bin_op = BinOp::Add;
    std::vector<CmpOp> cmp_ops;
    std::vector<ExprPtr> children;
    CallSpec call;
    FilterFn filter = nullptr;
    TestFn test = nullptr;
};

// Where an assignment stores: a name, a tuple of targets, or a namespace attribute.
struct Target {
    enum class Kind : uint8_t { Name, Tuple, NamespaceAttr } kind = Kind::Name;
    int slot = -1;
    std::string name;  // Name; the namespace variable for NamespaceAttr
    std::string attr;  // NamespaceAttr
    std::vector<Target> items;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroDef {
    std::string name;
    std::vector<std::pair<int, std::string>> params;  // slot, name
    std::vector<ExprPtr> defaults;                    // for the last defaults.size() params
    Body body;
    bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

enum class StmtKind : uint8_t {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches (condition, body), else_body
    For,          // for target in expr [if loop_filter] body [else else_body]
    Set,          // set target = expr
    SetBlock,     // set target [| filters] body endset
    Macro,        // macro
    CallBlock,    // call [(params)] expr body endcall; the body is macro->body
    FilterBlock,  // filter filters body endfilter
    Break,
    Continue,
    With,   // with assignments body endwith
    Scope,  // a body run in place ({% generation %})
};

struct Stmt {
    StmtKind kind = StmtKind::Text;
    int line = 0;
    std::string text;
    ExprPtr expr;
    std::vector<std::pair<ExprPtr, Body>> branches;
    Body body, else_body;
    Target target;
    ExprPtr loop_filter;
    bool recursive = false;
    ExprPtr filters;  // a Filter chain applied to the captured body (SetBlock, FilterBlock)
    std::shared_ptr<MacroDef> macro;
    std::vector<std::pair<Target, ExprPtr>> assignments;  // With
};

// A parsed template: its statements and the names its slots stand for.
struct Program {
    Body body;
    std::vector<std::string> slot_names;
    std::string where;  // how errors name the template
};

}  // namespace strata::tmpl
