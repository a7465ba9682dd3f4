// The control protocol's request decoder (cli/control_request.hpp): what it
// accepts, each refusal by name, and thousands of seeded mutants, each
// refused in one line or accepted only when it keeps every rule.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli/control_request.hpp"
#include "manifest/slices_metadata.hpp"
#include "support/mutator.hpp"
#include "tensorhub/manifest.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

namespace {

std::string refusal(std::string_view line) {
  auto r = cli::parse_control_request(line);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  return r.status().message();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("control request: each command decodes, and paths travel as text or as hex") {
  auto fetch = cli::parse_control_request(R"({"cmd":"fetch","model":"org/policy","version":3,"out":"/tmp/x"})");
  REQUIRE(fetch.is_ok());
  CHECK(fetch->cmd == "fetch");
  CHECK(fetch->model == "org/policy");
  CHECK(fetch->version == 3);
  CHECK(fetch->out == "/tmp/x");
  // "/tmp/\xff": no JSON text can carry it, hex can.
  auto odd = cli::parse_control_request(R"({"cmd":"fetch","model":"m","out_hex":"2f746d702fff"})");
  REQUIRE(odd.is_ok());
  CHECK(odd->out == std::string("/tmp/\xff"));
  nlohmann::ordered_json built{{"cmd", "publish"}, {"model", "m"}};
  cli::put_path(built, "file", std::string("/d/\xfe.safetensors"));
  CHECK(built.contains("file_hex"));
  auto round_trip = cli::parse_control_request(built.dump());
  REQUIRE(round_trip.is_ok());
  CHECK(round_trip->file == std::string("/d/\xfe.safetensors"));
  nlohmann::ordered_json plain{{"cmd", "publish"}, {"model", "m"}};
  cli::put_path(plain, "file", "/d/m.safetensors");
  CHECK(plain["file"] == "/d/m.safetensors");
  CHECK(cli::parse_control_request(R"({"cmd":"status"})").is_ok());
  CHECK(cli::parse_control_request(R"({"cmd":"hold","model":"m","gpu":"GPU-1"})").is_ok());
  CHECK(cli::parse_control_request(R"({"cmd":"release","model":"m","version":2,"now":true})")->now);
  auto replicated = cli::parse_control_request(R"({"cmd":"wait_replicated","model":"m","version":2,"wait_replicas":3})");
  REQUIRE(replicated.is_ok());
  CHECK(replicated->wait_replicas == 3);
  auto head = cli::parse_control_request(R"({"cmd":"wait_for_head","model":"m","after":4})");
  REQUIRE(head.is_ok());
  CHECK(head->after == 4);
  auto part = cli::parse_control_request(
      R"({"cmd":"publish","model":"m","file":"/p.safetensors","version":5,"part_index":3,"part_count":8})");
  REQUIRE(part.is_ok());
  CHECK(part->version == 5);
  CHECK(part->part_index == 3);
  CHECK(part->part_count == 8);
  // A selection to fetch, and a part's declared views.
  auto selected = cli::parse_control_request(
      R"({"cmd":"fetch","model":"m","out":"/s","select":{"w":[[0,512],[32,64]],"b":null}})");
  REQUIRE_MESSAGE(selected.is_ok(), selected.status().to_string());
  REQUIRE(selected->select.size() == 2);
  CHECK(selected->select[0] == TensorSelection{"w", TensorSlice{{{0, 512}, {32, 64}}}});
  CHECK(selected->select[1] == TensorSelection{"b", {}});
  auto declared = cli::parse_control_request(
      R"({"cmd":"publish","model":"m","file":"/p","version":1,"part_index":0,"part_count":2,)"
      R"("views":[{"w":[[0,512],[0,32]]},{"w":[[0,512],[32,64]]}]})");
  REQUIRE_MESSAGE(declared.is_ok(), declared.status().to_string());
  REQUIRE(declared->views.size() == 2);
  CHECK(declared->views[1] == std::vector<TensorSelection>{{"w", TensorSlice{{{0, 512}, {32, 64}}}}});
  // A group's stage and commit.
  auto staged = cli::parse_control_request(
      R"({"cmd":"stage","model":"m","version":4,"out":"/s","group":"instance-0","group_size":2,"group_rank":1,)"
      R"("select":{"w":null}})");
  REQUIRE_MESSAGE(staged.is_ok(), staged.status().to_string());
  CHECK(staged->group == "instance-0");
  CHECK(staged->group_size == 2);
  CHECK(staged->group_rank == 1);
  CHECK(staged->select.size() == 1);
  auto committed = cli::parse_control_request(R"({"cmd":"commit","group":"instance-0","version":4,"timeout_ms":1500})");
  REQUIRE_MESSAGE(committed.is_ok(), committed.status().to_string());
  CHECK(committed->timeout_ms == 1500);
  // What a group committed: answered at once unless told to wait.
  auto asked = cli::parse_control_request(
      R"({"cmd":"committed","model":"m","group":"instance-0","group_size":2,"group_rank":1})");
  REQUIRE_MESSAGE(asked.is_ok(), asked.status().to_string());
  CHECK(asked->timeout_ms == 0);
  CHECK(asked->group_rank == 1);
  asked = cli::parse_control_request(R"({"cmd":"committed","model":"m","group":"g","group_size":1,"timeout_ms":null})");
  REQUIRE(asked.is_ok());
  CHECK(asked->timeout_ms == 0);
  asked = cli::parse_control_request(
      R"({"cmd":"committed","model":"m","group":"g","group_size":1,"timeout_ms":2000})");
  REQUIRE_MESSAGE(asked.is_ok(), asked.status().to_string());
  CHECK(asked->timeout_ms == 2000);
}

TEST_CASE("control request: refusals name what is wrong") {
  CHECK(contains(refusal("not json"), "JSON object"));
  CHECK(contains(refusal(R"({"cmd":"format-disk"})"), "unknown command"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":7})"), "\"model\" must be a string"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","version":-1})"), "non-negative integer"));
  CHECK(contains(refusal(R"({"cmd":"release","model":"m","now":"yes"})"), "true or false"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out":"/tmp/a\u0000b"})"), "NUL byte"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out_hex":"2f6100"})"), "NUL byte"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out":"relative.bin"})"), "absolute path"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"./m.safetensors"})"), "absolute path"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out":"/a","out_hex":"2f61"})"), "not both"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out_hex":"2f6"})"), "even number"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out_hex":"2fzz"})"), "out_hex"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"bad name"})"), "model name"));
  CHECK(contains(refusal(R"({"cmd":"fetch"})"), "model name is empty"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m"})"), "needs \"file\""));
  CHECK(contains(refusal(R"({"cmd":"wait_replicated","model":"m"})"), "at least 1"));
  CHECK(contains(refusal(R"({"cmd":"wait_for_head","model":"m","after":"3"})"), "non-negative integer"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","gpu":"GPU-1"})"), "\"gpu\" goes with \"hold\" only"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","out":"/)" + std::string(5000, 'a') + "\"}"), "longer than"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","version":1,"part_index":2,"part_count":2})"),
                 "below \"part_count\""));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","version":1,"part_count":70000})"),
                 "1 to 65536"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","part_count":2})"), "names its \"version\""));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","part_count":2})"), "go with publish only"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":["w"]})"), "an object of tensor names"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":{}})"), "naming at least one"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":{"w":[[4,2]]}})"), "0 <= begin < end"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":{"w":[[0,1,2]]}})"), "0 <= begin < end"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":{"w":[[-1,2]]}})"), "0 <= begin < end"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":{"w":7}})"), "null (whole) or a list"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","select":{"":null}})"), "not UTF-8 of 1 to"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","select":{"w":null}})"), "fetch and stage only"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","views":[{"w":null}]})"),
                 "a part's publish only"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","version":1,"part_count":2,"views":{}})"),
                 "a list of at most 64"));
  CHECK(contains(refusal(R"({"cmd":"publish","model":"m","file":"/p","version":1,"part_count":2,"views":[{"w":3}]})"),
                 "\"views\"[0] tensor 'w'"));
  CHECK(contains(refusal(R"({"cmd":"stage","model":"m","version":1,"group":"g","group_size":2})"), "needs \"out\""));
  CHECK(contains(refusal(R"({"cmd":"stage","model":"m","out":"/s","group":"g","group_size":2})"),
                 "names its \"version\""));
  CHECK(contains(refusal(R"({"cmd":"stage","model":"m","version":1,"out":"/s","group":"g","group_size":2,)"
                         R"("group_rank":2})"),
                 "below \"group_size\""));
  CHECK(contains(refusal(R"({"cmd":"stage","model":"m","version":1,"out":"/s","group":"bad name","group_size":1})"),
                 "\"group\""));
  CHECK(contains(refusal(R"({"cmd":"commit","version":1})"), "\"group\""));
  CHECK(contains(refusal(R"({"cmd":"commit","group":"g","version":1,"timeout_ms":0})"), "at least 1"));
  CHECK(contains(refusal(R"({"cmd":"fetch","model":"m","group":"g"})"), "go with stage, commit and committed only"));
  CHECK(contains(refusal(R"({"cmd":"committed","group":"g","group_size":1})"), "\"model\""));
  CHECK(contains(refusal(R"({"cmd":"committed","model":"m","group_size":1})"), "\"group\""));
  CHECK(contains(refusal(R"({"cmd":"committed","model":"m","group":"g","group_size":2,"group_rank":2})"),
                 "below \"group_size\""));
  CHECK(contains(refusal(R"({"cmd":"committed","model":"m","group":"g","group_size":1,"version":3})"), "takes none"));
  CHECK(contains(refusal(R"({"cmd":"commit","group":"g","version":1,"timeout_ms":86400001})"), "a day"));
}

