#include "core/model_name.hpp"

#include <string>

#include "core/quoted.hpp"

namespace tensorhub::core {

Status validate_model_name(std::string_view name, std::size_t max_bytes) {
  if (name.empty()) return Status::invalid_argument("the model name is empty");
  if (name.size() > max_bytes) {
    return Status::invalid_argument("the model name is longer than " + std::to_string(max_bytes) + " bytes");
  }
  if (name.front() == '/' || name.front() == '.') {
    return Status::invalid_argument("the model name " + quoted(name) + " starts with '" + name.front() + "'");
  }
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                         c == '_' || c == '-' || c == '/';
    if (!allowed) {
      return Status::invalid_argument("the model name may hold only letters, digits and . _ - /; it has " +
                                      quoted(std::string_view(&c, 1)));
    }
  }
  return Status::ok();
}

}  // namespace tensorhub::core
