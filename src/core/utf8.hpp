// Strict UTF-8 checking: what JSON text and safetensors headers may hold.
#pragma once

#include <string_view>

namespace tensorhub::core {

// Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s);

}  // namespace tensorhub::core
