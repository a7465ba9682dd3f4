#include "manifest/manifest_codec.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>

#include "core/hash.hpp"
#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"
#include "core/quoted.hpp"

namespace tensorhub {
namespace manifest_detail {

void write_tensor_table(core::MsgpackWriter& w, std::span<const TensorEntry> tensors) {
  w.write_array_header(static_cast<std::uint32_t>(tensors.size()));
  for (const TensorEntry& t : tensors) {
    w.write_array_header(t.is_slice() ? 7 : 5);
    w.write_str(t.name);
    w.write_str(dtype_name(t.dtype));
    auto write_dims = [&](const std::vector<std::uint64_t>& dims) {
      w.write_array_header(static_cast<std::uint32_t>(dims.size()));
      for (std::uint64_t dim : dims) w.write_uint(dim);
    };
    write_dims(t.shape);
    w.write_uint(t.byte_offset);
    w.write_uint(t.byte_length);
    if (t.is_slice()) {
      write_dims(t.global_shape);
      write_dims(t.slice_begin);
    }
  }
}

std::vector<std::uint8_t> encode_body(const ManifestBody& body) {
  std::vector<std::uint8_t> out;
  out.reserve(256 + body.tensors.size() * 64 + body.shards.size() * (24 + shard_hash_size(body.shard_hash)));
  core::MsgpackWriter w(out);
  w.write_map_header(11 + (body.part ? 1 : 0) + (body.views.empty() ? 0 : 1));
  w.write_str("format");
  w.write_uint(kFormatVersion);
  w.write_str("model");
  w.write_str(body.model);
  w.write_str("version");
  w.write_uint(body.version);
  if (body.part) {
    w.write_str("part");
    w.write_array_header(2);
    w.write_uint(body.part->index);
    w.write_uint(body.part->count);
  }
  w.write_str("parent");
  w.write_bin(body.parent.bytes);
  w.write_str("created_ms");
  w.write_uint(body.created_unix_ms);
  w.write_str("publisher");
  w.write_bin(body.publisher.bytes);
  w.write_str("shard_hash");
  w.write_str(shard_hash_name(body.shard_hash));
  w.write_str("shard_size");
  w.write_uint(body.shard_size);
  w.write_str("total_size");
  w.write_uint(body.total_size);
  w.write_str("tensors");
  write_tensor_table(w, body.tensors);
  w.write_str("shards");
  w.write_array_header(static_cast<std::uint32_t>(body.shards.size()));
  for (const ShardEntry& s : body.shards) {
    w.write_array_header(3);
    w.write_uint(s.byte_offset);
    w.write_uint(s.byte_length);
    w.write_bin(s.digest.view());
  }
  if (!body.views.empty()) {
    w.write_str("views");
    w.write_array_header(static_cast<std::uint32_t>(body.views.size()));
    for (const ViewEntry& v : body.views) {
      w.write_array_header(3);
      w.write_bin(v.key.bytes);
      w.write_uint(v.size);
      w.write_array_header(static_cast<std::uint32_t>(v.digests.size()));
      for (const ShardDigest& d : v.digests) w.write_bin(d.view());
    }
  }
  return out;
}

ManifestId compute_manifest_id(std::span<const std::uint8_t> body_bytes) {
  ManifestId id;
  id.bytes = core::blake2b_256(std::as_bytes(body_bytes));
  return id;
}

std::vector<std::uint8_t> signing_message(std::string_view domain, const ManifestId& id) {
  std::vector<std::uint8_t> message(domain.size() + id.bytes.size());
  std::memcpy(message.data(), domain.data(), domain.size());
  std::memcpy(message.data() + domain.size(), id.bytes.data(), id.bytes.size());
  return message;
}

std::vector<std::uint8_t> signed_encoding(std::span<const std::uint8_t> body_bytes, const Signature& signature) {
  std::vector<std::uint8_t> out;
  out.reserve(body_bytes.size() + 3 + Signature::kSize);
  core::MsgpackWriter w(out);
  w.write_array_header(2);
  out.insert(out.end(), body_bytes.begin(), body_bytes.end());
  w.write_bin(signature.bytes);
  return out;
}

namespace {

Status validate_views(const ManifestBody& body) {
  if (body.views.size() > kMaxViews) {
    return Status::invalid_argument(std::to_string(body.views.size()) + " views exceed the limit of " +
                                    std::to_string(kMaxViews));
  }
  const std::size_t digest_size = shard_hash_size(body.shard_hash);
  std::uint64_t digests = 0;
  for (std::size_t i = 0; i < body.views.size(); ++i) {
    const ViewEntry& v = body.views[i];
    const std::string which = "view " + std::to_string(i);
    if (i > 0 && !(body.views[i - 1].key < v.key)) {
      return Status::invalid_argument(which + " is out of order (views are sorted by key, each once)");
    }
    if (v.size == 0 || v.size > body.total_size) {
      return Status::invalid_argument(which + " has " + std::to_string(v.size) + " bytes; a view holds 1 to the image's " +
                                      std::to_string(body.total_size));
    }
    const std::uint64_t expected = (v.size + body.shard_size - 1) / body.shard_size;
    if (v.digests.size() != expected) {
      return Status::invalid_argument(which + " has " + std::to_string(v.digests.size()) + " shard digests; " +
                                      std::to_string(v.size) + " bytes in shards of " + std::to_string(body.shard_size) +
                                      " need " + std::to_string(expected));
    }
    for (const ShardDigest& d : v.digests) {
      if (d.size != digest_size) {
        return Status::invalid_argument(which + " has a " + std::to_string(d.size) + "-byte digest; " +
                                        std::string(shard_hash_name(body.shard_hash)) + " needs " +
                                        std::to_string(digest_size));
      }
    }
    digests += expected;
  }
  if (digests > kMaxShards) {
    return Status::invalid_argument("the views have " + std::to_string(digests) + " shards, more than " +
                                    std::to_string(kMaxShards));
  }
  return Status::ok();
}

}  // namespace

Status validate_body(const ManifestBody& body) {
  TENSORHUB_RETURN_IF_ERROR(validate_model_name(body.model));
  if (!body.parent.is_zero() && body.version == 0) {
    return Status::invalid_argument("version 0 cannot have a parent (a child's version exceeds its parent's)");
  }
  if (!std::has_single_bit(body.shard_size) || body.shard_size < kMinShardSize || body.shard_size > kMaxShardSize) {
    return Status::invalid_argument("shard size " + std::to_string(body.shard_size) +
                                    " is not a power of two from 64 KiB to 1 GiB");
  }
  if (body.part && (body.part->count == 0 || body.part->count > kMaxParts || body.part->index >= body.part->count)) {
    return Status::invalid_argument("part " + std::to_string(body.part->index) + " of " +
                                    std::to_string(body.part->count) + ": parts are numbered from 0 below a count of 1 to " +
                                    std::to_string(kMaxParts));
  }
  if (body.total_size == 0) return Status::invalid_argument("the image is empty");
  if (body.total_size > kMaxImageSize) {
    return Status::invalid_argument("image of " + std::to_string(body.total_size) + " bytes exceeds the limit of " +
                                    std::to_string(kMaxImageSize));
  }
  const std::uint64_t expected_shards = (body.total_size + body.shard_size - 1) / body.shard_size;
  if (expected_shards > kMaxShards) {
    return Status::invalid_argument(std::to_string(expected_shards) + " shards exceed the limit of " +
                                    std::to_string(kMaxShards) + "; use a larger shard size");
  }
  if (body.shards.size() != expected_shards) {
    return Status::invalid_argument("the shard table has " + std::to_string(body.shards.size()) +
                                    " shards, but an image of " + std::to_string(body.total_size) +
                                    " bytes in shards of " + std::to_string(body.shard_size) + " needs " +
                                    std::to_string(expected_shards));
  }
  const std::size_t digest_size = shard_hash_size(body.shard_hash);
  for (std::size_t i = 0; i < body.shards.size(); ++i) {
    const ShardEntry& s = body.shards[i];
    const std::uint64_t offset = i * body.shard_size;
    const std::uint64_t length = std::min(body.shard_size, body.total_size - offset);
    if (s.byte_offset != offset || s.byte_length != length) {
      return Status::invalid_argument("shard " + std::to_string(i) + " covers [" + std::to_string(s.byte_offset) +
                                      ", +" + std::to_string(s.byte_length) + ") but must cover [" +
                                      std::to_string(offset) + ", +" + std::to_string(length) +
                                      ") for the shards to tile the image");
    }
    if (s.digest.size != digest_size) {
      return Status::invalid_argument("shard " + std::to_string(i) + " has a " + std::to_string(s.digest.size) +
                                      "-byte digest; " + std::string(shard_hash_name(body.shard_hash)) + " needs " +
                                      std::to_string(digest_size));
    }
  }
  if (body.tensors.size() > kMaxTensors) {
    return Status::invalid_argument(std::to_string(body.tensors.size()) + " tensors exceed the limit of " +
                                    std::to_string(kMaxTensors));
  }
  for (std::size_t i = 1; i < body.tensors.size(); ++i) {
    const TensorEntry& a = body.tensors[i - 1];
    const TensorEntry& b = body.tensors[i];
    if (std::pair(a.byte_offset, a.byte_length) > std::pair(b.byte_offset, b.byte_length)) {
      return Status::invalid_argument("tensor " + std::to_string(i) + " is out of order (tensors are sorted by offset)");
    }
  }
  if (!body.part) {
    for (const TensorEntry& t : body.tensors) {
      if (t.is_slice()) {
        return Status::invalid_argument("tensor " + core::quoted(t.name) +
                                        " is a slice, but only a part's manifest holds slices of tensors");
      }
    }
  }
  TENSORHUB_RETURN_IF_ERROR(validate_views(body));
  return validate_tensor_table(body.tensors, body.total_size);
}

namespace {

bool read_digest(core::MsgpackReader& r, ShardHashAlgorithm algorithm, ShardDigest& digest) {
  const std::size_t start = r.offset();
  std::span<const std::uint8_t> bytes;
  if (!r.read_bin("shard digest", bytes, 32)) return false;
  if (bytes.size() != shard_hash_size(algorithm)) {
    return r.fail_at(start, "shard digest", "expected " + std::to_string(shard_hash_size(algorithm)) + " bytes for " +
                                                std::string(shard_hash_name(algorithm)) + ", found " +
                                                std::to_string(bytes.size()));
  }
  std::copy(bytes.begin(), bytes.end(), digest.bytes.begin());
  digest.size = static_cast<std::uint8_t>(bytes.size());
  return true;
}

bool read_dims(core::MsgpackReader& r, std::string_view field, std::vector<std::uint64_t>& dims) {
  std::uint32_t rank = 0;
  if (!r.read_array_header(field, rank, kMaxTensorRank)) return false;
  dims.resize(rank);
  for (auto& dim : dims) {
    if (!r.read_uint(field, dim)) return false;
  }
  return true;
}

bool read_tensor(core::MsgpackReader& r, TensorEntry& t) {
  const std::size_t entry_at = r.offset();
  std::uint32_t fields = 0;
  if (!r.read_array_header("tensor entry", fields, 7)) return false;
  if (fields != 5 && fields != 7) {
    return r.fail_at(entry_at, "tensor entry", "expected 5 fields, or 7 for a slice, found " + std::to_string(fields));
  }
  std::string_view name;
  if (!r.read_str("tensor name", name, kMaxTensorNameBytes)) return false;
  t.name.assign(name);
  const std::size_t dtype_at = r.offset();
  std::string_view dtype;
  if (!r.read_str("tensor dtype", dtype, 16)) return false;
  auto parsed = dtype_from_name(dtype);
  if (!parsed) return r.fail_at(dtype_at, "tensor dtype", "unknown dtype '" + std::string(dtype) + "'");
  t.dtype = *parsed;
  if (!read_dims(r, "tensor shape", t.shape)) return false;
  if (!r.read_uint("tensor offset", t.byte_offset) || !r.read_uint("tensor length", t.byte_length)) return false;
  if (fields == 5) return true;
  const std::size_t slice_at = r.offset();
  if (!read_dims(r, "tensor global shape", t.global_shape) || !read_dims(r, "tensor slice start", t.slice_begin)) {
    return false;
  }
  // A slice is written with both; one written for a whole tensor is not canonical.
  if (!t.is_slice()) return r.fail_at(slice_at, "tensor global shape", "a slice with no dimensions");
  return true;
}

}  // namespace

Result<std::vector<TensorEntry>> read_tensor_table(std::span<const std::uint8_t> encoded) {
  core::MsgpackReader r(encoded);
  std::uint32_t count = 0;
  std::vector<TensorEntry> tensors;
  if (r.read_array_header("tensors", count, kMaxTensors, /*min_element_bytes=*/8)) {
    tensors.resize(count);
    for (auto& t : tensors) {
      if (!read_tensor(r, t)) break;
    }
  }
  TENSORHUB_RETURN_IF_ERROR(r.finish());
  return tensors;
}

}  // namespace manifest_detail

Manifest ManifestAccess::assemble(ManifestBody body, std::span<const std::uint8_t> body_bytes,
                                  const Signature& signature) {
  Manifest m;
  m.body_ = std::move(body);
  m.id_ = manifest_detail::compute_manifest_id(body_bytes);
  m.signature_ = signature;
  m.encoded_ = manifest_detail::signed_encoding(body_bytes, signature);
  return m;
}

Manifest ManifestAccess::assemble_view(ManifestBody body, const ManifestId& id) {
  Manifest m;
  m.body_ = std::move(body);
  m.id_ = id;
  return m;
}

Result<Manifest> decode_manifest(std::span<const std::uint8_t> encoded) {
  using namespace manifest_detail;
  if (encoded.size() > kMaxManifestBytes) {
    return Status::corrupt("manifest of " + std::to_string(encoded.size()) + " bytes exceeds the limit of " +
                           std::to_string(kMaxManifestBytes));
  }
  core::MsgpackReader r(encoded);
  ManifestBody body;
  r.expect_array("manifest", 2);
  const std::size_t body_start = r.offset();
  const std::size_t map_at = r.offset();
  std::uint32_t keys = 0;
  if (r.read_map_header("manifest body", keys, 13) && keys < 11) {
    r.fail_at(map_at, "manifest body", "expected 11 keys, one more for a part's manifest and one for views, found " +
                                           std::to_string(keys));
  }

  std::uint64_t format = 0;
  if (r.expect_key("format") && r.read_uint("format", format) && format != kFormatVersion) {
    r.fail("format", "unsupported manifest format " + std::to_string(format) + " (this build reads format " +
                         std::to_string(kFormatVersion) + ")");
  }
  std::string_view model;
  if (r.expect_key("model") && r.read_str("model", model, kMaxModelNameBytes)) body.model.assign(model);
  r.expect_key("version") && r.read_uint("version", body.version);
  // "part" comes here when there is one, "views" last: 12 keys are either.
  bool has_part = keys == 13;
  if (keys == 12) {
    core::MsgpackReader probe = r;
    std::string_view next;
    has_part = probe.read_str("key", next, 8) && next == "part";
  }
  const bool has_views = keys == 13 || (keys == 12 && !has_part);
  if (has_part && r.expect_key("part") && r.expect_array("part", 2)) {
    std::uint64_t index = 0, count = 0;
    if (r.read_uint("part index", index, kMaxParts) && r.read_uint("part count", count, kMaxParts)) {
      body.part = PartOf{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(count)};
    }
  }
  r.expect_key("parent") && r.read_bin_exact("parent", body.parent.bytes);
  r.expect_key("created_ms") && r.read_uint("created_ms", body.created_unix_ms);
  r.expect_key("publisher") && r.read_bin_exact("publisher", body.publisher.bytes);
  std::string_view hash_name;
  std::size_t hash_at = 0;
  if (r.expect_key("shard_hash") && (hash_at = r.offset(), r.read_str("shard_hash", hash_name, 32))) {
    if (hash_name == shard_hash_name(ShardHashAlgorithm::kXxh3_128)) {
      body.shard_hash = ShardHashAlgorithm::kXxh3_128;
    } else if (hash_name == shard_hash_name(ShardHashAlgorithm::kBlake2b_256)) {
      body.shard_hash = ShardHashAlgorithm::kBlake2b_256;
    } else {
      r.fail_at(hash_at, "shard_hash", "unknown shard hash '" + std::string(hash_name) + "'");
    }
  }
  r.expect_key("shard_size") && r.read_uint("shard_size", body.shard_size, kMaxShardSize);
  r.expect_key("total_size") && r.read_uint("total_size", body.total_size, kMaxImageSize);

  std::uint32_t tensor_count = 0;
  if (r.expect_key("tensors") &&
      r.read_array_header("tensors", tensor_count, kMaxTensors, /*min_element_bytes=*/8)) {
    body.tensors.resize(tensor_count);
    for (auto& t : body.tensors) {
      if (!read_tensor(r, t)) break;
    }
  }

  std::uint32_t shard_count = 0;
  std::size_t shards_at = 0;
  const std::size_t min_shard_bytes = 5 + shard_hash_size(body.shard_hash);
  if (r.expect_key("shards") &&
      (shards_at = r.offset(), r.read_array_header("shards", shard_count, kMaxShards, min_shard_bytes))) {
    // Bound the allocation by what the header already fixed, too.
    const std::uint64_t expected = body.shard_size >= kMinShardSize
                                       ? (body.total_size + body.shard_size - 1) / body.shard_size
                                       : 0;
    if (shard_count != expected) {
      r.fail_at(shards_at, "shards", std::to_string(shard_count) + " shards, but an image of " +
                                         std::to_string(body.total_size) + " bytes in shards of " +
                                         std::to_string(body.shard_size) + " needs " + std::to_string(expected));
    } else {
      body.shards.resize(shard_count);
      for (auto& s : body.shards) {
        if (!(r.expect_array("shard entry", 3) && r.read_uint("shard offset", s.byte_offset) &&
              r.read_uint("shard length", s.byte_length) && read_digest(r, body.shard_hash, s.digest))) {
          break;
        }
      }
    }
  }
  std::uint32_t view_count = 0;
  if (has_views && r.expect_key("views") && r.read_array_header("views", view_count, kMaxViews, /*min_element_bytes=*/36)) {
    body.views.resize(view_count);
    std::uint64_t digests = 0;
    for (ViewEntry& v : body.views) {
      std::uint32_t count = 0;
      const std::size_t digests_at = r.offset();
      if (!(r.expect_array("view", 3) && r.read_bin_exact("view key", v.key.bytes) &&
            r.read_uint("view size", v.size, kMaxImageSize) &&
            r.read_array_header("view digests", count, kMaxShards, shard_hash_size(body.shard_hash) + 1))) {
        break;
      }
      // Bound the allocation by what the manifest fixed already.
      digests += count;
      const std::uint64_t expected = body.shard_size >= kMinShardSize ? (v.size + body.shard_size - 1) / body.shard_size : 0;
      if (count != expected || digests > kMaxShards) {
        r.fail_at(digests_at, "view digests", std::to_string(count) + " digests, but a view of " + std::to_string(v.size) +
                                                  " bytes in shards of " + std::to_string(body.shard_size) + " needs " +
                                                  std::to_string(expected) + " (and all views at most " +
                                                  std::to_string(kMaxShards) + ")");
        break;
      }
      v.digests.resize(count);
      bool read = true;
      for (ShardDigest& d : v.digests) {
        if (!(read = read_digest(r, body.shard_hash, d))) break;
      }
      if (!read) break;
    }
  }
  const std::size_t body_end = r.offset();
  Signature signature;
  r.read_bin_exact("signature", signature.bytes);
  TENSORHUB_RETURN_IF_ERROR(r.finish());

  Status valid = validate_body(body);
  if (!valid.is_ok()) return Status::corrupt("invalid manifest: " + valid.message());
  const auto body_bytes = encoded.subspan(body_start, body_end - body_start);
#if TENSORHUB_DEBUG_INVARIANTS
  assert(encode_body(body) == std::vector<std::uint8_t>(body_bytes.begin(), body_bytes.end()));
#endif
  return ManifestAccess::assemble(std::move(body), body_bytes, signature);
}

}  // namespace tensorhub
