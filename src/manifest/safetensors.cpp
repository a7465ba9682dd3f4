#include "tensorhub/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/file_io.hpp"
#include "core/mapped_file.hpp"
#include "core/quoted.hpp"

namespace tensorhub {
namespace {

using Json = nlohmann::json;

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<std::uint8_t>(p[i]);
  return v;
}

std::string shown(std::string_view name) { return core::quoted(name); }

// Parses the JSON header straight into a layout, in one pass and with memory
// proportional to the tensors it describes: no DOM, so a hostile 100 MB
// header cannot balloon into gigabytes. Structure enforced as it streams:
//   depth 1: the root object; keys are tensor names or "__metadata__"
//   depth 2: a tensor object {dtype, shape, data_offsets}, or metadata {str: str}
//   depth 3: the shape or data_offsets array of unsigned integers
class HeaderParser final : public nlohmann::json_sax<Json> {
 public:
  struct RawTensor {
    std::string name;
    std::string dtype;
    std::vector<std::uint64_t> shape;
    std::vector<std::uint64_t> offsets;
    unsigned fields_seen = 0;  // bit per field
  };

  std::vector<RawTensor> tensors;
  SafetensorsMetadata metadata;
  std::string error;

  bool null() override { return fail("unexpected null"); }
  bool boolean(bool) override { return fail("unexpected boolean"); }
  bool number_integer(number_integer_t) override { return fail("negative number in " + where()); }
  bool number_float(number_float_t, const string_t&) override {
    return fail("non-integer or too large number in " + where());
  }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }

  bool number_unsigned(number_unsigned_t value) override {
    if (depth_ != 3) return fail("unexpected number in " + where());
    auto& t = tensors.back();
    std::vector<std::uint64_t>& list = field_ == Field::kShape ? t.shape : t.offsets;
    const std::size_t limit = field_ == Field::kShape ? kMaxTensorRank : 2;
    if (list.size() >= limit) {
      return fail(std::string(field_ == Field::kShape ? "shape" : "data_offsets") + " of tensor " + shown(t.name) +
                  " has more than " + std::to_string(limit) + " entries");
    }
    list.push_back(value);
    return true;
  }

  bool string(string_t& value) override {
    if (depth_ == 2 && in_metadata_) {
      metadata.emplace_back(std::move(pending_key_), std::move(value));
      return true;
    }
    if (depth_ == 2 && field_ == Field::kDtype) {
      tensors.back().dtype = std::move(value);
      return true;
    }
    return fail("unexpected string in " + where());
  }

  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) return true;
    if (depth_ == 2) return true;  // metadata, or a tensor whose RawTensor key() pushed
    return fail("unexpected object in " + where());
  }

  bool key(string_t& key) override {
    if (depth_ == 1) {
      in_metadata_ = key == "__metadata__";
      if (in_metadata_) {
        if (seen_metadata_) return fail("\"__metadata__\" appears twice");
        seen_metadata_ = true;
        return true;
      }
      if (!names_.insert(key).second) return fail("tensor " + shown(key) + " appears twice");
      tensors.push_back(RawTensor{});
      tensors.back().name = std::move(key);
      return true;
    }
    if (depth_ == 2 && in_metadata_) {
      if (!metadata_keys_.insert(key).second) return fail("metadata key " + shown(key) + " appears twice");
      pending_key_ = std::move(key);
      return true;
    }
    if (depth_ == 2) {
      auto& t = tensors.back();
      if (key == "dtype") field_ = Field::kDtype;
      else if (key == "shape") field_ = Field::kShape;
      else if (key == "data_offsets") field_ = Field::kOffsets;
      else return fail("tensor " + shown(t.name) + " has an unknown field " + shown(key));
      const unsigned bit = 1u << static_cast<unsigned>(field_);
      if (t.fields_seen & bit) return fail("tensor " + shown(t.name) + " repeats field " + shown(key));
      t.fields_seen |= bit;
      return true;
    }
    return fail("unexpected key in " + where());
  }

  bool end_object() override {
    if (depth_ == 2 && !in_metadata_) {
      const auto& t = tensors.back();
      if (t.fields_seen != 7u) return fail("tensor " + shown(t.name) + " lacks dtype, shape or data_offsets");
    }
    if (depth_ == 2) in_metadata_ = false;
    --depth_;
    return true;
  }

  bool start_array(std::size_t) override {
    ++depth_;
    if (depth_ == 3 && !in_metadata_ && (field_ == Field::kShape || field_ == Field::kOffsets)) return true;
    return fail("unexpected array in " + where());
  }

  bool end_array() override {
    if (field_ == Field::kOffsets && tensors.back().offsets.size() != 2) {
      return fail("data_offsets of tensor " + shown(tensors.back().name) + " must hold exactly two numbers");
    }
    --depth_;
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    // nlohmann's message is "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
    std::string what = ex.what();
    if (auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    return fail("invalid JSON at header byte " + std::to_string(position) + ": " + what);
  }

 private:
  enum class Field : unsigned { kDtype = 0, kShape = 1, kOffsets = 2 };

  bool fail(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  std::string where() const {
    if (depth_ <= 1 && !in_metadata_) return "the header's top level";
    if (in_metadata_) return "\"__metadata__\" (values must be strings)";
    return "tensor " + shown(tensors.empty() ? "" : tensors.back().name);
  }

  int depth_ = 0;
  bool in_metadata_ = false;
  bool seen_metadata_ = false;
  Field field_ = Field::kDtype;
  std::string pending_key_;
  std::unordered_set<std::string> names_;
  std::unordered_set<std::string> metadata_keys_;
};

Status corrupt(const std::string& message) { return Status::corrupt("safetensors: " + message); }

}  // namespace

