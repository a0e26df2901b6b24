// Escaping text for XML and HTML. Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace stoker {

// `text` as XML or HTML character data or a quoted attribute value: & < > " ' become entity
// references (&#39; for ', which both XML and HTML accept); every other byte is kept.
std::string EscapeMarkup(std::string_view text);

}  // namespace stoker
