// One-line logs: "2026-11-22T04:03:12.123Z info  gossip: member joined peer=ab12 addr=10.0.0.2:7946".
// Thread-safe; lines never interleave. The sans-I/O cores do not log: their
// drivers log the events the cores report.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace tensorhub::core {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
inline bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(log_level()); }
// "error", "warn", "info", "debug"; false for anything else.
bool parse_log_level(std::string_view text, LogLevel& out);
void log_line(LogLevel level, std::string_view component, std::string_view message);

}  // namespace tensorhub::core

#define TENSORHUB_LOG(level, component, stream_expr)                                  \
  do {                                                                                \
    if (::tensorhub::core::log_enabled(level)) {                                      \
      std::ostringstream tensorhub_log_os_;                                           \
      tensorhub_log_os_ << stream_expr;                                               \
      ::tensorhub::core::log_line(level, component, tensorhub_log_os_.str());         \
    }                                                                                 \
  } while (0)
#define TH_LOG_ERROR(component, expr) TENSORHUB_LOG(::tensorhub::core::LogLevel::kError, component, expr)
#define TH_LOG_WARN(component, expr) TENSORHUB_LOG(::tensorhub::core::LogLevel::kWarn, component, expr)
#define TH_LOG_INFO(component, expr) TENSORHUB_LOG(::tensorhub::core::LogLevel::kInfo, component, expr)
#define TH_LOG_DEBUG(component, expr) TENSORHUB_LOG(::tensorhub::core::LogLevel::kDebug, component, expr)
