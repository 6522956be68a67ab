// The small enumerations of the IR, each with one table that gives its JSON
// spelling. Parsing goes through parseEnum(), which throws a ParseError that
// lists every accepted value: there is never a silent default.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace hir {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8 };
enum class ReduceOp : uint8_t { Sum, Prod, Min, Max, Avg };
enum class CommType : uint8_t {
  Allgather, Allreduce, ReduceScatter, Broadcast, Reduce, Gather, Scatter, Alltoall, Send, Recv
};
enum class WaitMode : uint8_t { Stream, Host };
// IPC protocol of a send/recv pair. Auto lets the backend pick (put).
enum class Protocol : uint8_t { Auto, Put, Get, Eager };
// Elementwise functions of one tensor (the IR's relu, gelu, silu, scale and
// cast nodes; Device::unary).
enum class UnaryOp : uint8_t { Cast, Relu, Gelu, Silu, Scale };

inline constexpr std::pair<DType, std::string_view> kDTypeNames[] = {
    {DType::Float32, "float32"}, {DType::Float64, "float64"}, {DType::Float16, "float16"},
    {DType::BFloat16, "bfloat16"}, {DType::Int32, "int32"},   {DType::Int64, "int64"},
    {DType::UInt8, "uint8"}};
inline constexpr std::pair<ReduceOp, std::string_view> kReduceOpNames[] = {
    {ReduceOp::Sum, "sum"}, {ReduceOp::Prod, "prod"}, {ReduceOp::Min, "min"},
    {ReduceOp::Max, "max"}, {ReduceOp::Avg, "avg"}};
inline constexpr std::pair<CommType, std::string_view> kCommTypeNames[] = {
    {CommType::Allgather, "allgather"},
    {CommType::Allreduce, "allreduce"},
    {CommType::ReduceScatter, "reduce_scatter"},
    {CommType::Broadcast, "broadcast"},
    {CommType::Reduce, "reduce"},
    {CommType::Gather, "gather"},
    {CommType::Scatter, "scatter"},
    {CommType::Alltoall, "alltoall"},
    {CommType::Send, "send"},
    {CommType::Recv, "recv"}};
inline constexpr std::pair<WaitMode, std::string_view> kWaitModeNames[] = {
    {WaitMode::Stream, "stream"}, {WaitMode::Host, "host"}};
inline constexpr std::pair<Protocol, std::string_view> kProtocolNames[] = {
    {Protocol::Auto, "auto"}, {Protocol::Put, "put"}, {Protocol::Get, "get"},
    {Protocol::Eager, "eager"}};

inline constexpr std::pair<UnaryOp, std::string_view> kUnaryOpNames[] = {
    {UnaryOp::Cast, "cast"}, {UnaryOp::Relu, "relu"}, {UnaryOp::Gelu, "gelu"},
    {UnaryOp::Silu, "silu"}, {UnaryOp::Scale, "scale"}};

// Name of an enum value, from its table.
template <class E, std::size_t N>
constexpr std::string_view enumName(const std::pair<E, std::string_view> (&table)[N], E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";
}

// "a", "b" or "c": the accepted spellings, for error messages.
template <class E, std::size_t N>
std::string enumChoices(const std::pair<E, std::string_view> (&table)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i) out += (i + 1 == N) ? " or " : ", ";
    out += '"';
    out += table[i].second;
    out += '"';
  }
  return out;
}

// Parses `text` with `table`; on failure throws ParseError at `pointer`
// listing the accepted values. Defined in enums.cc for the tables above.
[[noreturn]] void throwBadEnum(std::string_view pointer, std::string_view what,
                               std::string_view text, const std::string& choices);

template <class E, std::size_t N>
E parseEnum(const std::pair<E, std::string_view> (&table)[N], std::string_view text,
            std::string_view pointer, std::string_view what) {
  for (const auto& [v, name] : table)
    if (name == text) return v;
  throwBadEnum(pointer, what, text, enumChoices(table));
}

inline std::string_view toString(DType v) { return enumName(kDTypeNames, v); }
inline std::string_view toString(ReduceOp v) { return enumName(kReduceOpNames, v); }
inline std::string_view toString(CommType v) { return enumName(kCommTypeNames, v); }
inline std::string_view toString(WaitMode v) { return enumName(kWaitModeNames, v); }
inline std::string_view toString(Protocol v) { return enumName(kProtocolNames, v); }
inline std::string_view toString(UnaryOp v) { return enumName(kUnaryOpNames, v); }

// Size in bytes of one element.
constexpr std::size_t dtypeSize(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::UInt8: return 1;
  }
  return 0;
}

constexpr bool isFloating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
         t == DType::BFloat16;
}

// Which communication types have a root, take input/output, or a peer.
constexpr bool hasRoot(CommType t) {
  return t == CommType::Broadcast || t == CommType::Reduce || t == CommType::Gather ||
         t == CommType::Scatter;
}
constexpr bool isPointToPoint(CommType t) { return t == CommType::Send || t == CommType::Recv; }
constexpr bool hasReduceOp(CommType t) {
  return t == CommType::Allreduce || t == CommType::ReduceScatter || t == CommType::Reduce;
}

}  // namespace hir
