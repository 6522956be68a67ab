// The environment's 0/1 switches and integers (common/parse_int.h's
// envSwitch and envInteger): what an unset or empty variable means, and
// that a value out of their range is a usage error naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/parse_int.h"
#include <hostir/error.h>

namespace hir {
namespace {

constexpr const char* kName = "HIR_TEST_ENV_SWITCH";

// Sets kName for its lifetime (nullptr: unset), then unsets it.
class Scoped {
 public:
  explicit Scoped(const char* value) {
    if (value == nullptr)
      ::unsetenv(kName);
    else
      ::setenv(kName, value, 1);
  }
  ~Scoped() { ::unsetenv(kName); }
};

TEST(EnvSwitch, UnsetOrEmptyIsTheGivenDefault) {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    Scoped scoped(value);
    EXPECT_FALSE(envSwitch(kName, "a test"));
    EXPECT_FALSE(envSwitch(kName, "a test", false));
    EXPECT_TRUE(envSwitch(kName, "a test", true));
  }
}

TEST(EnvSwitch, ZeroAndOneOverrideTheDefault) {
  {
    Scoped scoped("0");
    EXPECT_FALSE(envSwitch(kName, "a test", true));
  }
  Scoped scoped("1");
  EXPECT_TRUE(envSwitch(kName, "a test", false));
}

TEST(EnvSwitch, AnyOtherValueIsAUsageErrorNamingTheVariable) {
  Scoped scoped("yes");
  try {
    envSwitch(kName, "tests pass", true);
    FAIL() << "'yes' was taken";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "HIR_TEST_ENV_SWITCH must be 0 or 1 (1: tests pass), got 'yes'");
  }
}

TEST(EnvInteger, UnsetOrEmptyIsTheGivenDefaultAndAValueInRangeIsTaken) {
  for (const char* value : {static_cast<const char*>(nullptr), ""}) {
    Scoped scoped(value);
    EXPECT_EQ(envInteger(kName, 42, 0, 100), 42);
  }
  Scoped scoped("7");
  EXPECT_EQ(envInteger(kName, 42, 0, 100), 7);
}

TEST(EnvInteger, AValueOutOfRangeOrNotAnIntegerIsAUsageErrorNamingTheVariable) {
  for (const char* value : {"101", "-1", "4K"}) {
    Scoped scoped(value);
    try {
      envInteger(kName, 42, 0, 100);
      ADD_FAILURE() << "'" << value << "' was taken";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("HIR_TEST_ENV_SWITCH"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hir