Result<SafetensorsLayout> parse_safetensors(std::span<const std::byte> file) {
  if (file.size() < 8) {
    return corrupt("file of " + std::to_string(file.size()) + " bytes is too short for the 8-byte header length");
  }
  SafetensorsLayout layout;
  layout.file_size = file.size();
  layout.header_bytes = read_le64(file.data());
  if (layout.header_bytes > kMaxSafetensorsHeaderBytes) {
    return corrupt("header length " + std::to_string(layout.header_bytes) + " exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes));
  }
  if (layout.header_bytes > file.size() - 8) {
    return corrupt("header length " + std::to_string(layout.header_bytes) + " runs past the end of the " +
                   std::to_string(file.size()) + "-byte file");
  }
  layout.data_offset = 8 + layout.header_bytes;
  const auto* header = reinterpret_cast<const char*>(file.data() + 8);
  if (layout.header_bytes == 0 || header[0] != '{') return corrupt("header does not start with '{'");

  HeaderParser parser;
  const bool parsed = Json::sax_parse(header, header + layout.header_bytes, &parser, nlohmann::detail::input_format_t::json,
                                      /*strict=*/true);
  if (!parsed || !parser.error.empty()) {
    return corrupt(parser.error.empty() ? "invalid JSON header" : parser.error);
  }

  const std::uint64_t data_size = file.size() - layout.data_offset;
  layout.metadata = std::move(parser.metadata);
  layout.tensors.reserve(parser.tensors.size());
  for (auto& raw : parser.tensors) {
    auto dtype = dtype_from_name(raw.dtype);
    if (!dtype) return corrupt("tensor " + shown(raw.name) + " has unknown dtype " + shown(raw.dtype));
    const std::uint64_t begin = raw.offsets[0], end = raw.offsets[1];
    if (begin > end || end > data_size) {
      return corrupt("tensor " + shown(raw.name) + " has data_offsets [" + std::to_string(begin) + ", " +
                     std::to_string(end) + "] outside the " + std::to_string(data_size) + "-byte data buffer");
    }
    TensorEntry t;
    t.name = std::move(raw.name);
    t.dtype = *dtype;
    t.shape = std::move(raw.shape);
    t.byte_offset = layout.data_offset + begin;
    t.byte_length = end - begin;
    layout.tensors.push_back(std::move(t));
  }
  Status table = validate_tensor_table(layout.tensors, layout.file_size);
  if (!table.is_ok()) return corrupt(table.message());

  // As upstream: the tensors must cover the data buffer exactly.
  std::sort(layout.tensors.begin(), layout.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::pair(a.byte_offset, a.byte_length) < std::pair(b.byte_offset, b.byte_length);
  });
  std::uint64_t covered = layout.data_offset;
  for (const TensorEntry& t : layout.tensors) {
    if (t.byte_offset != covered) {
      return corrupt("data buffer has a hole of " + std::to_string(t.byte_offset - covered) + " bytes before tensor " +
                     shown(t.name));
    }
    covered += t.byte_length;
  }
  if (covered != layout.file_size) {
    return corrupt("data buffer has " + std::to_string(layout.file_size - covered) +
                   " bytes that no tensor covers at its end");
  }
  return layout;
}

