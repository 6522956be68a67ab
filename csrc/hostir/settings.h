// Tuning settings of the backends and devices, each declared once in
// HIR_SETTINGS: its environment variable, its kind, its default and range,
// whether every rank must have the same value, and one line of meaning.
//
// A Session resolves them once: every setting at its default, then the
// environment (Settings::fromEnvironment(), the one place that reads it),
// then what the embedder set (SessionOptions::settings replaces both when
// given). The session's backends and device read them from there, and so
// does the compile of its programs (CompileOptions::settings). Settings
// marked same_on_every_rank are compared across the ranks when an Evaluator
// loads: a difference is a UsageError naming the setting and both ranks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace hir {

// Bytes and Integer: an integer in [min, max] (decimal). PowerOfTwo: such an
// integer that is a power of two. Switch: 0 or 1. Choice: one of the words
// of `choices` ("a|b"), held as its index. Text: any string.
enum class SettingKind : uint8_t { Bytes, Integer, PowerOfTwo, Switch, Choice, Text };

// X(id, variable, kind, default, min, max, choices, same_on_every_rank, meaning).
// A default outside [min, max] (-1) means "derived", as the meaning says.
// Text settings default to the empty string (off).
#define HIR_SETTINGS(X)                                                                            \
  X(IpcEagerMax, "HIR_IPC_EAGER_MAX", Bytes, 16384, 0, 16777216, "", true,                         \
    "an ipc collective whose member chunk fits goes eager (through the receiver's slots); the "    \
    "smallest slot; 0 turns eager off, for sends and recvs too")                                   \
  X(IpcEagerSendMax, "HIR_IPC_EAGER_SEND_MAX", Bytes, 16777216, 0, 1073741824, "", true,           \
    "an ipc send/recv with protocol auto up to this size (or HIR_IPC_EAGER_MAX, if larger) is "    \
    "eager; eager above it is refused at load")                                                    \
  X(IpcEagerSlots, "HIR_IPC_EAGER_SLOTS", PowerOfTwo, 8, 1, 1024, "", true,                        \
    "eager slots per ordered pair of ranks, a power of two")                                       \
  X(IpcInlineMax, "HIR_IPC_INLINE_MAX", Bytes, 8192, 0, 16777216, "", true,                        \
    "an eager ipc message of 1 to this many bytes travels in lines that carry their own flags; "   \
    "0 turns lines off")                                                                           \
  X(IpcOneShotMax, "HIR_IPC_ONE_SHOT_MAX", Bytes, -1, 0, INT64_MAX, "", true,                      \
    "the largest ipc allreduce run one-shot (default 16 MiB for a pair, 256 KiB for larger "       \
    "teams); above it two-shot")                                                                   \
  X(IpcBroadcastSplitMin, "HIR_IPC_BROADCAST_SPLIT_MIN", Bytes, 4194304, 0, INT64_MAX, "", true,   \
    "the smallest ipc broadcast that a team of 3 or more runs as scatter-allgather")               \
  X(IpcDirect, "HIR_IPC_DIRECT", Switch, 1, 0, 1, "", false,                                       \
    "an eager ipc message whose receiver posted first is written straight into its buffer")        \
  X(IpcPushSteps, "HIR_IPC_PUSH_STEPS", Switch, 1, 0, 1, "", false,                                \
    "a post's consecutive ipc puts and gets are one device step")                                  \
  X(IpcCounted, "HIR_IPC_COUNTED", Switch, 0, 0, 1, "", true,                                      \
    "ipc counts message numbers on the device outside graph mode too (tests)")                     \
  X(IpcSeqStart, "HIR_IPC_SEQ_START", Integer, 0, 0, 4294967295, "", true,                         \
    "ipc message numbers start past this (tests of the wrap at 2^32)")                             \
  X(CudaKernelCopyMax, "HIR_CUDA_KERNEL_COPY_MAX", Bytes, 65536, 0, INT64_MAX, "", false,          \
    "cuda: copies up to this size run as a kernel, not on a copy engine (0: always the engine)")   \
  X(CudaGridCopyMax, "HIR_CUDA_GRID_COPY_MAX", Bytes, 1048576, 0, INT64_MAX, "", false,            \
    "cuda: a signaled copy or reduction above HIR_CUDA_KERNEL_COPY_MAX and up to this size is "    \
    "one grid kernel (0: never)")                                                                  \
  X(CudaGridCopyBlocks, "HIR_CUDA_GRID_COPY_BLOCKS", Integer, 16, 2, 256, "", false,               \
    "cuda: the most blocks of such a grid")                                                        \
  X(CudaGridCopyWait, "HIR_CUDA_GRID_COPY_WAIT", Choice, 0, 0, 1, "kernel|stream", false,          \
    "cuda: a grid copy's blocks wait for the semaphore (kernel), or a stream wait comes first")    \
  X(CudaSemaphores, "HIR_CUDA_SEMAPHORES", Choice, 0, 0, 1, "memop|kernel", false,                 \
    "cuda: semaphore waits and writes as the driver's stream memory operations or as kernels")     \
  X(CudaPdl, "HIR_CUDA_PDL", Switch, 1, 0, 1, "", false,                                           \
    "cuda: one-block kernels launch as programmatic dependents of the kernel before them")         \
  X(CudaPullFence, "HIR_CUDA_PULL_FENCE", Switch, 0, 0, 1, "", false,                              \
    "cuda: a grid pull out of its slot fences at system scope as a push does")                     \
  X(CudaSpreadSources, "HIR_CUDA_SPREAD_SOURCES", Switch, 1, 0, 1, "", false,                      \
    "cuda: a small reduction in lines loads every source at once")                                 \
  X(CudaPushesAtOnce, "HIR_CUDA_PUSHES_AT_ONCE", Switch, 1, 0, 1, "", false,                       \
    "cuda: a one-block step's small pushes in lines go each in a warp of its own")                 \
  X(CudaStamps, "HIR_CUDA_STAMPS", Text, 0, 0, 0, "", false,                                       \
    "cuda, a diagnosis: a path prefix; message kernels record the GPU's timer into "               \
    "PREFIX.gpuN.PID.csv")                                                                         \
  X(NcclAlwaysJoin, "HIR_NCCL_ALWAYS_JOIN", Switch, 0, 0, 1, "", false,                            \
    "nccl, a diagnosis: every detached post waits on the caller's stream")                         \
  X(ShareGpus, "HIR_SHARE_GPUS", Switch, 0, 0, 1, "", false,                                       \
    "local ranks may share a GPU (ipc programs and tests; NCCL refuses it)")