TEST_CASE("mutation: control request decoder") {
  const std::uint64_t seed = mutation_seed(0x5eed0c01);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  const std::vector<std::string> valid = {
      R"({"cmd":"status"})",
      R"({"cmd":"publish","model":"policy","file":"/dev/shm/m.safetensors","wait_replicas":2,"release":true})",
      R"({"cmd":"fetch","model":"org/policy","version":3,"out_hex":"2f746d702fff"})",
      R"({"cmd":"hold","model":"policy","version":0,"gpu":"GPU-00000000-0000-0000-0000-000000000000"})",
      R"({"cmd":"release","model":"policy","version":1,"now":true})",
      R"({"cmd":"fetch","model":"policy","version":2,"out":"/s","select":{"w":[[0,512],[32,64]],"b":null}})",
      R"({"cmd":"publish","model":"policy","file":"/p","version":1,"part_count":2,"views":[{"w":[[0,9],[3,4]]}]})",
      R"({"cmd":"stage","model":"m","version":4,"out":"/s","group":"g","group_size":2,"group_rank":1})",
      R"({"cmd":"commit","group":"g","version":4,"timeout_ms":1500})",
      R"({"cmd":"committed","model":"m","group":"g","group_size":2,"group_rank":1,"timeout_ms":10})",
  };
  core::SplitMix64 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string& base = valid[rng.below(valid.size())];
    const auto mutant = mutate(std::vector<char>(base.begin(), base.end()), rng);
    auto r = cli::parse_control_request(std::string_view(mutant.data(), mutant.size()));
    if (!r.is_ok()) {
      CHECK(r.status().code() == StatusCode::kInvalidArgument);
      CHECK_FALSE(r.status().message().empty());
      CHECK(r.status().message().find('\n') == std::string::npos);
      continue;
    }
    ++accepted;
    for (const std::string* path : {&r->file, &r->out}) {
      if (path->empty()) continue;
      CHECK(path->front() == '/');
      CHECK(path->find('\0') == std::string::npos);
    }
    if (r->cmd != "status" && r->cmd != "commit") CHECK(validate_model_name(r->model).is_ok());
    if (!r->gpu.empty()) CHECK(r->cmd == "hold");
    if (!r->select.empty()) CHECK((r->cmd == "fetch" || r->cmd == "stage"));
    if (r->cmd == "stage" || r->cmd == "commit") {
      CHECK(validate_model_name(r->group).is_ok());
      CHECK(r->version > 0);
      CHECK(r->timeout_ms > 0);
    } else if (r->cmd == "committed") {
      CHECK(r->timeout_ms <= cli::kMaxTimeoutMs);
      CHECK(validate_model_name(r->group).is_ok());
      CHECK(r->version == 0);
    } else {
      CHECK(r->group.empty());
    }
    if (r->cmd == "stage" || r->cmd == "committed") CHECK(r->group_rank < r->group_size);
    if (!r->views.empty()) CHECK((r->cmd == "publish" && r->part_count > 0));
    for (const auto* selection : {&r->select}) {
      for (const TensorSelection& t : *selection) {
        CHECK_FALSE(t.tensor.empty());
        for (const IndexRange& range : t.slice.ranges) CHECK(range.begin < range.end);
      }
    }
  }
  MESSAGE(accepted << " of 20000 mutants decoded, every one within the rules");
}