struct SafetensorsFile::Mapping {
  core::MappedFile file;
};

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto mapped = core::MappedFile::open(path);
  if (!mapped) return mapped.status();
  auto layout = parse_safetensors(mapped->bytes());
  if (!layout) return layout.status().with_context(path);
  SafetensorsFile file;
  file.mapping_ = std::make_unique<Mapping>(Mapping{std::move(*mapped)});
  file.layout_ = std::move(*layout);
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

std::span<const std::byte> SafetensorsFile::bytes() const {
  return mapping_ ? mapping_->file.bytes() : std::span<const std::byte>{};
}

std::vector<TensorView> SafetensorsFile::tensors() const {
  std::vector<TensorView> views;
  views.reserve(layout_.tensors.size());
  const auto image = bytes();
  for (const TensorEntry& t : layout_.tensors) {
    views.push_back(TensorView{t.name, t.dtype, t.shape, image.subspan(t.byte_offset, t.byte_length)});
  }
  return views;
}

namespace {

std::vector<TensorEntry> entries_in_order(std::span<const TensorView> tensors) {
  std::vector<TensorEntry> entries;
  entries.reserve(tensors.size());
  std::uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    entries.push_back(TensorEntry{t.name, t.dtype, t.shape, offset, t.data.size()});
    offset += t.data.size();
  }
  return entries;
}

}  // namespace

Result<std::vector<std::byte>> encode_safetensors_header(std::span<const TensorEntry> tensors,
                                                          const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) {
      if (meta.contains(k)) return Status::invalid_argument("metadata key " + shown(k) + " appears twice");
      meta[k] = v;
    }
    root["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const TensorEntry& t : tensors) {
    if (t.name == "__metadata__") return Status::invalid_argument("a tensor may not be named \"__metadata__\"");
    if (t.byte_offset != offset) {
      return Status::invalid_argument("tensor " + shown(t.name) + " does not follow the previous one in the data buffer");
    }
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = std::string(dtype_name(t.dtype));
    info["shape"] = t.shape;
    info["data_offsets"] = {offset, offset + t.byte_length};
    root[t.name] = std::move(info);
    offset += t.byte_length;
  }
  TENSORHUB_RETURN_IF_ERROR(validate_tensor_table(tensors, offset));
  std::string json;
  try {
    json = root.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(std::string("cannot encode the header: ") + e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // upstream pads to 8 bytes with spaces
  if (json.size() > kMaxSafetensorsHeaderBytes) return Status::invalid_argument("the header would exceed 100 MB");
  std::vector<std::byte> out(8 + json.size());
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>(n >> (8 * i));
  std::memcpy(out.data() + 8, json.data(), json.size());
  return out;
}

Result<std::vector<std::byte>> serialize_safetensors(std::span<const TensorView> tensors,
                                                     const SafetensorsMetadata& metadata) {
  auto header = encode_safetensors_header(entries_in_order(tensors), metadata);
  if (!header) return header.status();
  std::size_t total = header->size();
  for (const TensorView& t : tensors) total += t.data.size();
  std::vector<std::byte> out;
  out.reserve(total);
  out.insert(out.end(), header->begin(), header->end());
  for (const TensorView& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

Status write_safetensors_file(const std::string& path, std::span<const TensorView> tensors,
                              const SafetensorsMetadata& metadata) {
  auto header = encode_safetensors_header(entries_in_order(tensors), metadata);
  if (!header) return header.status();
  auto writer = core::AtomicFileWriter::create(path, 0644, /*overwrite=*/true);
  if (!writer) return writer.status();
  TENSORHUB_RETURN_IF_ERROR(writer->append(*header));
  for (const TensorView& t : tensors) TENSORHUB_RETURN_IF_ERROR(writer->append(t.data));
  return writer->commit();
}

}  // namespace tensorhub