enum class Setting : uint8_t {
#define HIR_SETTING_ID(id, ...) id,
  HIR_SETTINGS(HIR_SETTING_ID)
#undef HIR_SETTING_ID
};

inline constexpr std::size_t kSettingCount = 0
#define HIR_SETTING_COUNT(...) +1
    HIR_SETTINGS(HIR_SETTING_COUNT)
#undef HIR_SETTING_COUNT
    ;

// One row of HIR_SETTINGS.
struct SettingInfo {
  Setting id;
  std::string_view variable;  // its environment variable, also its name in set()
  SettingKind kind;
  int64_t default_value;
  int64_t min, max;
  std::string_view choices;  // Choice: "a|b"
  bool same_on_every_rank;
  std::string_view meaning;
};

// Every setting, in the order of HIR_SETTINGS.
std::span<const SettingInfo> settingTable();
const SettingInfo& settingInfo(Setting s);

// A value for every setting. Default-constructed: every default, the
// environment not read.
class Settings {
 public:
  Settings();
  // The defaults, then each variable of the table that is set and not empty
  // (UsageError naming the variable, the value and what it accepts).
  static Settings fromEnvironment();

  // Sets one setting, checked as the environment's text is (UsageError).
  // Choice: the index of the word. By name: the variable's ("HIR_IPC_EAGER_MAX").
  Settings& set(Setting s, int64_t value);
  Settings& set(Setting s, std::string_view text);
  Settings& set(std::string_view variable, std::string_view text);

  // Bytes, Integer, Switch, Choice (the index).
  int64_t get(Setting s) const { return values_[index(s)]; }
  bool on(Setting s) const { return get(s) != 0; }
  // Text (and any kind, as the environment would spell it).
  std::string text(Setting s) const;

  friend bool operator==(const Settings&, const Settings&) = default;

 private:
  static std::size_t index(Setting s) { return static_cast<std::size_t>(s); }
  std::array<int64_t, kSettingCount> values_{};
  std::array<std::string, kSettingCount> texts_{};  // Text settings only
};

}  // namespace hir
