// What a fetch's destination and domain belong to, when the fetch was given
// them to keep (an output file and its FileMemory): it lives as long as the
// version, and the driver tells it when the fetch fails.
#pragma once

namespace tensorhub::peer {

class DestinationOwner {
 public:
  virtual ~DestinationOwner() = default;
  // The fetch failed: what only a complete version needs goes now (an
  // output file's temporary name and its blocks). On the driver's thread.
  virtual void fetch_failed() = 0;
};

}  // namespace tensorhub::peer