TEST_CASE("part slices: a rank's file names its slices in metadata, and anything else is refused in one line") {
  SafetensorsLayout layout;
  layout.tensors = {TensorEntry{"w", DType::kF32, {2, 4}, 8, 32}, TensorEntry{"b", DType::kF32, {4}, 40, 16}};
  layout.metadata = {{"tensorhub.slices", R"({"w":{"global_shape":[8,4],"begin":[2,0]}})"}};
  auto tensors = manifest::part_tensors(layout);
  REQUIRE(tensors.is_ok());
  CHECK((*tensors)[0].global_shape == std::vector<std::uint64_t>{8, 4});
  CHECK((*tensors)[0].slice_begin == std::vector<std::uint64_t>{2, 0});
  CHECK_FALSE((*tensors)[1].is_slice());
  for (const auto& [text, words] : std::vector<std::pair<std::string, std::string>>{
           {"[1]", "JSON object"},
           {"{", "JSON object"},
           {R"({"x":{"global_shape":[1],"begin":[0]}})", "names 'x', which the file does not hold"},
           {R"({"w":{"global_shape":[8,4]}})", "must be {"},
           {R"({"w":{"global_shape":[8,-4],"begin":[2,0]}})", "non-negative integers"},
           {R"({"w":{"global_shape":"8","begin":[2,0]}})", "a list of at most 32"}}) {
    layout.metadata = {{"tensorhub.slices", text}};
    auto r = manifest::part_tensors(layout);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK_MESSAGE(contains(r.status().message(), words), r.status().message());
  }
  // What a fetch of a selection into a file writes reads back as the same slices.
  const std::vector<TensorEntry> written{TensorEntry{"w", DType::kF32, {2, 4}, 0, 32, {8, 4}, {2, 0}},
                                         TensorEntry{"b", DType::kF32, {4}, 32, 16}};
  layout.tensors = written;
  for (TensorEntry& t : layout.tensors) {
    t.global_shape.clear();
    t.slice_begin.clear();
  }
  layout.metadata = {{"tensorhub.slices", manifest::slices_metadata(written)}};
  auto read_back = manifest::part_tensors(layout);
  REQUIRE(read_back.is_ok());
  CHECK(*read_back == written);
  CHECK(manifest::slices_metadata(std::span(written).subspan(1)).empty());  // no slice: no entry
  layout.tensors = {TensorEntry{"w", DType::kF32, {2, 4}, 8, 32}, TensorEntry{"b", DType::kF32, {4}, 40, 16}};
  const std::string valid = R"({"w":{"global_shape":[8,4],"begin":[2,0]},"b":{"global_shape":[8],"begin":[4]}})";
  const std::uint64_t seed = mutation_seed(0x5eed0048);
  INFO("seed " << seed << " (replay with TENSORHUB_MUTATION_SEED)");
  core::SplitMix64 rng(seed);
  for (int i = 0; i < 2000; ++i) {
    const auto bytes = mutate(std::vector<std::uint8_t>(valid.begin(), valid.end()), rng);
    layout.metadata = {{"tensorhub.slices", std::string(bytes.begin(), bytes.end())}};
    auto r = manifest::part_tensors(layout);
    if (!r.is_ok()) CHECK(r.status().message().find('\n') == std::string::npos);
  }
}
