// One error type for everything a user can cause (bad file, bad flag, bad request).
// The message is complete and user-facing: it names the thing and the problem.
#pragma once

#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace strata
