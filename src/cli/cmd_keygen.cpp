// tensorhub keygen / tensorhub pubkey
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_common.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/swarm_key.hpp"

namespace tensorhub::cli {

void add_keygen_commands(CLI::App& app, int& exit_code) {
  struct KeygenArgs {
    std::string out;
    bool force = false;
  };
  auto args = std::make_shared<KeygenArgs>();
  CLI::App* keygen = app.add_subcommand("keygen", "Create an Ed25519 identity (a peer's or publisher's key)");
  keygen->add_option("--out", args->out, "Key file to write (mode 0600)")->required();
  keygen->add_flag("--force", args->force, "Replace an existing key file");
  keygen->callback([args, &exit_code] {
    Identity identity = Identity::generate();
    Status s = identity.save(args->out, args->force);
    if (!s.is_ok()) {
      exit_code = report_error(s);
      return;
    }
    std::printf("%s\n", identity.public_key().hex().c_str());
    std::fprintf(stderr, "wrote %s; the line above is its peer id (public key)\n", args->out.c_str());
  });

  auto swarm_args = std::make_shared<KeygenArgs>();
  CLI::App* swarm = app.add_subcommand("swarm-key", "Create a swarm key: 32 random bytes every member shares");
  swarm->add_option("--out", swarm_args->out, "Swarm key file to write (mode 0600)")->required();
  swarm->add_flag("--force", swarm_args->force, "Replace an existing file");
  swarm->callback([swarm_args, &exit_code] {
    const SwarmKey key = SwarmKey::generate();
    Status s = key.save(swarm_args->out, swarm_args->force);
    if (!s.is_ok()) {
      exit_code = report_error(s);
      return;
    }
    std::printf("wrote %s (fingerprint %s); copy it to every peer of the swarm, privately\n", swarm_args->out.c_str(),
                key.fingerprint().c_str());
  });

  auto key_path = std::make_shared<std::string>();
  CLI::App* pubkey = app.add_subcommand("pubkey", "Print the public key (peer id) of a key file, in hex");
  pubkey->add_option("--key", *key_path, "Key file written by keygen")->required();
  pubkey->callback([key_path, &exit_code] {
    auto identity = Identity::load(*key_path);
    if (!identity) {
      exit_code = report_error(identity.status());
      return;
    }
    std::printf("%s\n", identity->public_key().hex().c_str());
  });
}

}  // namespace tensorhub::cli
