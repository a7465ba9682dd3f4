#include "tensorhub/seal.hpp"

#include <algorithm>
#include <cassert>
#include <map>
#include <string_view>

#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"
#include "core/quoted.hpp"
#include "manifest/manifest_codec.hpp"
#include "manifest/slice_algebra.hpp"

namespace tensorhub {
namespace {

constexpr std::uint64_t kSealFormat = 1;
constexpr std::string_view kSealSigningDomain{"tensorhub seal v1\0", 18};

std::vector<std::uint8_t> encode_seal_body(const SealBody& b) {
  std::vector<std::uint8_t> out;
  out.reserve(160 + b.parts.size() * 34);
  core::MsgpackWriter w(out);
  w.write_map_header(5);
  w.write_str("seal");
  w.write_uint(kSealFormat);
  w.write_str("model");
  w.write_str(b.model);
  w.write_str("version");
  w.write_uint(b.version);
  w.write_str("parent");
  w.write_bin(b.parent.bytes);
  w.write_str("parts");
  w.write_array_header(static_cast<std::uint32_t>(b.parts.size()));
  for (const ManifestId& part : b.parts) w.write_bin(part.bytes);
  return out;
}

std::vector<std::uint8_t> seal_signing_message(const ManifestId& id) {
  return manifest_detail::signing_message(kSealSigningDomain, id);
}

Status validate_seal_body(const SealBody& b) {
  TENSORHUB_RETURN_IF_ERROR(validate_model_name(b.model));
  if (!b.parent.is_zero() && b.version == 0) {
    return Status::invalid_argument("version 0 cannot have a parent (a child's version exceeds its parent's)");
  }
  if (b.parts.empty() || b.parts.size() > kMaxParts) {
    return Status::invalid_argument("a seal names " + std::to_string(b.parts.size()) + " parts; it takes 1 to " +
                                    std::to_string(kMaxParts));
  }
  std::vector<ManifestId> sorted = b.parts;
  std::sort(sorted.begin(), sorted.end(), [](const ManifestId& x, const ManifestId& y) { return x.bytes < y.bytes; });
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    return Status::invalid_argument("the seal names manifest " + twice->short_hex() + " as two parts");
  }
  return Status::ok();
}

}  // namespace

struct SealAccess {
  // REQUIRES: body_bytes == encode_seal_body(body), and body passed validate_seal_body.
  static Seal assemble(SealBody body, std::span<const std::uint8_t> body_bytes, const PublicKey& publisher,
                       const Signature& signature) {
    Seal s;
    s.body_ = std::move(body);
    s.id_ = manifest_detail::compute_manifest_id(body_bytes);
    s.publisher_ = publisher;
    s.signature_ = signature;
    s.encoded_.reserve(body_bytes.size() + 104);
    core::MsgpackWriter w(s.encoded_);
    w.write_array_header(3);
    s.encoded_.insert(s.encoded_.end(), body_bytes.begin(), body_bytes.end());
    w.write_bin(publisher.bytes);
    w.write_bin(signature.bytes);
    return s;
  }
};

Result<Seal> make_seal(SealBody body, const Identity& publisher) {
  TENSORHUB_RETURN_IF_ERROR(validate_seal_body(body));
  const std::vector<std::uint8_t> body_bytes = encode_seal_body(body);
  const Signature signature = publisher.sign(seal_signing_message(manifest_detail::compute_manifest_id(body_bytes)));
  return SealAccess::assemble(std::move(body), body_bytes, publisher.public_key(), signature);
}

