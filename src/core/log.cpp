#include "core/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tensorhub::core {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

bool parse_log_level(std::string_view text, LogLevel& out) {
  for (int i = 0; i < 4; ++i) {
    if (text == kNames[i]) {
      out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

void log_line(LogLevel level, std::string_view component, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char stamp[64];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  std::string line;
  line.reserve(64 + message.size());
  line += stamp;
  line += ' ';
  line += kNames[static_cast<int>(level)];
  line.append(6 - std::string_view(kNames[static_cast<int>(level)]).size(), ' ');
  line += component;
  line += ": ";
  for (char c : message) line += (c == '\n' || c == '\r') ? ' ' : c;  // one line, always
  line += '\n';
  std::lock_guard lock(g_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace tensorhub::core
