#include "cli/held_versions.hpp"

#include <algorithm>
#include <cassert>
#include <filesystem>
#include <system_error>

#include "cli/control_lines.hpp"
#include "core/log.hpp"

namespace tensorhub::cli {

namespace fs = std::filesystem;

HeldVersions::HeldVersions(Peer& peer, std::string directory, Retire retire, GpuHoldMemoryFactory gpu_memory,
                           std::size_t gpu_buffers)
    : peer_(peer), directory_(std::move(directory)), retire_(std::move(retire)), gpu_memory_(std::move(gpu_memory)),
      gpu_buffers_(std::max<std::size_t>(gpu_buffers, 1)) {
  // Files a killed daemon of this identity left behind: nobody holds them.
  std::error_code ec;
  const auto removed = fs::remove_all(directory_, ec);
  if (!ec && removed != 0 && removed != static_cast<std::uintmax_t>(-1)) {
    TH_LOG_INFO("peer", "removed " << removed << " files and folders left in " << directory_);
  }
}

HeldVersions::~HeldVersions() {
  held_.clear();  // each handle is released at once, then its memory goes
  std::error_code ec;
  fs::remove(directory_, ec);  // when empty
}

std::string HeldVersions::path_of(const std::string& model, std::uint64_t version) const {
  std::string component;
  for (char c : model) component += c == '/' ? std::string("%2F") : std::string(1, c);
  return directory_ + "/" + component + "/v" + std::to_string(version) + "/model.safetensors";
}

std::vector<std::string> HeldVersions::held_on(const std::string& gpu) const {
  std::vector<std::string> out;
  auto name = [](const Key& key) { return std::get<0>(key) + " v" + std::to_string(std::get<1>(key)); };
  for (const auto& [key, held] : held_) {
    if (std::get<2>(key) == gpu) out.push_back(name(key));
  }
  // Memory being let go is still there.
  for (const auto& [key, waiting] : retiring_) {
    if (std::get<2>(key) == gpu) out.push_back(name(key) + " (being let go)");
  }
  return out;
}

bool HeldVersions::retiring(const VersionInfo& info, const std::string& gpu) const {
  return retiring_.count({info.model, info.version, gpu}) != 0;
}

void HeldVersions::after_retired(const VersionInfo& info, const std::string& gpu, std::function<void()> then) {
  auto it = retiring_.find({info.model, info.version, gpu});
  if (it == retiring_.end()) return then();
  it->second.push_back(std::move(then));
}

bool HeldVersions::hold(const VersionInfo& info, const std::string& gpu, Reply reply) {
  const Key key{info.model, info.version, gpu};
  assert(!retiring_.count(key));
  if (auto it = held_.find(key); it != held_.end()) {
    Held& held = it->second;
    ++held.holds;
    reply(line(Json{{"event", "started"}, {"version", info.version}, {"id", info.id.hex()}, {"holds", held.holds}}),
          false);
    held.waiting.push_back(std::move(reply));
    if (held.verified) answer(held, Status::ok());
    return true;
  }
  auto memory = [&]() -> Result<std::unique_ptr<HoldMemory>> {
    if (gpu.empty()) return file_hold_memory(path_of(info.model, info.version), directory_);
    const auto on_gpu = held_on(gpu);
    if (on_gpu.size() < gpu_buffers_) return gpu_memory_(gpu, info);
    std::string names;
    for (const std::string& n : on_gpu) names += (names.empty() ? "" : ", ") + n;
    return Status::unavailable(gpu + " holds " + std::to_string(on_gpu.size()) + " versions already (" + names +
                               "), as many as --gpu-buffers allows: let go of one first");
  }();
  if (!memory) {
    reply(line(error_line(memory.status())), true);
    return false;
  }
  auto handle = (*memory)->fetch(peer_, info);
  if (!handle) {
    reply(line(error_line(handle.status())), true);
    return false;
  }
  Held& held = held_[key];
  held.info = info;
  held.memory = std::move(*memory);
  held.handle = std::make_unique<FetchHandle>(std::move(*handle));
  held.holds = 1;
  reply(line(Json{{"event", "started"}, {"version", info.version}, {"id", info.id.hex()}, {"holds", 1}}), false);
  held.waiting.push_back(std::move(reply));
  return true;
}

bool HeldVersions::fetching() const {
  for (const auto& [key, held] : held_) {
    if (!held.verified) return true;
  }
  return false;
}

void HeldVersions::poll() {
  std::vector<std::pair<Key, Status>> failed;
  for (auto& [key, held] : held_) {
    if (held.verified) continue;
    Status s = held.handle->wait(std::chrono::milliseconds(0));
    if (s.code() == StatusCode::kTimeout) {
      const std::string progress = line(progress_line(held.handle->progress()));
      for (const Reply& reply : held.waiting) reply(progress, false);
      continue;
    }
    if (s.is_ok()) s = held.memory->commit();
    if (s.is_ok()) {
      held.verified = true;
      answer(held, s);
    } else {
      failed.emplace_back(key, s);
    }
  }
  for (const auto& [key, why] : failed) remove(key, why);
}

void HeldVersions::answer(Held& held, const Status& result) {
  Json done{{"done", true}, {"ok", true}, {"version", held.info.version}, {"id", held.info.id.hex()},
            {"bytes", held.info.bytes}, {"holds", held.holds}};
  Status s = result;
  if (s.is_ok()) s = held.memory->describe(*held.handle, done);
  const std::string last = line(s.is_ok() ? done : error_line(s));
  for (const Reply& reply : held.waiting) reply(last, /*last=*/!s.is_ok());  // a hold keeps its connection
  held.waiting.clear();
}

Result<std::size_t> HeldVersions::unhold(const std::string& model, std::uint64_t version, const std::string& gpu) {
  auto it = held_.find({model, version, gpu});
  if (it == held_.end()) {
    return Status::not_found(model + " v" + std::to_string(version) + " is not held" + (gpu.empty() ? "" : " on " + gpu));
  }
  const std::size_t left = --it->second.holds;
  if (left == 0) {
    const Key key = it->first;
    if (it->second.verified) {
      remove(key);
    } else {
      remove(key, Status::cancelled("every hold was let go before the fetch ended"));
    }
  }
  return left;
}

void HeldVersions::remove(const Key& key, std::optional<Status> why) {
  auto it = held_.find(key);
  if (it == held_.end()) return;
  // Released at once (nothing reads the memory after), then the memory
  // goes (a file is removed, GPU memory freed): the handle is declared
  // after the memory, so it is destroyed first.
  auto gone = std::make_shared<Held>(std::move(it->second));
  held_.erase(it);
  std::vector<Reply> waiting = std::move(gone->waiting);
  gone->waiting.clear();
  retiring_[key];
  retire_(std::move(gone), [this, key, waiting, why] {
    // The memory went before the holders hear: none of them finds a
    // partial file, and a retry makes its own.
    if (why) {
      const std::string last = line(error_line(*why));
      for (const Reply& reply : waiting) reply(last, /*last=*/true);
    }
    auto resumed = retiring_.extract(key);
    if (resumed.empty()) return;
    for (auto& again : resumed.mapped()) again();
  });
}

}  // namespace tensorhub::cli
