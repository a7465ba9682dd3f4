#include "cli/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "core/byte_size.hpp"

namespace tensorhub::cli {

int report_error(const Status& status) {
  std::fprintf(stderr, "tensorhub: %s\n", status.to_string().c_str());
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kCorrupt:
    case StatusCode::kVerifyFailed: return kExitCheckFailed;
    default: return kExitError;
  }
}

CLI::Option* add_size_option(CLI::App& app, const std::string& name, std::uint64_t& out, const std::string& help) {
  return app.add_option_function<std::string>(
                name,
                [&out, name](const std::string& text) {
                  auto size = core::parse_byte_size(text);
                  if (!size) throw CLI::ValidationError(name, size.status().message());
                  out = *size;
                },
                help)
      ->type_name("SIZE");
}

std::uint64_t unix_time_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace tensorhub::cli
