// The one exception a template raises to its caller. `message()` is the text jinja2 would give
// (the template's own words for raise_exception); what() adds where it happened, except for a
// raised exception, whose what() is exactly the template's message.
#pragma once

#include <string>
#include <utility>

#include "util/error.h"

namespace strata::tmpl {

class TemplateError : public Error {
public:
    enum class Kind {
        Syntax,   // the template does not parse
        Runtime,  // an operation failed while rendering (jinja2's TypeError, UndefinedError, ...)
        Raised,   // the template called raise_exception(message)
        Limit,    // rendering went past a resource limit (output size, iterations, nesting)
    };

    TemplateError(Kind kind, std::string python_type, std::string message, const std::string& where, int line, int column)
        : Error(describe(kind, python_type, message, where, line, column)),
          kind_(kind),
          python_type_(std::move(python_type)),
          message_(std::move(message)),
          line_(line),
          column_(column) {}

    Kind kind() const { return kind_; }
    // The Python exception class jinja2 raises for this failure: TemplateSyntaxError, TypeError,
    // UndefinedError, TemplateError (raise_exception), ...
    const std::string& python_type() const { return python_type_; }
    const std::string& message() const { return message_; }
    int line() const { return line_; }
    int column() const { return column_; }

private:
    static std::string describe(Kind kind, const std::string& type, const std::string& message, const std::string& where,
                                int line, int column) {
        if (kind == Kind::Raised) return message;
        std::string out = where + ":" + std::to_string(line);
        if (kind == Kind::Syntax) return out + ":" + std::to_string(column) + ": syntax error: " + message;
        return out + ": " + type + ": " + message;
    }

    Kind kind_;
    std::string python_type_;
    std::string message_;
    int line_ = 0, column_ = 0;
};

}  // namespace strata::tmpl
