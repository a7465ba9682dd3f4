// Blocks cut into READs, failures into remedies, NICs ranked by place.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "rdma/nic_affinity.hpp"
#include "rdma/read_failure.hpp"
#include "rdma/read_plan.hpp"
#include "support/temp_dir.hpp"
#include "tensorhub/devices.hpp"

using namespace tensorhub;
using namespace tensorhub::rdma;

TEST_CASE("read plan: a block inside one region and one destination piece is one READ") {
  std::vector<std::byte> dst(4096);
  const std::vector<GrantRegion> grant = {{0, 0x10000, 1 << 20, {5}}};
  const std::span<std::byte> pieces[] = {dst};
  auto plan = plan_reads(grant, 8192, 4096, pieces, 4);
  REQUIRE(plan.is_ok());
  REQUIRE(plan->size() == 1);
  CHECK((*plan)[0].remote_addr == 0x10000 + 8192);
  CHECK((*plan)[0].length == 4096);
  CHECK((*plan)[0].local.size() == 1);
}

TEST_CASE("read plan: a block spanning holder regions and destination pieces is cut at every boundary") {
  std::vector<std::byte> dst(300);
  const std::span<std::byte> pieces[] = {std::span(dst).first(50), std::span(dst).subspan(50, 0),
                                         std::span(dst).subspan(50, 200), std::span(dst).subspan(250)};
  // Holder regions: [0,100) at 0x1000, [100,160) at 0x9000, [160,1000) at 0x20000.
  const std::vector<GrantRegion> grant = {{0, 0x1000, 100, {1}}, {100, 0x9000, 60, {2}}, {160, 0x20000, 840, {3}}};
  auto plan = plan_reads(grant, 20, 300, pieces, 2);
  REQUIRE(plan.is_ok());
  std::uint64_t at = 20, total = 0;
  std::byte* expect_local = dst.data();
  for (const PlannedRead& r : *plan) {
    const GrantRegion& g = grant[r.region];
    CHECK(r.remote_addr == g.addr + (at - g.offset));  // contiguous in one holder region
    CHECK(at + r.length <= g.offset + g.length);
    CHECK(r.local.size() <= 2);
    std::uint64_t local = 0;
    for (auto s : r.local) {
      CHECK(s.data() == expect_local);  // local pieces fill the destination in order
      expect_local += s.size();
      local += s.size();
    }
    CHECK(local == r.length);
    at += r.length;
    total += r.length;
  }
  CHECK(total == 300);
  // 80 bytes in region 0 (50 + 30 locally), 60 in region 1, 160 in region 2 (110 + 50).
  CHECK(plan->size() == 3);
}

