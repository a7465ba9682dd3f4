// The output files a daemon is fetching into, recorded in a file of its own
// (<hold dir>/<peer id, 12 hex>.outputs, present while any fetch into a
// file runs), so that a daemon restarted after being killed
// removes the temporary files those fetches left beside their outputs
// (MappedOutputFile's names, of processes that are gone). A fetch that ends
// in the daemon's life removes its own.
#pragma once

#include <cstddef>
#include <set>
#include <string>

#include "tensorhub/status.hpp"

namespace tensorhub::cli {

class OutputJournal {
 public:
  OutputJournal() = default;  // records nothing

  // Opens the journal at `path`: removes the leftovers of the outputs it
  // names and counts them in `removed`, then records none (and removes it).
  // Errors: kIoError (the journal cannot be read or written), kCorrupt (a
  // line that is not a hex-encoded path).
  static Result<OutputJournal> open(const std::string& path, std::size_t& removed);

  // Records `output` while a fetch into it runs (written at once; a failure
  // to write is logged, and the fetch goes on).
  void add(const std::string& output);
  void remove(const std::string& output);

  // Removes the temporary files of `output` that processes now gone left
  // (regular files of this user only); returns how many.
  static std::size_t remove_leftovers(const std::string& output);

 private:
  void save();
  std::string path_;
  std::multiset<std::string> outputs_;
};

}  // namespace tensorhub::cli
