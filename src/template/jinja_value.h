// Values of the template language, modelled on the Python objects that jinja2 templates see:
// undefined, None, bool, int, float, str, list, tuple, dict (insertion-ordered), namespace and
// opaque objects (macros, builtin functions, bound methods, the loop variable).
//
// Strings and containers are reference-counted and immutable once built (transformers renders in
// jinja2's ImmutableSandboxedEnvironment, where templates cannot mutate lists or dicts), except a
// namespace, whose attributes `{% set ns.x = ... %}` assigns. Copying a Value is cheap.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/error.h"

namespace strata::tmpl {

class Value;
class Object;
struct DictData;
using ListData = std::vector<Value>;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Object };

// A failure while rendering, before the interpreter attaches a line number: `type` is the Python
// exception class jinja2 would raise (TypeError, UndefinedError, ...), `message` its text.
class RuntimeFailure : public std::runtime_error {
public:
    RuntimeFailure(std::string type, const std::string& message) : std::runtime_error(message), type_(std::move(type)) {}
    const std::string& type() const { return type_; }

private:
    std::string type_;
};
[[noreturn]] void fail(std::string type, std::string message);
[[noreturn]] void type_error(std::string message);

class Value {
public:
    Value() = default;  // undefined, no hint
    Value(bool b) : kind_(Kind::Bool) { scalar_.b = b; }
    Value(int v) : Value(static_cast<int64_t>(v)) {}
    Value(int64_t v) : kind_(Kind::Int) { scalar_.i = v; }
    Value(double v) : kind_(Kind::Float) { scalar_.f = v; }
    Value(std::string s);
    Value(std::string_view s) : Value(std::string(s)) {}
    Value(const char* s) : Value(std::string(s)) {}

    // `hint` is the complete message raised when the value is misused; `security` makes that a
    // SecurityError (an attribute the sandbox forbids) rather than an UndefinedError.
    static Value undefined(std::string hint, bool security = false);
    // A markupsafe.Markup string (what |safe and |escape return): `+` and `%` HTML-escape the
    // plain strings combined with it; printing and `~` treat it as a plain string.
    static Value markup(std::string s);
    static Value none();
    static Value list(ListData items);
    static Value tuple(ListData items);
    static Value dict(DictData items);
    static Value make_namespace(DictData items);
    static Value object(std::shared_ptr<Object> obj);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::Undefined; }
    bool is_none() const { return kind_ == Kind::None; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_int() const { return kind_ == Kind::Int; }
    bool is_float() const { return kind_ == Kind::Float; }
    bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_markup() const { return kind_ == Kind::String && scalar_.b; }
    bool is_sequence_data() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
    bool is_dict() const { return kind_ == Kind::Dict; }
    bool is_namespace() const { return kind_ == Kind::Namespace; }
    bool is_object() const { return kind_ == Kind::Object; }

    bool get_bool() const { return scalar_.b; }
    int64_t get_int() const { return scalar_.i; }
    double get_float() const { return scalar_.f; }
    // Int or Bool as an integer (Python's bool is an int).
    int64_t int_value() const { return kind_ == Kind::Bool ? (scalar_.b ? 1 : 0) : scalar_.i; }
    // Any number as a double.
    double float_value() const { return kind_ == Kind::Float ? scalar_.f : static_cast<double>(int_value()); }
    const std::string& str() const { return *static_cast<const std::string*>(ptr_.get()); }
    const ListData& items() const { return *static_cast<const ListData*>(ptr_.get()); }
    const DictData& dict_data() const { return *static_cast<const DictData*>(ptr_.get()); }
    DictData& namespace_data() const { return *static_cast<DictData*>(ptr_.get()); }
    Object& obj() const { return *static_cast<Object*>(ptr_.get()); }
    struct UndefinedInfo {
        std::string hint;
        bool security = false;
    };
    const UndefinedInfo* undefined_info() const { return ptr_ ? static_cast<const UndefinedInfo*>(ptr_.get()) : nullptr; }
    // Identity of a container or object (for `is sameas`).
    const void* identity() const { return ptr_.get(); }

    bool truthy() const;

private:
    Kind kind_ = Kind::Undefined;
    union {
        bool b;
        int64_t i;
        double f;
    } scalar_{};
    std::shared_ptr<void> ptr_;  // string, ListData, DictData, Object, or an UndefinedInfo
};

struct DictData {
    std::vector<std::pair<Value, Value>> entries;

    const Value* find(std::string_view key) const;
    const Value* find(const Value& key) const;
    void set(Value key, Value value);  // replaces an equal key in place, else appends
    size_t size() const { return entries.size(); }
};

struct CallArgs {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> named;

    // Python-style binding of these arguments to `params` (names in order); unset ones stay
    // undefined. `fn` names the callee in error messages.
    std::vector<Value> bind(std::string_view fn, std::initializer_list<std::string_view> params) const;
};

class Interpreter;

// Anything callable or with attributes that is not plain data.
class Object {
public:
    virtual ~Object() = default;
    // Python's type name, for messages ("function", "LoopContext", ...).
    virtual std::string type_name() const = 0;
    // Attribute lookup; an undefined value when absent.
    virtual Value attribute(std::string_view name) const;
    virtual bool callable() const { return false; }
    virtual Value call(Interpreter& interp, const CallArgs& args) const;
    // What str() prints.
    virtual std::string to_str() const { return "<" + type_name() + " object>"; }
};

// ---- Python semantics -----------------------------------------------------------------------

// Python type name of a value ("str", "NoneType", "dict", ...).
std::string type_name(const Value& v);
// jinja2's object_type_repr: "None" or "dict object".
std::string object_type_repr(const Value& v);
// markupsafe's escape(): & < > " ' as HTML entities.
std::string html_escape(std::string_view s);
// str(v) and repr(v) as Python prints them (floats shortest round-trip, dicts with quotes, ...).
std::string to_str(const Value& v);
void append_str(std::string& out, const Value& v);
std::string repr(const Value& v);
std::string float_repr(double d);
// `==` (1 == 1.0 == True, dicts regardless of order) and `<` (raises TypeError for mixed types).
bool equals(const Value& a, const Value& b);
bool less_than(const Value& a, const Value& b);
// Raises the UndefinedError this value stands for (it must be undefined).
[[noreturn]] void raise_undefined(const Value& v);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it.
struct JsonOptions {
    bool ensure_ascii = false;
    bool has_indent = false;
    std::string indent;  // used when has_indent
    bool has_separators = false;
    std::string item_separator = ", ", key_separator = ": ";
    bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// JSON as Python's json.loads sees it (objects keep their key order).
Value from_json(const nlohmann::ordered_json& j);

}  // namespace strata::tmpl
