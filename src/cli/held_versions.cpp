#include "cli/held_versions.hpp"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "cli/control_lines.hpp"
#include "core/log.hpp"

namespace tensorhub::cli {

namespace fs = std::filesystem;

HeldVersions::HeldVersions(Peer& peer, std::string directory) : peer_(peer), directory_(std::move(directory)) {
  // Files a killed daemon of this identity left behind: nobody holds them.
  std::error_code ec;
  const auto removed = fs::remove_all(directory_, ec);
  if (!ec && removed != 0 && removed != static_cast<std::uintmax_t>(-1)) {
    TH_LOG_INFO("peer", "removed " << removed << " files and folders left in " << directory_);
  }
}

HeldVersions::~HeldVersions() {
  while (!held_.empty()) remove(held_.begin()->first);
  std::error_code ec;
  fs::remove(directory_, ec);  // when empty
}

std::string HeldVersions::path_of(const std::string& model, std::uint64_t version) const {
  std::string component;
  for (char c : model) component += c == '/' ? std::string("%2F") : std::string(1, c);
  return directory_ + "/" + component + "/v" + std::to_string(version) + "/model.safetensors";
}

bool HeldVersions::hold(const VersionInfo& info, Reply reply) {
  const Key key{info.model, info.version};
  if (auto it = held_.find(key); it != held_.end()) {
    Held& held = it->second;
    ++held.holds;
    reply(line(Json{{"event", "started"}, {"version", info.version}, {"id", info.id.hex()}, {"holds", held.holds}}),
          false);
    held.waiting.push_back(std::move(reply));
    if (held.verified) answer(held, Status::ok());
    return true;
  }
  const std::string path = path_of(info.model, info.version);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) {
    reply(line(error_line(Status::io_error("cannot create " + fs::path(path).parent_path().string() + ": " +
                                           ec.message()))),
          true);
    return false;
  }
  auto file = core::MappedOutputFile::create(path, info.bytes, 0644, /*overwrite=*/true);
  if (!file) {
    reply(line(error_line(file.status())), true);
    return false;
  }
  auto owned = std::make_shared<core::MappedOutputFile>(std::move(*file));
  auto handle = peer_.fetch(info.model, info.version, owned->bytes());
  if (!handle) {
    reply(line(error_line(handle.status())), true);
    return false;
  }
  Held& held = held_[key];
  held.info = info;
  held.file = std::move(owned);
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
  std::vector<Key> failed;
  for (auto& [key, held] : held_) {
    if (held.verified) continue;
    Status s = held.handle->wait(std::chrono::milliseconds(0));
    if (s.code() == StatusCode::kTimeout) {
      const std::string progress = line(progress_line(held.handle->progress()));
      for (const Reply& reply : held.waiting) reply(progress, false);
      continue;
    }
    if (s.is_ok()) s = held.file->commit();
    if (s.is_ok()) {
      held.verified = true;
      answer(held, s);
    } else {
      answer(held, s);
      failed.push_back(key);
    }
  }
  for (const Key& key : failed) remove(key);
}

void HeldVersions::answer(Held& held, const Status& result) {
  const std::string last =
      result.is_ok()
          ? line(Json{{"done", true}, {"ok", true}, {"version", held.info.version}, {"id", held.info.id.hex()},
                      {"path", held.file->path()}, {"dir", fs::path(held.file->path()).parent_path().string()},
                      {"bytes", held.info.bytes}, {"holds", held.holds}})
          : line(error_line(result));
  for (const Reply& reply : held.waiting) reply(last, /*last=*/!result.is_ok());  // a hold keeps its connection
  held.waiting.clear();
}

Result<std::size_t> HeldVersions::unhold(const std::string& model, std::uint64_t version) {
  auto it = held_.find({model, version});
  if (it == held_.end()) return Status::not_found(model + " v" + std::to_string(version) + " is not held");
  const std::size_t left = --it->second.holds;
  if (left == 0) {
    if (!it->second.verified) answer(it->second, Status::cancelled("every hold was let go before the fetch ended"));
    remove(it->first);
  }
  return left;
}

void HeldVersions::remove(const Key& key) {
  auto it = held_.find(key);
  if (it == held_.end()) return;
  const fs::path path = it->second.file->path();
  it->second.handle.reset();  // released at once: nothing reads the file after this
  it->second.file.reset();    // unmapped; an uncommitted file's temporary is removed
  held_.erase(it);
  std::error_code ec;
  fs::remove(path, ec);
  fs::remove(path.parent_path(), ec);                // v<N>, when empty
  fs::remove(path.parent_path().parent_path(), ec);  // the model's, when empty
  if (ec && ec.value() != ENOTEMPTY && ec.value() != ENOENT) {
    TH_LOG_WARN("peer", "cannot remove " << path.parent_path().string() << ": " << ec.message());
  }
}

}  // namespace tensorhub::cli
