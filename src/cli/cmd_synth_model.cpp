// tensorhub synth-model: seeded synthetic safetensors weights for demos and tests.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_common.hpp"
#include "core/byte_size.hpp"
#include "core/file_io.hpp"
#include "core/mapped_file.hpp"
#include "manifest/synthetic_model.hpp"
#include "tensorhub/safetensors.hpp"

namespace tensorhub::cli {
namespace {

struct SynthArgs {
  std::string out, from;
  std::uint64_t size = 64ull << 20;
  std::uint64_t tensor_size = 4ull << 20;
  std::uint64_t seed = 1;
  double change = 0.25;
};

int run_synth(const SynthArgs& a) {
  std::vector<std::byte> file;
  if (a.from.empty()) {
    SyntheticModelSpec spec;
    spec.data_bytes = a.size;
    spec.tensor_bytes = a.tensor_size;
    spec.seed = a.seed;
    auto made = make_synthetic_safetensors(spec);
    if (!made) return report_error(made.status());
    file = std::move(*made);
  } else {
    auto base = core::MappedFile::open(a.from);
    if (!base) return report_error(base.status());
    file.assign(base->bytes().begin(), base->bytes().end());
    auto changed = mutate_safetensors(file, a.change, a.seed);
    if (!changed) return report_error(changed.status().with_context(a.from));
    std::fprintf(stderr, "changed %zu tensors of %s\n", *changed, a.from.c_str());
  }
  Status s = core::write_file_atomic(a.out, file, 0644, /*overwrite=*/true);
  if (!s.is_ok()) return report_error(s);
  std::printf("wrote %s (%s)\n", a.out.c_str(), core::format_byte_size(file.size()).c_str());
  return kExitOk;
}

}  // namespace

void add_synth_model_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* c = app.add_subcommand(
      "synth-model", "Write seeded synthetic BF16 weights as safetensors, or a next version of such a file");
  c->add_option("--out", args->out, "The .safetensors file to write")->required();
  add_size_option(*c, "--size", args->size, "Bytes of tensor data (default 64MiB)");
  add_size_option(*c, "--tensor-size", args->tensor_size, "Bytes per tensor (default 4MiB)");
  c->add_option("--seed", args->seed, "Seed of the weights (default 1)");
  c->add_option("--from", args->from, "Derive a next version from this file instead")->check(CLI::ExistingFile);
  c->add_option("--change", args->change, "With --from: the fraction of tensors that change (default 0.25)")
      ->check(CLI::Range(0.0, 1.0));
  c->callback([args, &exit_code] { exit_code = run_synth(*args); });
}

}  // namespace tensorhub::cli
