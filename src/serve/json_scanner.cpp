#include "serve/json_scanner.h"

namespace strata::serve {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonScanner::feed(std::string_view text) {
    for (char c : text)
        if (!feed(c)) return false;
    return true;
}

bool JsonScanner::complete() const {
    if (!stack_.empty()) return false;
    switch (state_) {
        case State::After:
        case State::Zero:
        case State::Int:
        case State::Frac:
        case State::ExpInt: return true;
        default: return false;
    }
}

bool JsonScanner::begin_value(char c) {
    switch (c) {
        case '{':
        case '[':
            if (stack_.size() >= kMaxDepth) return false;
            stack_.push_back(c);
            state_ = c == '{' ? State::KeyOrEnd : State::ValueOrEnd;
            break;
        case '"':
            state_ = State::String;
            in_key_ = false;
            break;
        case '-': state_ = State::Minus; break;
        case '0': state_ = State::Zero; break;
        case 't':
        case 'f':
        case 'n':
            literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
            state_ = State::Literal;
            count_ = 1;
            break;
        default:
            if (c < '1' || c > '9') return false;
            state_ = State::Int;
    }
    started_ = true;
    return true;
}

bool JsonScanner::after_value(char c) {
    if (is_ws(c)) return true;
    if (stack_.empty()) return false;
    if (c == ',') {
        state_ = stack_.back() == '{' ? State::Key : State::Value;
        return true;
    }
    if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        state_ = State::After;
        return true;
    }
    return false;
}

// c cannot continue the number being read: the number ends, and c must fit after a value.
bool JsonScanner::end_number(char c) {
    const State saved = state_;
    state_ = State::After;
    if (after_value(c)) return true;
    state_ = saved;
    return false;
}

bool JsonScanner::feed(char c) {
    switch (state_) {
        case State::Value:
            if (is_ws(c)) return true;
            return begin_value(c);
        case State::ValueOrEnd:
            if (is_ws(c)) return true;
            if (c == ']') {
                stack_.pop_back();
                state_ = State::After;
                return true;
            }
            return begin_value(c);
        case State::KeyOrEnd:
        case State::Key:
            if (is_ws(c)) return true;
            if (c == '}' && state_ == State::KeyOrEnd) {
                stack_.pop_back();
                state_ = State::After;
                return true;
            }
            if (c != '"') return false;
            state_ = State::String;
            in_key_ = true;
            return true;
        case State::Colon:
            if (is_ws(c)) return true;
            if (c != ':') return false;
            state_ = State::Value;
            return true;
        case State::String:
            if (c == '"') {
                state_ = in_key_ ? State::Colon : State::After;
                in_key_ = false;
            } else if (c == '\\') {
                state_ = State::Escape;
            } else if (static_cast<unsigned char>(c) < 0x20) {
                return false;
            }
            return true;
        case State::Escape:
            if (c == 'u') {
                state_ = State::Hex;
                count_ = 4;
                return true;
            }
            if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
            state_ = State::String;
            return true;
        case State::Hex:
            if (!is_hex(c)) return false;
            if (--count_ == 0) state_ = State::String;
            return true;
        case State::Literal:
            if (c != literal_[count_]) return false;
            if (literal_[++count_] == '\0') state_ = State::After;
            return true;
        case State::Minus:
            if (!is_digit(c)) return false;
            state_ = c == '0' ? State::Zero : State::Int;
            return true;
        case State::Zero:
        case State::Int:
            if (is_digit(c) && state_ == State::Int) return true;
            if (c == '.') {
                state_ = State::Dot;
                return true;
            }
            if (c == 'e' || c == 'E') {
                state_ = State::Exp;
                return true;
            }
            return end_number(c);
        case State::Dot:
            if (!is_digit(c)) return false;
            state_ = State::Frac;
            return true;
        case State::Frac:
            if (is_digit(c)) return true;
            if (c == 'e' || c == 'E') {
                state_ = State::Exp;
                return true;
            }
            return end_number(c);
        case State::Exp:
            if (c == '+' || c == '-') {
                state_ = State::ExpSign;
                return true;
            }
            [[fallthrough]];
        case State::ExpSign:
            if (!is_digit(c)) return false;
            state_ = State::ExpInt;
            return true;
        case State::ExpInt:
            if (is_digit(c)) return true;
            return end_number(c);
        case State::After: return after_value(c);
    }
    return false;
}

std::optional<std::string> JsonScanner::closing() const {
    std::string out;
    switch (state_) {
        case State::String:
            if (in_key_) return std::nullopt;
            out += '"';
            break;
        case State::ValueOrEnd:
        case State::KeyOrEnd:
        case State::Zero:
        case State::Int:
        case State::Frac:
        case State::ExpInt:
        case State::After: break;
        default: return std::nullopt;
    }
    for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) out += *it == '{' ? '}' : ']';
    return out;
}

void JsonCloser::feed(std::string_view text) {
    for (char c : text) {
        if (failed_ || !scanner_.feed(c)) {
            failed_ = true;
            return;
        }
        ++fed_;
        const auto u = static_cast<unsigned char>(c);
        if (utf8_left_ > 0 && (u & 0xC0) == 0x80) {
            --utf8_left_;
        } else {
            utf8_left_ = u >= 0xF0 ? 3 : u >= 0xE0 ? 2 : u >= 0xC0 ? 1 : 0;
        }
        if (utf8_left_ > 0) continue;
        if (std::optional<std::string> close = scanner_.closing()) {
            safe_ = fed_;
            closing_ = std::move(*close);
        }
    }
}

std::string JsonCloser::close(std::string_view text) {
    JsonCloser c;
    c.feed(text);
    if (c.safe_size() == 0) return "{}";
    return std::string(text.substr(0, c.safe_size())) + c.closing();
}

}  // namespace strata::serve
