// Helpers shared by the tensorhub subcommands.
#pragma once

#include <cstdint>
#include <string>

#include "tensorhub/status.hpp"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tensorhub::core {
struct HostPort;
}

namespace tensorhub::cli {

// Exit codes of every subcommand (docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitCheckFailed = 1,  // a verification failed, or input is corrupt (kVerifyFailed, kCorrupt)
  kExitError = 2,        // everything else: bad arguments, missing files, I/O errors, timeouts, limits
};

// The exit code of a failure of this kind, whether it happened in the
// command or in the daemon that answered it.
int exit_code_for(StatusCode code);
// Prints "tensorhub: <status>" on stderr and returns the matching exit code.
int report_error(const Status& status);

// Adds an option that takes a byte size such as 16MiB and stores it in `out`.
CLI::Option* add_size_option(CLI::App& app, const std::string& name, std::uint64_t& out, const std::string& help);
// --shard-size: a byte size, or "auto" (stored as kAutoShardSize: chosen from
// the version's size by auto_shard_size).
CLI::Option* add_shard_size_option(CLI::App& app, std::uint64_t& out, const std::string& what);
// "auto" or the size, for messages.
std::string describe_shard_size(std::uint64_t shard_size);

std::uint64_t unix_time_ms();

// Where a peer listening on `listen` puts its control socket by default:
// <dir>/peer-<host>-<port>.sock, in a directory of this user's alone,
// $XDG_RUNTIME_DIR/tensorhub or /tmp/tensorhub-<uid>. The daemon creates it
// (`create`, mode 0700); the daemon and the client both refuse it when it
// is not a directory of this user closed to others (kPermissionDenied,
// saying what to fix): another user could otherwise take the path first.
Result<std::string> default_control_path(const core::HostPort& listen, bool create);
// OK when `dir` is a directory of this user that no other user may write
// (for the "control" directory: not even read), created with mode 0700 when
// `create` and absent; kPermissionDenied naming what is wrong and the fix
// (removing it, or `option`), kIoError when it cannot be made or inspected.
// Another user who made the directory first could otherwise swap files under
// the daemon, or have it delete theirs.
Status check_private_directory(const std::string& dir, const std::string& what, bool create,
                               const std::string& option);
// Where a daemon holds versions by default: /dev/shm/tensorhub-<uid>.
std::string default_hold_directory();
// --control PATH, or the default path of --peer HOST:PORT.
Result<std::string> resolve_control_path(const std::string& control, const std::string& peer);
// The absolute form of a path (the peer resolves paths from its own directory).
std::string absolute_path(const std::string& path);


// Each subcommand registers itself and stores its exit code in `exit_code`.
void add_devices_command(CLI::App& app, int& exit_code);
void add_rdma_bench_command(CLI::App& app, int& exit_code);
void add_peer_commands(CLI::App& app, int& exit_code);
void add_transfer_commands(CLI::App& app, int& exit_code);
void add_demo_command(CLI::App& app, int& exit_code);
void add_keygen_commands(CLI::App& app, int& exit_code);
void add_manifest_command(CLI::App& app, int& exit_code);
void add_synth_model_command(CLI::App& app, int& exit_code);

}  // namespace tensorhub::cli
