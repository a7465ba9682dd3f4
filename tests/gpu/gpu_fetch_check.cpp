// The peer's GPU path on a real GPU, through the public API, in one program
// that prints one JSON object (tests/gpu/run runs it after gpu_checks):
//   fetch     a worker fetches a version over loopback into host memory and
//             into GPU memory (MemoryOptions::gpu), alternately, 7 times
//             each: seconds of each, and the GPU copy read back and compared
//   publish   a trainer publishes the version from GPU memory (its manifest
//             hashed on the GPU); a worker fetches it into host memory,
//             verifying every shard on the CPU against those digests; then
//             a second worker, served by the first and the trainer's mirror
//   selection the trainer publishes the model in two parts, each declaring
//             a row-parallel rank's columns as a view; the worker fetches
//             that selection into GPU memory (views verified on the GPU):
//             bytes received against selected, read back and compared
// Exit status 0 when every byte matched.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "manifest/synthetic_model.hpp"
#include "tensorhub/devices.hpp"
#include "tensorhub/peer.hpp"
#include "tensorhub/safetensors.hpp"
#include "tensorhub/tensor_slice.hpp"

using namespace tensorhub;
using namespace std::chrono_literals;

namespace {

template <typename T>
T check(Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s: %s\n", what, r.status().to_string().c_str());
    std::exit(2);
  }
  return std::move(*r);
}

void check(const Status& s, const char* what) {
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(2);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::byte* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc of %zu bytes failed\n", bytes);
    std::exit(2);
  }
  return static_cast<std::byte*>(p);
}

constexpr int kRounds = 7;