Result<Seal> decode_seal(std::span<const std::uint8_t> encoded) {
  if (encoded.size() > kMaxSealBytes) {
    return Status::corrupt("seal of " + std::to_string(encoded.size()) + " bytes exceeds the limit of " +
                           std::to_string(kMaxSealBytes));
  }
  core::MsgpackReader r(encoded);
  SealBody body;
  r.expect_array("seal", 3);
  const std::size_t body_start = r.offset();
  r.expect_map("seal body", 5);
  std::uint64_t format = 0;
  if (r.expect_key("seal") && r.read_uint("seal", format) && format != kSealFormat) {
    r.fail("seal", "unsupported seal format " + std::to_string(format) + " (this build reads format " +
                       std::to_string(kSealFormat) + ")");
  }
  std::string_view model;
  if (r.expect_key("model") && r.read_str("model", model, kMaxModelNameBytes)) body.model.assign(model);
  r.expect_key("version") && r.read_uint("version", body.version);
  r.expect_key("parent") && r.read_bin_exact("parent", body.parent.bytes);
  std::uint32_t parts = 0;
  if (r.expect_key("parts") && r.read_array_header("parts", parts, kMaxParts, /*min_element_bytes=*/34)) {
    body.parts.resize(parts);
    for (ManifestId& part : body.parts) {
      if (!r.read_bin_exact("part", part.bytes)) break;
    }
  }
  const std::size_t body_end = r.offset();
  PublicKey publisher;
  r.read_bin_exact("publisher", publisher.bytes);
  Signature signature;
  r.read_bin_exact("signature", signature.bytes);
  TENSORHUB_RETURN_IF_ERROR(r.finish());
  Status valid = validate_seal_body(body);
  if (!valid.is_ok()) return Status::corrupt("invalid seal: " + valid.message());
  const auto body_bytes = encoded.subspan(body_start, body_end - body_start);
#if TENSORHUB_DEBUG_INVARIANTS
  assert(encode_seal_body(body) == std::vector<std::uint8_t>(body_bytes.begin(), body_bytes.end()));
#endif
  return SealAccess::assemble(std::move(body), body_bytes, publisher, signature);
}

Status verify_seal_signature(const Seal& seal, std::span<const PublicKey> trusted) {
  const PublicKey& publisher = seal.publisher();
  if (std::find(trusted.begin(), trusted.end(), publisher) == trusted.end()) {
    return Status::verify_failed("seal: publisher " + publisher.hex() + " is not a trusted key");
  }
  if (!verify_signature(publisher, seal_signing_message(seal.id()), seal.signature())) {
    return Status::verify_failed("seal: invalid signature by publisher " + publisher.short_hex() + " over seal " +
                                 seal.id().short_hex());
  }
  return Status::ok();
}

Status check_sealed_parts(const Seal& seal, std::span<const Manifest* const> parts) {
  const SealBody& s = seal.body();
  if (parts.size() != s.parts.size()) {
    return Status::verify_failed("the seal names " + std::to_string(s.parts.size()) + " parts, but " +
                                 std::to_string(parts.size()) + " were given");
  }
  struct Tensor {
    DType dtype = DType::kU8;
    const std::vector<std::uint64_t>* shape = nullptr;
    std::uint32_t first_part = 0;
    std::vector<manifest::PartSlice> slices;
  };
  std::map<std::string_view, Tensor> tensors;
  for (std::uint32_t i = 0; i < parts.size(); ++i) {
    const std::string part = "part " + std::to_string(i);
    const Manifest* m = parts[i];
    if (m == nullptr || m->id() != s.parts[i]) {
      return Status::verify_failed(part + " is not manifest " + s.parts[i].short_hex() + ", which the seal names");
    }
    if (m->model() != s.model || m->version() != s.version || m->parent() != s.parent) {
      return Status::verify_failed(part + " is of " + core::quoted(m->model()) + " v" + std::to_string(m->version()) +
                                   " after " + m->parent().short_hex() + "; the seal is of " + core::quoted(s.model) +
                                   " v" + std::to_string(s.version) + " after " + s.parent.short_hex());
    }
    if (!m->part() || m->part()->index != i || m->part()->count != parts.size()) {
      return Status::verify_failed(part + "'s manifest says it is " +
                                   (m->part() ? "part " + std::to_string(m->part()->index) + " of " +
                                                    std::to_string(m->part()->count)
                                              : std::string("a whole version")) +
                                   ", but the seal has " + std::to_string(parts.size()));
    }
    for (const TensorEntry& t : m->tensors()) {
      auto [it, first] = tensors.try_emplace(t.name);
      Tensor& seen = it->second;
      if (first) {
        seen.dtype = t.dtype;
        seen.shape = &t.whole_shape();
        seen.first_part = i;
      } else if (seen.dtype != t.dtype || *seen.shape != t.whole_shape()) {
        return Status::verify_failed("tensor " + core::quoted(t.name) + " differs in dtype or shape between part " +
                                     std::to_string(seen.first_part) + " and " + part);
      }
      seen.slices.push_back(manifest::PartSlice{i, t.slice()});
    }
  }
  for (const auto& [name, t] : tensors) {
    if (Status covered = manifest::check_exact_cover(name, *t.shape, t.slices); !covered.is_ok()) {
      return Status::verify_failed(covered.message());
    }
  }
  return Status::ok();
}

}  // namespace tensorhub