TEST_CASE("read plan: refusals") {
  std::vector<std::byte> dst(100);
  const std::span<std::byte> pieces[] = {dst};
  const std::vector<GrantRegion> gap = {{0, 0x1000, 40, {1}}, {60, 0x2000, 100, {1}}};
  auto r = plan_reads(gap, 0, 100, pieces, 4);
  CHECK(r.status().code() == StatusCode::kNotFound);
  r = plan_reads(gap, 0, 99, pieces, 4);
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  r = plan_reads(gap, 0, 100, pieces, 0);
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("read failure: every completion status has a remedy") {
  CHECK(classify_completion(IBV_WC_SUCCESS) == ReadFailure::kNone);
  CHECK(classify_completion(IBV_WC_WR_FLUSH_ERR) == ReadFailure::kFlushed);
  CHECK(classify_completion(IBV_WC_RETRY_EXC_ERR) == ReadFailure::kReconnect);
  CHECK(classify_completion(IBV_WC_LOC_PROT_ERR) == ReadFailure::kOtherNic);
  CHECK(classify_completion(IBV_WC_REM_ACCESS_ERR) == ReadFailure::kOtherHolder);
  CHECK(classify_completion(IBV_WC_FATAL_ERR) == ReadFailure::kTcpFallback);
  CHECK(classify_completion(static_cast<ibv_wc_status>(200)) == ReadFailure::kTcpFallback);
  PathHealth h;
  CHECK(h.on_completion(ReadFailure::kReconnect) == PathHealth::Verdict::kReconnect);
  CHECK(h.on_completion(ReadFailure::kNone) == PathHealth::Verdict::kKeep);  // a success ends the run
  for (std::uint32_t i = 0; i < PathHealth::kMaxReconnects; ++i) {
    CHECK(h.on_completion(ReadFailure::kReconnect) == PathHealth::Verdict::kReconnect);
  }
  CHECK(h.on_completion(ReadFailure::kReconnect) == PathHealth::Verdict::kUseTcp);
  CHECK_FALSE(h.usable());
  PathHealth g;
  CHECK(g.on_completion(ReadFailure::kOtherHolder) == PathHealth::Verdict::kKeep);
  CHECK(g.on_completion(ReadFailure::kTcpFallback) == PathHealth::Verdict::kUseTcp);
}

namespace {

// A fake sysfs: two PCIe root complexes, a NIC and a GPU under a shared
// switch on node 0, a NIC straight on root 0, and one NIC on node 1.
void make_device(const std::filesystem::path& root, const std::string& pci, int node) {
  std::filesystem::create_directories(root / "devices" / pci);
  std::ofstream(root / "devices" / pci / "numa_node") << node << "\n";
}

}  // namespace

TEST_CASE("nic affinity: same NUMA node first, then the nearest on the PCIe tree") {
  testing::TempDir dir;
  const std::filesystem::path root = dir.path();
  make_device(root, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", 0);  // GPU behind switch 01
  make_device(root, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", 0);  // mlx5_1, same switch
  make_device(root, "pci0000:00/0000:00:02.0/0000:03:00.0", 0);               // mlx5_0, another port of root 0
  make_device(root, "pci0000:80/0000:80:01.0/0000:81:00.0", 1);               // mlx5_2, node 1
  auto link = [&](const std::string& name, const std::string& pci) {
    std::filesystem::create_directories(root / "class" / "infiniband" / name);
    std::filesystem::create_directory_symlink(root / "devices" / pci, root / "class" / "infiniband" / name / "device");
  };
  link("mlx5_0", "pci0000:00/0000:00:02.0/0000:03:00.0");
  link("mlx5_1", "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0");
  link("mlx5_2", "pci0000:80/0000:80:01.0/0000:81:00.0");
  std::filesystem::create_directories(root / "bus" / "pci" / "devices");
  std::filesystem::create_directory_symlink(root / "devices" / "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
                                            root / "bus" / "pci" / "devices" / "0000:02:00.0");

  std::vector<NicPlace> nics;
  for (const char* n : {"mlx5_2", "mlx5_0", "mlx5_1", "mlx5_9"}) nics.push_back(nic_place(root.string(), n));
  CHECK(nics[0].numa_node == 1);
  CHECK(nics[3].pci_path.empty());  // absent: unknown, ranked last
  auto gpu = pci_place(root.string(), "0000:02:00.0");
  REQUIRE(gpu.has_value());
  CHECK(gpu->numa_node == 0);
  const NicRanking for_gpu = rank_nics(nics, *gpu);
  REQUIRE(for_gpu.nics.size() == 4);
  CHECK(for_gpu.nics[0].name == "mlx5_1");  // 2 steps through the switch
  CHECK(for_gpu.nics[1].name == "mlx5_0");  // 5 steps through the root port
  CHECK(for_gpu.nics[2].name == "mlx5_2");  // the other node
  CHECK(for_gpu.preferred == 1);
  // Host memory on node 0: both node-0 NICs tie, and blocks stripe over them.
  NicPlace host;
  host.numa_node = 0;
  const NicRanking for_host = rank_nics(nics, host);
  CHECK(for_host.preferred == 2);
  CHECK(for_host.nics[0].name == "mlx5_0");
  CHECK(for_host.nics[1].name == "mlx5_1");
  CHECK_FALSE(pci_place(root.string(), "0000:99:00.0").has_value());

  // What `tensorhub devices` prints per GPU.
  RdmaDevices listed;
  for (const char* n : {"mlx5_0", "mlx5_1", "mlx5_2"}) listed.devices.push_back(RdmaDeviceInfo{n, "", -1, {}});
  CHECK(nics_near_gpu(listed, "0000:02:00.0", root.string()) == std::vector<std::string>{"mlx5_1"});
  CHECK(nics_near_gpu(listed, "0000:99:00.0", root.string()).empty());
  CHECK(nics_near_gpu(RdmaDevices{}, "0000:02:00.0", root.string()).empty());
}
