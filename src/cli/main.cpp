// tensorhub: the command line of TensorHub.
#include <CLI/CLI.hpp>

#include "cli/cli_common.hpp"

int main(int argc, char** argv) {
  using namespace tensorhub::cli;
  CLI::App app{"TensorHub: distributes versions of model weights through a peer-to-peer swarm.", "tensorhub"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tensorhub 0.1.0");
  int exit_code = kExitOk;
  add_keygen_commands(app, exit_code);
  add_devices_command(app, exit_code);
  add_rdma_bench_command(app, exit_code);
  add_peer_commands(app, exit_code);
  add_transfer_commands(app, exit_code);
  add_demo_command(app, exit_code);
  add_manifest_command(app, exit_code);
  add_synth_model_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a hint
    return kExitError;
  } catch (const std::exception& e) {
    // A bug, not the user's input: one line, never an abort.
    return report_error(tensorhub::Status::internal(e.what()));
  }
  return exit_code;
}
