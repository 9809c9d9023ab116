// What the scheduler asks of a constrained sequence, whatever the constraint: the tokens that may
// come next, the token that came, and whether the output must end now. JsonConstraint
// (json_constraint.h) and XmlCallConstraint (xml_call_constraint.h) are the two kinds.
#pragma once

#include <cstdint>

#include "runtime/token_mask.h"

namespace strata::runtime {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;
    // Fills mask with the tokens that keep the output a valid prefix (end tokens exactly when the
    // output is complete).
    virtual void allowed(TokenMask& mask) = 0;
    // Advances by a token; throws strata::Error (and changes nothing) when it is not allowed.
    virtual void accept(int32_t token) = 0;
    // Complete, and nothing but an end token may follow.
    virtual bool must_end() const = 0;
};

}  // namespace strata::runtime
