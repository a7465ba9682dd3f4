// Simulator tests: a scenario parsed from JSON that must parse.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "sim/scenario.hpp"

namespace tensorhub::testing {

inline sim::Scenario scenario_of(const std::string& json) {
  auto s = sim::parse_scenario(json);
  REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
  return *s;
}

}  // namespace tensorhub::testing
