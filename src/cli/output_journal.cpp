#include "cli/output_journal.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "core/file_io.hpp"
#include "core/log.hpp"
#include "core/mapped_output_file.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::cli {
namespace {

constexpr std::size_t kMaxJournalBytes = 16u << 20;

bool process_gone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

}  // namespace

std::size_t OutputJournal::remove_leftovers(const std::string& output) {
  const std::size_t slash = output.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : output.substr(0, slash));
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> doomed;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const auto owner = core::MappedOutputFile::temporary_owner(name, output);
    if (!owner || !process_gone(*owner)) continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    doomed.push_back(path);
  }
  ::closedir(d);
  std::size_t removed = 0;
  for (const std::string& path : doomed) {
    if (::unlink(path.c_str()) == 0) {
      ++removed;
      TH_LOG_INFO("peer", "removed " << path << ", left by a fetch of a process that is gone");
    }
  }
  return removed;
}

Result<OutputJournal> OutputJournal::open(const std::string& path, std::size_t& removed) {
  removed = 0;
  OutputJournal journal;
  journal.path_ = path;
  auto bytes = core::read_file(path, kMaxJournalBytes);
  if (!bytes && bytes.status().code() != StatusCode::kNotFound) return bytes.status();
  if (bytes) {
    std::string text(bytes->begin(), bytes->end());
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string hex = text.substr(at, end - at);
      at = end + 1;
      if (hex.empty()) continue;
      std::vector<std::uint8_t> output(hex.size() / 2);
      if (hex.size() % 2 != 0 || !from_hex(hex, output).is_ok()) {
        return Status::corrupt(path + " holds a line that is not a hex-encoded path");
      }
      removed += remove_leftovers(std::string(output.begin(), output.end()));
    }
  }
  journal.save();
  return journal;
}

void OutputJournal::add(const std::string& output) {
  if (path_.empty()) return;
  outputs_.insert(output);
  save();
}

void OutputJournal::remove(const std::string& output) {
  auto it = outputs_.find(output);
  if (it == outputs_.end()) return;
  outputs_.erase(it);
  save();
}

void OutputJournal::save() {
  if (path_.empty()) return;
  if (outputs_.empty()) {
    ::unlink(path_.c_str());  // nothing being fetched: no record
    return;
  }
  std::string text;
  for (const std::string& output : outputs_) {
    text += to_hex(std::span(reinterpret_cast<const std::uint8_t*>(output.data()), output.size()));
    text += '\n';
  }
  Status s = core::write_file_atomic(path_, std::as_bytes(std::span(text)), 0600, /*overwrite=*/true);
  if (!s.is_ok()) TH_LOG_WARN("peer", "cannot record the outputs being fetched: " << s.to_string());
}

}  // namespace tensorhub::cli
