// The settings channel (<hostir/settings.h>, common/settings.h): defaults,
// the environment read in one place, values set by an embedder, errors that
// name the setting, the comparison across ranks, and docs/cli.md listing
// exactly the settings of the table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/settings.h"
#include <hostir/bootstrap.h>
#include <hostir/error.h>
#include <hostir/settings.h>

namespace hir {
namespace {

// Sets an environment variable for its lifetime, then unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

std::string messageOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

TEST(Settings, DefaultsAreTheTablesAndTheEnvironmentIsNotRead) {
  ScopedEnv env("HIR_IPC_EAGER_SLOTS", "4");
  const Settings s;
  for (const SettingInfo& info : settingTable()) EXPECT_EQ(s.get(info.id), info.default_value);
  EXPECT_EQ(s.get(Setting::IpcEagerSlots), 8);
  EXPECT_EQ(s.text(Setting::CudaSemaphores), "memop");
  EXPECT_EQ(s.text(Setting::CudaStamps), "");
}

TEST(Settings, TheEnvironmentOverridesTheDefaults) {
  ScopedEnv a("HIR_IPC_EAGER_SLOTS", "4");
  ScopedEnv b("HIR_CUDA_SEMAPHORES", "kernel");
  ScopedEnv c("HIR_IPC_DIRECT", "0");
  ScopedEnv d("HIR_CUDA_STAMPS", "/tmp/stamps");
  ScopedEnv e("HIR_IPC_INLINE_MAX", "");  // empty: unset
  const Settings s = Settings::fromEnvironment();
  EXPECT_EQ(s.get(Setting::IpcEagerSlots), 4);
  EXPECT_EQ(s.get(Setting::CudaSemaphores), 1);
  EXPECT_EQ(s.text(Setting::CudaSemaphores), "kernel");
  EXPECT_FALSE(s.on(Setting::IpcDirect));
  EXPECT_EQ(s.text(Setting::CudaStamps), "/tmp/stamps");
  EXPECT_TRUE(s.on(Setting::CudaStamps));
  EXPECT_EQ(s.get(Setting::IpcInlineMax), 8192);
}

TEST(Settings, BadEnvironmentValuesNameTheVariableAndWhatItAccepts) {
  {
    ScopedEnv env("HIR_IPC_EAGER_MAX", "lots");
    EXPECT_EQ(messageOf([] { Settings::fromEnvironment(); }),
              "HIR_IPC_EAGER_MAX expects an integer, got 'lots'");
  }
  {
    ScopedEnv env("HIR_CUDA_GRID_COPY_BLOCKS", "1");
    EXPECT_EQ(messageOf([] { Settings::fromEnvironment(); }),
              "HIR_CUDA_GRID_COPY_BLOCKS must be in [2, 256], got 1");
  }
  {
    ScopedEnv env("HIR_IPC_DIRECT", "yes");
    EXPECT_NE(messageOf([] { Settings::fromEnvironment(); })
                  .find("HIR_IPC_DIRECT must be 0 or 1"),
              std::string::npos);
  }
  {
    ScopedEnv env("HIR_CUDA_GRID_COPY_WAIT", "spin");
    const std::string m = messageOf([] { Settings::fromEnvironment(); });
    EXPECT_NE(m.find("HIR_CUDA_GRID_COPY_WAIT is 'spin'; expected kernel or stream"),
              std::string::npos)
        << m;
  }
}

TEST(Settings, AnEmbedderSetsThemWithoutTheEnvironment) {
  Settings s;
  s.set(Setting::IpcEagerMax, 65536).set("HIR_CUDA_SEMAPHORES", "kernel");
  s.set(Setting::CudaStamps, std::string_view("/tmp/x"));
  EXPECT_EQ(s.get(Setting::IpcEagerMax), 65536);
  EXPECT_EQ(s.get(Setting::CudaSemaphores), 1);
  EXPECT_EQ(s.text(Setting::CudaStamps), "/tmp/x");
  EXPECT_EQ(messageOf([&] { s.set(Setting::IpcEagerSlots, 0); }),
            "HIR_IPC_EAGER_SLOTS must be in [1, 1024], got 0");
  EXPECT_EQ(messageOf([&] { s.set(Setting::IpcEagerSlots, 12); }),
            "HIR_IPC_EAGER_SLOTS=12 is not a power of two");
  EXPECT_EQ(messageOf([&] { s.set("HIR_IPC_EAGER_SLOTS", "3"); }),
            "HIR_IPC_EAGER_SLOTS=3 is not a power of two");
  EXPECT_EQ(messageOf([&] { s.set(Setting::CudaSemaphores, 2); }),
            "HIR_CUDA_SEMAPHORES takes one of memop|kernel, not choice #2");
  EXPECT_NE(messageOf([&] { s.set("HIR_NO_SUCH", "1"); })
                .find("no setting is named 'HIR_NO_SUCH'; the settings are HIR_IPC_EAGER_MAX"),
            std::string::npos);
  EXPECT_EQ(s.get(Setting::IpcEagerSlots), 8) << "a refused value leaves the old one";
}

// Ranks as threads of one process, each with its own settings.
std::vector<std::string> agreeAcross(const std::vector<Settings>& per_rank) {
  const int world = static_cast<int>(per_rank.size());
  std::vector<std::unique_ptr<Bootstrap>> boots = createThreadBootstraps(world);
  std::vector<std::string> errors(per_rank.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      errors[r] = messageOf([&] { agreeOnSettings(*boots[r], per_rank[r]); });
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(Settings, RanksAgreeOnTheSettingsThatMustBeTheSame) {
  Settings a, b;
  a.set(Setting::IpcDirect, 0);  // may differ
  for (const std::string& e : agreeAcross({a, b, b})) EXPECT_EQ(e, "(no UsageError)");
  b.set(Setting::IpcEagerSlots, 16);
  const std::vector<std::string> errors = agreeAcross({a, a, b});
  EXPECT_NE(errors[0].find("HIR_IPC_EAGER_SLOTS must be the same on every rank: rank 0 has 8, "
                           "rank 2 has 16"),
            std::string::npos)
      << errors[0];
  EXPECT_NE(errors[2].find("rank 2 has 16, rank 0 has 8"), std::string::npos) << errors[2];
}

// docs/cli.md, section "Settings": one row per setting, in the table's
// order, naming its default.
TEST(Settings, DocsListEverySettingOfTheTable) {
  std::ifstream in(std::string(HIR_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(in) << "docs/cli.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::size_t start = doc.find("\n## Settings\n");
  ASSERT_NE(start, std::string::npos) << "docs/cli.md has no section '## Settings'";
  const std::size_t end = doc.find("\n## ", start + 1);
  const std::string section = doc.substr(start, end - start);
  const std::regex row(R"(\n\| `(HIR_[A-Z0-9_]+)` \| ([^|]*) \| ([^|]*) \|)");
  std::vector<std::string> listed;
  for (auto it = std::sregex_iterator(section.begin(), section.end(), row);
       it != std::sregex_iterator(); ++it) {
    listed.push_back((*it)[1]);
    const SettingInfo* info = nullptr;
    for (const SettingInfo& s : settingTable())
      if (s.variable == (*it)[1].str()) info = &s;
    if (info == nullptr) continue;
    const std::string def = Settings().text(info->id);
    if (info->default_value >= info->min && info->kind != SettingKind::Text)
      EXPECT_NE((*it)[3].str().find(def), std::string::npos)
          << info->variable << ": its row's default column should say " << def;
  }
  std::vector<std::string> table;
  for (const SettingInfo& s : settingTable()) table.emplace_back(s.variable);
  EXPECT_EQ(listed, table) << "docs/cli.md's settings and HIR_SETTINGS differ";
}

}  // namespace
}  // namespace hir
