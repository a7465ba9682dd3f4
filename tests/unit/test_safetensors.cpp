#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "core/file_io.hpp"
#include "support/model_fixture.hpp"
#include "support/temp_dir.hpp"
#include "tensorhub/safetensors.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

namespace {

// A safetensors file exactly as upstream's writer lays it out.
std::vector<std::byte> file_with_header(std::string json, std::size_t data_bytes, bool pad = true) {
  if (pad) json.append((8 - json.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + json.size() + data_bytes);
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>(n >> (8 * i));
  std::memcpy(out.data() + 8, json.data(), json.size());
  for (std::size_t i = 0; i < data_bytes; ++i) out[8 + json.size() + i] = static_cast<std::byte>(i * 31 + 7);
  return out;
}

std::string rejection(const std::vector<std::byte>& file) {
  auto r = parse_safetensors(file);
  if (r.is_ok()) return "";
  CHECK(r.status().code() == StatusCode::kCorrupt);
  return r.status().message();
}

#define CHECK_REJECTS(file, words)                                                          \
  do {                                                                                      \
    const std::string message_ = rejection(file);                                           \
    CHECK_MESSAGE(!message_.empty(), "accepted, expected: " << words);                      \
    CHECK_MESSAGE(message_.find(words) != std::string::npos, "got: '" << message_ << "'"); \
  } while (0)

const std::string kUpstream =
    R"({"__metadata__":{"format":"pt","z":"a"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
    R"("b.weight":{"dtype":"U8","shape":[3,1],"data_offsets":[8,11]},"s":{"dtype":"BF16","shape":[],"data_offsets":[11,13]}})";

}  // namespace

TEST_CASE("safetensors: parses an upstream-format file into file-relative offsets") {
  const auto file = file_with_header(kUpstream, 13);
  auto layout = parse_safetensors(file);
  REQUIRE_MESSAGE(layout.is_ok(), layout.status().to_string());
  CHECK(layout->header_bytes % 8 == 0);
  CHECK(layout->data_offset == 8 + layout->header_bytes);
  REQUIRE(layout->tensors.size() == 3);
  CHECK(layout->tensors[0].name == "a");
  CHECK(layout->tensors[0].byte_offset == layout->data_offset);
  CHECK(layout->tensors[1].shape == std::vector<std::uint64_t>{3, 1});
  CHECK(layout->tensors[2].shape.empty());  // a scalar
  REQUIRE(layout->metadata.size() == 2);
  CHECK(layout->metadata[0] == std::pair<std::string, std::string>{"format", "pt"});
  CHECK(layout->metadata[1].first == "z");
}

TEST_CASE("safetensors: a file read and written back is byte-identical") {
  TempDir dir;
  const auto upstream = file_with_header(kUpstream, 13);
  const auto synthetic = small_model(3);
  for (const auto* original : {&upstream, &synthetic}) {
    REQUIRE(core::write_file_atomic(dir.file("in.safetensors"), *original, 0644, true).is_ok());
    auto file = SafetensorsFile::open(dir.file("in.safetensors"));
    REQUIRE_MESSAGE(file.is_ok(), file.status().to_string());
    CHECK(file->bytes().size() == original->size());
    const auto views = file->tensors();
    // Views are zero-copy: they point into the mapping.
    CHECK(views.front().data.data() == file->bytes().data() + file->layout().tensors.front().byte_offset);
    auto serialized = serialize_safetensors(views, file->metadata());
    REQUIRE(serialized.is_ok());
    CHECK(*serialized == *original);
    REQUIRE(write_safetensors_file(dir.file("out.safetensors"), views, file->metadata()).is_ok());
    auto written = core::read_file(dir.file("out.safetensors"), 1u << 30);
    REQUIRE(written.is_ok());
    CHECK(std::equal(written->begin(), written->end(), reinterpret_cast<const std::uint8_t*>(original->data()),
                     reinterpret_cast<const std::uint8_t*>(original->data()) + original->size()));
  }
}

TEST_CASE("safetensors: header framing is checked") {
  CHECK_REJECTS(std::vector<std::byte>(7), "too short");
  auto huge = file_with_header("{}", 0);
  huge[3] = std::byte{0x10};  // 256 MiB header length
  CHECK_REJECTS(huge, "exceeds the limit");
  auto past = file_with_header("{}", 0);
  past[0] = std::byte{100};
  CHECK_REJECTS(past, "runs past the end");
  CHECK_REJECTS(file_with_header("[]", 0), "does not start with '{'");
  CHECK_REJECTS(file_with_header(R"({"a":)", 0), "invalid JSON at header byte");
  CHECK_REJECTS(file_with_header(R"({} x)", 0), "invalid JSON");
  CHECK(rejection(file_with_header("{}", 0)).empty());  // no tensors at all is legal
}

TEST_CASE("safetensors: structure and values are validated") {
  const std::string a = R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  CHECK(rejection(file_with_header("{" + a + "}", 4)).empty());
  CHECK_REJECTS(file_with_header("{" + a + "," + a + "}", 4), "appears twice");
  CHECK_REJECTS(file_with_header(R"({"__metadata__":{"k":"1","k":"2"}})", 0), "metadata key 'k' appears twice");
  CHECK_REJECTS(file_with_header(R"({"__metadata__":{"k":1}})", 0), "values must be strings");
  CHECK_REJECTS(file_with_header(R"({"__metadata__":{},"__metadata__":{}})", 0), "appears twice");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"Q8","shape":[4],"data_offsets":[0,4]}})", 4), "unknown dtype 'Q8'");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U16","shape":[4],"data_offsets":[0,4]}})", 4), "needs 8 bytes");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", 4), "outside");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3), "outside");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6), "overlap");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6), "hole of 2 bytes");
  CHECK_REJECTS(file_with_header("{" + a + "}", 5), "1 bytes that no tensor covers");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"x":1}})", 4), "unknown field");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4]}})", 4), "lacks");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4), "repeats");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})", 4), "negative");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}})", 4), "non-integer");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[1e30],"data_offsets":[0,4]}})", 4), "non-integer");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}})", 4), "more than 2");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", 4), "exactly two");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":"U8","shape":[[4]],"data_offsets":[0,4]}})", 4), "unexpected array");
  CHECK_REJECTS(file_with_header(R"({"a":{"dtype":{"x":1},"shape":[4],"data_offsets":[0,4]}})", 4), "unexpected object");
  CHECK_REJECTS(file_with_header(R"({"a":5})", 0), "unexpected number");
  CHECK_REJECTS(file_with_header(R"({"a":null})", 0), "unexpected null");
  std::string rank33 = R"({"a":{"dtype":"U8","shape":[)";
  for (int i = 0; i < 33; ++i) rank33 += i ? ",1" : "1";
  CHECK_REJECTS(file_with_header(rank33 + R"(],"data_offsets":[0,1]}})", 1), "more than 32");
  CHECK_REJECTS(file_with_header("{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1), "invalid JSON");
}

TEST_CASE("safetensors: deep nesting cannot exhaust the stack") {
  std::string deep = R"({"a":)";
  deep += std::string(100000, '[');
  CHECK_REJECTS(file_with_header(deep, 0), "unexpected array");
}

TEST_CASE("safetensors: the writer refuses what it cannot represent") {
  std::vector<std::byte> data(4);
  std::vector<TensorView> views = {TensorView{"__metadata__", DType::kU8, {4}, data}};
  CHECK_FALSE(serialize_safetensors(views, {}).is_ok());
  views = {TensorView{"a", DType::kU16, {4}, data}};  // needs 8 bytes
  CHECK_FALSE(serialize_safetensors(views, {}).is_ok());
  views = {TensorView{"a", DType::kU8, {4}, data}, TensorView{"a", DType::kU8, {4}, data}};
  CHECK_FALSE(serialize_safetensors(views, {}).is_ok());
  views = {TensorView{"a", DType::kU8, {4}, data}};
  CHECK_FALSE(serialize_safetensors(views, {{"k", "1"}, {"k", "2"}}).is_ok());
  CHECK(serialize_safetensors(views, {{"k", "1"}}).is_ok());
}

TEST_CASE("safetensors: opening a missing or invalid file names the file") {
  TempDir dir;
  CHECK(SafetensorsFile::open(dir.file("missing")).status().code() == StatusCode::kNotFound);
  std::ofstream(dir.file("junk")) << "not a safetensors file";
  auto junk = SafetensorsFile::open(dir.file("junk"));
  CHECK(junk.status().code() == StatusCode::kCorrupt);
  CHECK(junk.status().message().find("junk") != std::string::npos);
}
