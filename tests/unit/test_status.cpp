#include <doctest/doctest.h>

#include "tensorhub/status.hpp"

using namespace tensorhub;

TEST_CASE("status: ok and errors print as one line") {
  CHECK(Status::ok().is_ok());
  CHECK(Status::ok().to_string() == "ok");
  Status s = Status::corrupt("bad\nthing");
  CHECK_FALSE(s.is_ok());
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message() == "bad thing");
  CHECK(s.to_string() == "corrupt: bad thing");
  CHECK(s.with_context("file.manifest").to_string() == "corrupt: file.manifest: bad thing");
  CHECK(Status::ok().with_context("x").is_ok());
}

TEST_CASE("status: Result holds a value or an error") {
  Result<int> good = 5;
  REQUIRE(good.is_ok());
  CHECK(*good == 5);
  CHECK(good.status().is_ok());
  Result<int> bad = Status::not_found("nope");
  CHECK_FALSE(bad.is_ok());
  CHECK(bad.status().code() == StatusCode::kNotFound);
}

namespace {
Status fails_early(bool fail, int& reached) {
  TENSORHUB_RETURN_IF_ERROR(fail ? Status::io_error("x") : Status::ok());
  reached = 1;
  return Status::ok();
}
}  // namespace

TEST_CASE("status: RETURN_IF_ERROR returns early only on error") {
  int reached = 0;
  CHECK(fails_early(true, reached).code() == StatusCode::kIoError);
  CHECK(reached == 0);
  CHECK(fails_early(false, reached).is_ok());
  CHECK(reached == 1);
}
