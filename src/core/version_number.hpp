// A version's number within its model: 1 for the first publication, one more
// for each after it (a manifest's chain). Inside the library numbers are
// this type, so that a number is never taken for a count, a shard or an id;
// the public API takes and gives plain integers (VersionInfo::version,
// kLatestVersion), converted where they cross.
#pragma once

#include <cstdint>
#include <ostream>

#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/version_info.hpp"

namespace tensorhub {

struct VersionNumberTag {};
using VersionNumber = StrongIndex<VersionNumberTag, std::uint64_t>;

// The number alone: logs write "v" << n.
inline std::ostream& operator<<(std::ostream& out, VersionNumber n) { return out << n.value; }
// The number after `n`, and the one before (REQUIRES: n.value > 0).
inline VersionNumber next(VersionNumber n) { return VersionNumber{n.value + 1}; }
inline VersionNumber previous(VersionNumber n) { return VersionNumber{n.value - 1}; }
// The numbers of a manifest and of a public VersionInfo.
inline VersionNumber number_of(const Manifest& m) { return VersionNumber{m.version()}; }
inline VersionNumber number_of(const VersionInfo& v) { return VersionNumber{v.version}; }

}  // namespace tensorhub