std::string json_list(const std::vector<double>& values) {
  std::ostringstream o;
  o << "[";
  for (std::size_t i = 0; i < values.size(); ++i) o << (i == 0 ? "" : ", ") << values[i];
  return o.str() + "]";
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t mib = 1024;
  std::string out_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--mib") mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::string(argv[i]) == "--json") out_path = argv[i + 1];
  }
  const CudaDevices gpus = list_cuda_devices();
  if (gpus.devices.empty()) {
    std::fprintf(stderr, "no GPU: %s\n", gpus.note.c_str());
    return 2;
  }
  const CudaDeviceInfo& gpu = gpus.devices[0];

  SyntheticModelSpec spec;
  spec.data_bytes = mib << 20;
  spec.tensor_bytes = 16u << 20;
  const std::vector<std::byte> image = check(make_synthetic_safetensors(spec), "synthetic model");
  const auto tensors = check(parse_safetensors(image), "safetensors").tensors;

  const Identity trainer_key = Identity::generate();
  const SwarmKey swarm_key = SwarmKey::generate();
  PeerOptions options;
  options.listen = options.data_listen = "127.0.0.1:0";
  options.trusted_publishers = {trainer_key.public_key()};
  options.retain_head_replicas = 0;
  auto trainer = check(Peer::start(options, trainer_key.clone(), swarm_key), "trainer");
  options.seeds = {trainer->gossip_address()};
  auto worker = check(Peer::start(options, Identity::generate(), swarm_key), "worker");
  auto other = check(Peer::start(options, Identity::generate(), swarm_key), "second worker");

  int failures = 0;
  std::ostringstream o;
  o << "{\"gpu\": {\"uuid\": \"" << gpu.uuid << "\", \"rdma_registration\": \"" << gpu.rdma_registration
    << "\"}, \"bytes\": " << image.size();

  // ---- fetch: host memory against GPU memory, alternately ----
  {
    auto published = check(trainer->publish("policy", image, tensors), "publish from host");
    check(worker->wait_for_head("policy", 0, 20s), "head");
    std::byte* device = device_alloc(image.size());
    std::vector<std::byte> host(image.size());
    std::vector<double> host_s, gpu_s;
    for (int round = 0; round < kRounds; ++round) {
      {
        auto t = std::chrono::steady_clock::now();
        auto f = check(worker->fetch("policy", 1, host), "fetch into host");
        check(f.wait(300s), "fetch into host");
        host_s.push_back(seconds_since(t));
        if (host != image) ++failures;
      }
      {
        const MutableRegion regions[] = {{device, image.size()}};
        auto t = std::chrono::steady_clock::now();
        auto f = check(worker->fetch("policy", 1, regions, MemoryOptions{gpu.uuid}), "fetch into GPU");
        check(f.wait(300s), "fetch into GPU");
        gpu_s.push_back(seconds_since(t));
        std::vector<std::byte> back(image.size());
        cudaMemcpy(back.data(), device, image.size(), cudaMemcpyDeviceToHost);
        if (back != image) ++failures;
      }
    }
    const double host_best = *std::min_element(host_s.begin(), host_s.end());
    const double gpu_best = *std::min_element(gpu_s.begin(), gpu_s.end());
    o << ", \"fetch\": {\"host_seconds\": " << json_list(host_s) << ", \"gpu_seconds\": " << json_list(gpu_s)
      << ", \"gpu_speed_of_host_best\": " << host_best / gpu_best
      << ", \"gpu_speed_of_host_median\": " << median(host_s) / median(gpu_s) << ", \"status\": " << worker->status_json()
      << "}";
    published.release();
    cudaFree(device);
  }

  // ---- publish from GPU memory ----
  {
    std::byte* device = device_alloc(image.size());
    cudaMemcpy(device, image.data(), image.size(), cudaMemcpyHostToDevice);
    const ConstRegion regions[] = {{device, image.size()}};
    auto t = std::chrono::steady_clock::now();
    auto published = check(trainer->publish("gpu-policy", regions, tensors, MemoryOptions{gpu.uuid}),
                           "publish from GPU");
    const double publish_s = seconds_since(t);
    check(other->wait_for_head("gpu-policy", 0, 20s), "head");
    std::vector<std::byte> host(image.size());
    t = std::chrono::steady_clock::now();
    auto f = check(other->fetch("gpu-policy", 1, host), "fetch from a GPU publisher");
    check(f.wait(300s), "fetch from a GPU publisher");
    const double fetch_s = seconds_since(t);
    if (host != image) ++failures;
    // A second fetcher, once the first holds it too and the mirror is up.
    std::vector<std::byte> again(image.size());
    t = std::chrono::steady_clock::now();
    auto f2 = check(worker->fetch("gpu-policy", 1, again), "second fetch from a GPU publisher");
    check(f2.wait(300s), "second fetch from a GPU publisher");
    const double second_s = seconds_since(t);
    if (again != image) ++failures;
    o << ", \"publish\": {\"hash_and_sign_seconds\": " << publish_s << ", \"fetch_from_gpu_seconds\": " << fetch_s
      << ", \"second_fetch_seconds\": " << second_s
      << ", \"bytes_equal\": " << (host == image && again == image ? "true" : "false")
      << ", \"publisher_status\": " << trainer->status_json() << "}";
    published.release();
    cudaFree(device);
  }
  // ---- a selection into GPU memory by its views (issue 48) ----
  // The trainer publishes the model as two parts (FSDP: each 2-D tensor's
  // half of the rows; 1-D ones whole in part 0), each declaring a
  // row-parallel rank's columns [512, 1024) of every 2-D tensor; the worker
  // fetches that selection into GPU memory, where it lands by the views
  // and verifies on the device.
  {
    std::vector<TensorSelection> selection;
    std::vector<std::vector<ConstRegion>> part_regions(2);
    std::vector<std::vector<TensorEntry>> part_tensors(2);
    std::vector<std::uint64_t> part_bytes(2, 0);
    for (const TensorEntry& t : tensors) {
      const bool split = t.shape.size() == 2 && t.shape[0] % 2 == 0 && t.shape[1] == 1024;
      for (std::uint32_t r = 0; r < 2; ++r) {
        if (!split && r == 1) continue;
        const std::uint64_t rows = split ? t.shape[0] / 2 : 0;
        const std::uint64_t length = split ? t.byte_length / 2 : t.byte_length;
        part_regions[r].push_back({image.data() + t.byte_offset + (split ? r * length : 0), length});
        TensorEntry e{t.name, t.dtype, split ? std::vector<std::uint64_t>{rows, 1024} : t.shape, part_bytes[r], length};
        if (split) {
          e.global_shape = t.shape;
          e.slice_begin = {r * rows, 0};
        }
        part_tensors[r].push_back(std::move(e));
        part_bytes[r] += length;
      }
      if (split) selection.push_back(TensorSelection{t.name, TensorSlice{{{0, t.shape[0]}, {512, 1024}}}});
    }
    PartOptions declared;
    declared.views = {selection};
    std::vector<PublishHandle> parts;
    for (std::uint32_t r = 0; r < 2; ++r) {
      parts.push_back(check(trainer->publish_part("slices", 1, r, 2, part_regions[r], part_tensors[r], declared),
                            "publish a part with a view"));
    }
    for (auto& part : parts) check(part.wait_sealed(60s), "seal");
    check(worker->wait_for_head("slices", 0, 20s), "head of the parts");
    std::vector<std::byte> expected;
    for (const TensorEntry& t : tensors) {
      if (!(t.shape.size() == 2 && t.shape[0] % 2 == 0 && t.shape[1] == 1024)) continue;
      for (std::uint64_t row = 0; row < t.shape[0]; ++row) {
        const std::byte* from = image.data() + t.byte_offset + row * 2048 + 1024;
        expected.insert(expected.end(), from, from + 1024);
      }
    }
    std::byte* device = device_alloc(expected.size());
    const MutableRegion regions[] = {{device, expected.size()}};
    auto t = std::chrono::steady_clock::now();
    auto f = check(worker->fetch_selection("slices", 1, selection, regions, MemoryOptions{gpu.uuid}),
                   "fetch a selection into GPU");
    check(f.wait(300s), "fetch a selection into GPU");
    const double seconds = seconds_since(t);
    std::vector<std::byte> back(expected.size());
    cudaMemcpy(back.data(), device, expected.size(), cudaMemcpyDeviceToHost);
    if (back != expected) ++failures;
    o << ", \"selection\": {\"selected_bytes\": " << expected.size()
      << ", \"bytes_received\": " << f.progress().bytes_received << ", \"gpu_seconds\": " << seconds
      << ", \"bytes_equal\": " << (back == expected ? "true" : "false") << "}";
    f.release();
    parts.clear();
    cudaFree(device);
  }
  o << ", \"failures\": " << failures << "}\n";
  std::fputs(o.str().c_str(), stdout);
  if (!out_path.empty()) std::ofstream(out_path) << o.str();
  return failures == 0 ? 0 : 1;
}
