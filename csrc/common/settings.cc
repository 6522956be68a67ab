#include "common/settings.h"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "common/check.h"
#include "common/parse_int.h"

namespace hir {

namespace {

constexpr SettingInfo kTable[] = {
#define HIR_SETTING_ROW(id, variable, kind, def, min, max, choices, same, meaning) \
  {Setting::id, variable, SettingKind::kind, def, min, max, choices, same, meaning},
    HIR_SETTINGS(HIR_SETTING_ROW)
#undef HIR_SETTING_ROW
};
static_assert(std::size(kTable) == kSettingCount);

// The words of a Choice, in order.
std::vector<std::string_view> words(std::string_view choices) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t bar = choices.find('|');
    out.push_back(choices.substr(0, bar));
    if (bar == std::string_view::npos) return out;
    choices.remove_prefix(bar + 1);
  }
}

// An integer setting's value, in [min, max] (checked by the caller), that
// its kind also accepts.
void checkKind(const SettingInfo& s, int64_t value) {
  HIR_CHECK_AS(UsageError, s.kind != SettingKind::PowerOfTwo || (value & (value - 1)) == 0,
               "{}={} is not a power of two", s.variable, value);
}

// A setting's value from its text, as the environment spells it.
int64_t parse(const SettingInfo& s, std::string_view text) {
  switch (s.kind) {
    case SettingKind::Bytes:
    case SettingKind::Integer:
    case SettingKind::PowerOfTwo: {
      const int64_t v = parseInteger(std::string(s.variable), std::string(text), s.min, s.max);
      checkKind(s, v);
      return v;
    }
    case SettingKind::Switch:
      HIR_CHECK_AS(UsageError, text == "0" || text == "1", "{} must be 0 or 1 (1: {}), got '{}'",
                   s.variable, s.meaning, text);
      return text == "1";
    case SettingKind::Choice: {
      const std::vector<std::string_view> w = words(s.choices);
      for (std::size_t i = 0; i < w.size(); ++i)
        if (w[i] == text) return static_cast<int64_t>(i);
      throw UsageError(fmt::format("{} is '{}'; expected {} ({}; default {})", s.variable, text,
                                   fmt::join(w, " or "), s.meaning,
                                   w[static_cast<std::size_t>(s.default_value)]));
    }
    case SettingKind::Text:
      return 0;
  }
  HIR_INTERNAL_ASSERT(false, "setting kind {}", static_cast<int>(s.kind));
  return 0;
}

}  // namespace

std::span<const SettingInfo> settingTable() { return kTable; }

const SettingInfo& settingInfo(Setting s) {
  const auto i = static_cast<std::size_t>(s);
  HIR_INTERNAL_ASSERT(i < kSettingCount, "setting {} outside the table", i);
  return kTable[i];
}

Settings::Settings() {
  for (const SettingInfo& s : kTable) values_[index(s.id)] = s.default_value;
}

Settings Settings::fromEnvironment() {
  Settings out;
  for (const SettingInfo& s : kTable) {
    const char* v = std::getenv(std::string(s.variable).c_str());
    if (v != nullptr && *v != '\0') out.set(s.id, std::string_view(v));
  }
  return out;
}

Settings& Settings::set(Setting s, int64_t value) {
  const SettingInfo& info = settingInfo(s);
  HIR_CHECK_AS(UsageError, info.kind != SettingKind::Text,
               "{} takes a text, not the number {}", info.variable, value);
  if (info.kind == SettingKind::Choice) {
    const std::size_t n = words(info.choices).size();
    HIR_CHECK_AS(UsageError, value >= 0 && static_cast<std::size_t>(value) < n,
                 "{} takes one of {}, not choice #{}", info.variable, info.choices, value);
  } else {
    HIR_CHECK_AS(UsageError, value >= info.min && value <= info.max,
                 "{} must be in [{}, {}], got {}", info.variable, info.min, info.max, value);
    checkKind(info, value);
  }
  values_[index(s)] = value;
  return *this;
}

Settings& Settings::set(Setting s, std::string_view text) {
  const SettingInfo& info = settingInfo(s);
  if (info.kind == SettingKind::Text) {
    texts_[index(s)] = std::string(text);
    values_[index(s)] = text.empty() ? 0 : 1;
    return *this;
  }
  values_[index(s)] = parse(info, text);
  return *this;
}

Settings& Settings::set(std::string_view variable, std::string_view text) {
  for (const SettingInfo& s : kTable)
    if (s.variable == variable) return set(s.id, text);
  std::vector<std::string_view> names;
  for (const SettingInfo& s : kTable) names.push_back(s.variable);
  throw UsageError(fmt::format("no setting is named '{}'; the settings are {}", variable,
                               fmt::join(names, ", ")));
}

std::string Settings::text(Setting s) const {
  const SettingInfo& info = settingInfo(s);
  const int64_t v = get(s);
  switch (info.kind) {
    case SettingKind::Text:
      return texts_[index(s)];
    case SettingKind::Choice:
      return std::string(words(info.choices)[static_cast<std::size_t>(v)]);
    default:
      return std::to_string(v);
  }
}

void agreeOnSettings(Bootstrap& boot, const Settings& mine) {
  std::vector<Setting> shared;
  for (const SettingInfo& s : kTable)
    if (s.same_on_every_rank) shared.push_back(s.id);
  std::vector<int64_t> values;
  for (Setting s : shared) values.push_back(mine.get(s));
  std::vector<int64_t> all(values.size() * static_cast<std::size_t>(boot.world()));
  boot.allgather(values.data(), all.data(), values.size() * sizeof(int64_t));
  for (int r = 0; r < boot.world(); ++r)
    for (std::size_t i = 0; i < shared.size(); ++i) {
      const int64_t theirs = all[static_cast<std::size_t>(r) * shared.size() + i];
      const SettingInfo& info = settingInfo(shared[i]);
      HIR_CHECK_AS(UsageError, theirs == values[i],
                   "{} must be the same on every rank: rank {} has {}, rank {} has {} ({})",
                   info.variable, boot.rank(), values[i], r, theirs, info.meaning);
    }
}

}  // namespace hir
