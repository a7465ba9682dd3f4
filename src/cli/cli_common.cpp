#include "cli/cli_common.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/byte_size.hpp"
#include "core/host_port.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub::cli {

int exit_code_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kCorrupt:
    case StatusCode::kVerifyFailed: return kExitCheckFailed;
    default: return kExitError;
  }
}

int report_error(const Status& status) {
  std::fprintf(stderr, "tensorhub: %s\n", status.to_string().c_str());
  return exit_code_for(status.code());
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

CLI::Option* add_shard_size_option(CLI::App& app, std::uint64_t& out, const std::string& what) {
  return app.add_option_function<std::string>(
                "--shard-size",
                [&out](const std::string& text) {
                  if (text == "auto") {
                    out = kAutoShardSize;
                    return;
                  }
                  auto size = core::parse_byte_size(text);
                  if (!size) throw CLI::ValidationError("--shard-size", size.status().message());
                  if (*size == kAutoShardSize) throw CLI::ValidationError("--shard-size", "0 bytes; give a size or auto");
                  out = *size;
                },
                "Shard size of " + what +
                    ": a power of two from 64KiB to 1GiB, or auto (default): at least 2048 shards, 128KiB to 256MiB")
      ->type_name("SIZE|auto");
}

std::string describe_shard_size(std::uint64_t shard_size) {
  return shard_size == kAutoShardSize ? "auto" : core::format_byte_size(shard_size);
}

Result<std::string> default_control_path(const core::HostPort& listen, bool create) {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir = runtime_dir && *runtime_dir ? std::string(runtime_dir) + "/tensorhub"
                                                      : "/tmp/tensorhub-" + std::to_string(::geteuid());
  std::string name = "peer-";
  for (char c : listen.host) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  name += "-" + std::to_string(listen.port) + ".sock";
  if (!create) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 && errno == ENOENT) return dir + "/" + name;  // no peer runs: connecting says so
  }
  TENSORHUB_RETURN_IF_ERROR(check_private_directory(dir, "control", create, "--control PATH"));
  return dir + "/" + name;
}

Status check_private_directory(const std::string& dir, const std::string& what, bool create,
                               const std::string& option) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::io_error("cannot create the " + what + " directory " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return Status::io_error("cannot inspect the " + what + " directory " + dir + ": " + std::strerror(errno));
  }
  const std::string fix = ": remove it, or give " + option;
  if (!S_ISDIR(st.st_mode)) return Status::permission_denied(dir + " is not a directory" + fix);
  if (st.st_uid != ::geteuid()) {
    return Status::permission_denied(dir + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                                     std::to_string(::geteuid()) + ")" + fix);
  }
  const mode_t forbidden = what == "control" ? 077 : 022;  // a control directory is not even readable by others
  if ((st.st_mode & forbidden) != 0) {
    return Status::permission_denied(dir + (forbidden == 077 ? " is open to other users" : " is writable by other users") +
                                     " (chmod 700 it)" + fix);
  }
  return Status::ok();
}

std::string default_hold_directory() { return "/dev/shm/tensorhub-" + std::to_string(::geteuid()); }

Result<std::string> resolve_control_path(const std::string& control, const std::string& peer) {
  if (!control.empty()) return control;
  auto hp = core::parse_host_port(peer);
  if (peer.empty() || !hp) return Status::invalid_argument("give --control PATH or --peer HOST:PORT");
  return default_control_path(*hp, /*create=*/false);
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  auto absolute = std::filesystem::absolute(path, ec);
  return ec ? path : absolute.string();
}

std::uint64_t unix_time_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace tensorhub::cli
