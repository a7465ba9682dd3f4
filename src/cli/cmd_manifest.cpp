// tensorhub manifest create | verify | show | diff
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "core/byte_size.hpp"
#include "core/mapped_file.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/safetensors.hpp"

namespace tensorhub::cli {
namespace {

using Json = nlohmann::ordered_json;

std::string iso_time(std::uint64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<unsigned>(unix_ms % 1000));
  return buf;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Json manifest_json(const Manifest& m, bool with_tables) {
  Json j;
  j["model"] = m.model();
  j["version"] = m.version();
  j["id"] = m.id().hex();
  j["parent"] = m.parent().is_zero() ? Json(nullptr) : Json(m.parent().hex());
  j["publisher"] = m.publisher().hex();
  j["created_unix_ms"] = m.body().created_unix_ms;
  j["created"] = iso_time(m.body().created_unix_ms);
  j["total_size"] = m.total_size();
  j["shard_size"] = m.shard_size();
  j["shard_hash"] = std::string(shard_hash_name(m.body().shard_hash));
  j["shard_count"] = m.shard_count();
  j["tensor_count"] = m.tensors().size();
  j["signature"] = m.signature().hex();
  if (m.part()) j["part"] = {{"index", m.part()->index}, {"count", m.part()->count}};
  if (!m.views().empty()) {
    Json views = Json::array();
    for (const ViewEntry& v : m.views()) views.push_back({{"key", v.key.hex()}, {"size", v.size}, {"shards", v.digests.size()}});
    j["views"] = std::move(views);
  }
  if (with_tables) {
    Json tensors = Json::array();
    for (const TensorEntry& t : m.tensors()) {
      Json entry = {{"name", t.name},
                    {"dtype", std::string(dtype_name(t.dtype))},
                    {"shape", t.shape},
                    {"offset", t.byte_offset},
                    {"length", t.byte_length}};
      if (t.is_slice()) {
        entry["global_shape"] = t.global_shape;
        entry["slice_begin"] = t.slice_begin;
      }
      tensors.push_back(std::move(entry));
    }
    j["tensors"] = std::move(tensors);
    Json shards = Json::array();
    for (const ShardEntry& s : m.body().shards) {
      shards.push_back({{"offset", s.byte_offset}, {"length", s.byte_length}, {"hash", s.digest.hex()}});
    }
    j["shards"] = std::move(shards);
  }
  return j;
}

// --- create -----------------------------------------------------------------

struct CreateArgs {
  std::string model_file, model, key, parent, out, hash = "xxh3-128";
  std::uint64_t version = 0;
  std::uint64_t shard_size = kAutoShardSize;
  unsigned threads = 0;
};

int run_create(const CreateArgs& a) {
  auto identity = Identity::load(a.key);
  if (!identity) return report_error(identity.status());
  auto file = SafetensorsFile::open(a.model_file);
  if (!file) return report_error(file.status());

  ManifestBuildOptions options;
  options.model = a.model;
  options.version = a.version;
  options.created_unix_ms = unix_time_ms();
  options.shard_size = a.shard_size;
  options.threads = a.threads;
  options.shard_hash = a.hash == "blake2b-256" ? ShardHashAlgorithm::kBlake2b_256 : ShardHashAlgorithm::kXxh3_128;
  if (!a.parent.empty()) {
    auto parent = read_manifest_file(a.parent);
    if (!parent) return report_error(parent.status());
    if (parent->model() != a.model) {
      return report_error(Status::invalid_argument("parent " + a.parent + " is a manifest of model '" +
                                                   parent->model() + "', not '" + a.model + "'"));
    }
    if (a.version <= parent->version()) {
      return report_error(Status::invalid_argument("version " + std::to_string(a.version) +
                                                   " must exceed the parent's version " +
                                                   std::to_string(parent->version())));
    }
    options.parent = parent->id();
  }

  const auto start = std::chrono::steady_clock::now();
  auto manifest = build_manifest(options, file->bytes(), file->layout().tensors, *identity);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!manifest) return report_error(manifest.status());
  Status written = write_manifest_file(*manifest, a.out);
  if (!written.is_ok()) return report_error(written);
  std::printf("%s v%llu: %zu tensors, %s in %zu shards of %s (%s), hashed at %s\n", manifest->model().c_str(),
              static_cast<unsigned long long>(manifest->version()), manifest->tensors().size(),
              core::format_byte_size(manifest->total_size()).c_str(), manifest->shard_count(),
              core::format_byte_size(manifest->shard_size()).c_str(),
              std::string(shard_hash_name(manifest->body().shard_hash)).c_str(),
              core::format_rate(static_cast<double>(manifest->total_size()) / std::max(seconds, 1e-9)).c_str());
  std::printf("id %s\nwrote %s\n", manifest->id().hex().c_str(), a.out.c_str());
  return kExitOk;
}

// --- verify -----------------------------------------------------------------

struct VerifyArgs {
  std::string manifest, data, parent;
  std::vector<std::string> publishers;
  unsigned threads = 0;
};

int run_verify(const VerifyArgs& a) {
  auto manifest = read_manifest_file(a.manifest);
  if (!manifest) return report_error(manifest.status());

  std::vector<PublicKey> trusted;
  for (const std::string& hex : a.publishers) {
    auto key = PublicKey::from_hex(hex);
    if (!key) return report_error(key.status().with_context("--publisher " + hex));
    trusted.push_back(*key);
  }
  const bool self_signed_only = trusted.empty();
  if (self_signed_only) trusted.push_back(manifest->publisher());
  Status s = verify_manifest_signature(*manifest, trusted);
  if (!s.is_ok()) return report_error(s);

  std::string checks = "signature";
  if (!a.parent.empty()) {
    auto parent = read_manifest_file(a.parent);
    if (!parent) return report_error(parent.status());
    s = verify_manifest_chain(*parent, *manifest);
    if (!s.is_ok()) return report_error(s);
    checks += ", chain";
  }
  if (!a.data.empty()) {
    auto data = core::MappedFile::open(a.data);
    if (!data) return report_error(data.status());
    s = verify_image(*manifest, data->bytes(), a.threads);
    if (!s.is_ok()) return report_error(s.with_context("data " + a.data));
    checks += ", " + std::to_string(manifest->shard_count()) + " shards of data";
  }
  std::printf("ok: %s v%llu (id %s): %s verified\n", manifest->model().c_str(),
              static_cast<unsigned long long>(manifest->version()), manifest->id().short_hex(16).c_str(),
              checks.c_str());
  if (self_signed_only) {
    std::fprintf(stderr,
                 "note: no --publisher given, so the signature was checked against the manifest's own key %s only\n",
                 manifest->publisher().hex().c_str());
  }
  return kExitOk;
}

// --- show -------------------------------------------------------------------

struct ShowArgs {
  std::string manifest;
  bool json = false, tensors = false, shards = false;
};

int run_show(const ShowArgs& a) {
  auto manifest = read_manifest_file(a.manifest);
  if (!manifest) return report_error(manifest.status());
  const Manifest& m = *manifest;
  if (a.json) {
    std::printf("%s\n", manifest_json(m, /*with_tables=*/true).dump(2).c_str());
    return kExitOk;
  }
  std::printf("model      %s\n", m.model().c_str());
  std::printf("version    %llu\n", static_cast<unsigned long long>(m.version()));
  std::printf("id         %s\n", m.id().hex().c_str());
  std::printf("parent     %s\n", m.parent().is_zero() ? "(none: first version)" : m.parent().hex().c_str());
  if (m.part()) std::printf("part       %u of %u\n", m.part()->index, m.part()->count);
  std::printf("publisher  %s\n", m.publisher().hex().c_str());
  std::printf("created    %s\n", iso_time(m.body().created_unix_ms).c_str());
  std::printf("size       %s (%llu bytes)\n", core::format_byte_size(m.total_size()).c_str(),
              static_cast<unsigned long long>(m.total_size()));
  std::printf("shards     %zu of %s, %s\n", m.shard_count(), core::format_byte_size(m.shard_size()).c_str(),
              std::string(shard_hash_name(m.body().shard_hash)).c_str());
  std::printf("tensors    %zu\n", m.tensors().size());
  for (const ViewEntry& v : m.views()) {
    std::printf("view       %s: %s in %zu shards\n", v.key.short_hex().c_str(), core::format_byte_size(v.size).c_str(),
                v.digests.size());
  }
  if (a.tensors) {
    for (const TensorEntry& t : m.tensors()) {
      std::printf("  %-48s %-8s %-20s @%llu +%llu%s\n", t.name.c_str(), std::string(dtype_name(t.dtype)).c_str(),
                  shape_text(t.shape).c_str(), static_cast<unsigned long long>(t.byte_offset),
                  static_cast<unsigned long long>(t.byte_length),
                  t.is_slice() ? (" " + t.slice().to_string() + " of " + shape_text(t.global_shape)).c_str() : "");
    }
  }
  if (a.shards) {
    for (std::size_t i = 0; i < m.shard_count(); ++i) {
      const ShardEntry& s = m.body().shards[i];
      std::printf("  shard %-6zu @%-14llu +%-10llu %s\n", i, static_cast<unsigned long long>(s.byte_offset),
                  static_cast<unsigned long long>(s.byte_length), s.digest.hex().c_str());
    }
  }
  return kExitOk;
}

// --- diff -------------------------------------------------------------------

struct DiffArgs {
  std::string from, to;
  bool json = false;
};

int run_diff(const DiffArgs& a) {
  auto from = read_manifest_file(a.from);
  if (!from) return report_error(from.status());
  auto to = read_manifest_file(a.to);
  if (!to) return report_error(to.status());
  if (from->model() != to->model()) {
    std::fprintf(stderr, "note: the manifests are of different models ('%s' and '%s')\n", from->model().c_str(),
                 to->model().c_str());
  }
  const ManifestDiff diff = diff_manifests(*from, *to);
  if (a.json) {
    Json j;
    j["from"] = {{"model", from->model()}, {"version", from->version()}, {"id", from->id().hex()}};
    j["to"] = {{"model", to->model()}, {"version", to->version()}, {"id", to->id().hex()}};
    j["comparable"] = diff.comparable;
    j["shard_count"] = to->shard_count();
    j["changed_bytes"] = diff.changed_bytes;
    j["total_size"] = to->total_size();
    Json changed = Json::array();
    for (ShardIndex i : diff.changed) {
      Json names = Json::array();
      for (TensorIndex t : to->tensors_in_shard(i)) names.push_back(to->tensors()[t.value].name);
      changed.push_back({{"shard", i.value}, {"tensors", std::move(names)}});
    }
    j["changed"] = std::move(changed);
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("%s v%llu -> v%llu: %zu of %zu shards changed (%s of %s)%s\n", to->model().c_str(),
              static_cast<unsigned long long>(from->version()), static_cast<unsigned long long>(to->version()),
              diff.changed.size(), to->shard_count(), core::format_byte_size(diff.changed_bytes).c_str(),
              core::format_byte_size(to->total_size()).c_str(),
              diff.comparable ? "" : " (different shard layout: every shard counts as changed)");
  for (ShardIndex i : diff.changed) {
    std::printf("  shard %-6u %s\n", i.value, to->describe_tensors_in_shard(i, 4).c_str());
  }
  return kExitOk;
}

}  // namespace

void add_manifest_command(CLI::App& app, int& exit_code) {
  CLI::App* manifest = app.add_subcommand("manifest", "Create, verify, show and compare version manifests");
  manifest->require_subcommand(1);

  auto create = std::make_shared<CreateArgs>();
  CLI::App* c = manifest->add_subcommand("create", "Hash a safetensors model into a signed manifest");
  c->add_option("model_file", create->model_file, "The .safetensors file (the version's bytes)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--model", create->model, "Model name, e.g. policy ([A-Za-z0-9._/-])")->required();
  c->add_option("--version", create->version, "Version number (larger than the parent's)")->required();
  c->add_option("--key", create->key, "Publisher key file (from tensorhub keygen)")->required();
  c->add_option("--parent", create->parent, "The previous version's manifest, to chain to")->check(CLI::ExistingFile);
  add_shard_size_option(*c, create->shard_size, "the version");
  c->add_option("--hash", create->hash, "Shard hash: xxh3-128 (fast) or blake2b-256 (secure mode)")
      ->check(CLI::IsMember({"xxh3-128", "blake2b-256"}));
  c->add_option("--threads", create->threads, "Hashing threads (default: one per core)");
  c->add_option("--out", create->out, "Manifest file to write")->required();
  c->callback([create, &exit_code] { exit_code = run_create(*create); });

  auto verify = std::make_shared<VerifyArgs>();
  CLI::App* v = manifest->add_subcommand(
      "verify", "Check a manifest's signature, and optionally its chain and a data file; exit 0 only if all hold");
  v->add_option("manifest", verify->manifest, "The .manifest file")->required();
  v->add_option("--data", verify->data, "The model file to check against the shard hashes");
  v->add_option("--publisher", verify->publishers, "Trusted publisher public key (hex); repeatable");
  v->add_option("--parent", verify->parent, "The parent manifest, to check the hash chain");
  v->add_option("--threads", verify->threads, "Hashing threads (default: one per core)");
  v->callback([verify, &exit_code] { exit_code = run_verify(*verify); });
  v->footer("Exit status: 0 all checks hold; 1 a check failed or the manifest is malformed; 2 bad arguments or I/O.");

  auto show = std::make_shared<ShowArgs>();
  CLI::App* s = manifest->add_subcommand("show", "Print a manifest");
  s->add_option("manifest", show->manifest, "The .manifest file")->required();
  s->add_flag("--json", show->json, "Everything, as JSON (tensor and shard tables included)");
  s->add_flag("--tensors", show->tensors, "List the tensor table");
  s->add_flag("--shards", show->shards, "List the shard table");
  s->callback([show, &exit_code] { exit_code = run_show(*show); });

  auto diff = std::make_shared<DiffArgs>();
  CLI::App* d = manifest->add_subcommand("diff", "List the shards that changed between two versions");
  d->add_option("from", diff->from, "The older .manifest")->required();
  d->add_option("to", diff->to, "The newer .manifest")->required();
  d->add_flag("--json", diff->json, "As JSON");
  d->callback([diff, &exit_code] { exit_code = run_diff(*diff); });
}

}  // namespace tensorhub::cli
