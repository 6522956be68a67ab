// Programs shared by the IR tests: the ring allgather of the format's
// documentation, and one program that uses every node kind and every
// optional field (the builder test builds the same one in C++).
#pragma once

namespace hir::test {

inline constexpr const char* kRingAllgatherJson = R"json({
  "format": "hostir/1",
  "name": "ring_allgather",
  "params": {"n": 1048576},
  "inputs": [], "outputs": ["buf"],
  "body": [
    {"op": "allocate", "name": "buf", "dtype": "float32", "shape": ["world", "n"]},
    {"op": "fill", "tensor": "buf[rank]", "value": "rank * 1000", "step": 1},
    {"op": "for", "index": "i", "start": 0, "stop": "world - 1", "body": [
      {"op": "share_mem_handles", "communications": ["s", "r"]},
      {"op": "communication", "name": "s", "type": "send",
       "tensor": "buf[(rank - i + world) % world]", "peer": "(rank + 1) % world",
       "backend": "ipc"},
      {"op": "communication", "name": "r", "type": "recv",
       "tensor": "buf[(rank - i - 1 + world) % world]", "peer": "(rank - 1 + world) % world",
       "backend": "ipc"},
      {"op": "wait", "communication": "r"},
      {"op": "wait", "communication": "s"}
    ]},
    {"op": "for", "index": "j", "start": 0, "stop": "world", "body": [
      {"op": "check", "tensor": "buf[j]", "value": "j * 1000", "step": 1}
    ]}
  ]
})json";

inline constexpr const char* kEveryNodeJson = R"json({
  "format": "hostir/1",
  "name": "every_node",
  "world_size": 4,
  "min_world_size": 2,
  "params": {"n": 8, "chunks": 2},
  "inputs": ["x"],
  "outputs": ["y"],
  "body": [
    {"op": "allocate", "name": "x", "dtype": "float32", "shape": ["world", "n"]},
    {"op": "allocate", "name": "y", "dtype": "bfloat16", "shape": ["world", "n"]},
    {"op": "allocate", "name": "z", "dtype": "int64", "shape": [4, "n * chunks"]},
    {"op": "fill", "tensor": "x[rank]", "value": "rank * 100", "step": 1},
    {"op": "set_stream", "stream": 1},
    {"op": "group", "name": "g", "body": [
      {"op": "communication", "name": "ag", "type": "allgather", "input": "x[rank]",
       "output": "y", "backend": "nccl"},
      {"op": "communication", "name": "ar", "type": "allreduce", "input": "x", "output": "x",
       "reduce": "sum", "team": [0, 1, "world - 1"]}
    ]},
    {"op": "wait", "communication": "g", "mode": "host"},
    {"op": "sync_stream", "stream": 1},
    {"op": "set_stream", "stream": 0},
    {"op": "communication", "name": "rs", "type": "reduce_scatter", "input": "x",
     "output": "y[rank]", "reduce": "max"},
    {"op": "communication", "name": "bc", "type": "broadcast", "input": "x", "output": "x",
     "root": 0, "backend": "mpi"},
    {"op": "communication", "name": "rd", "type": "reduce", "input": "x", "output": "y",
     "root": "world - 1", "reduce": "avg"},
    {"op": "communication", "name": "ga", "type": "gather", "input": "x[rank]", "output": "y",
     "root": 1},
    {"op": "communication", "name": "sc", "type": "scatter", "input": "y", "output": "x[rank]",
     "root": 2},
    {"op": "communication", "name": "aa", "type": "alltoall", "input": "x", "output": "y",
     "team": "all"},
    {"op": "wait", "communication": "aa"},
    {"op": "for", "index": "i", "start": 1, "stop": "world", "step": 2, "body": [
      {"op": "share_mem_handles", "communications": ["s", "r"]},
      {"op": "if", "cond": "rank % 2 == 0 && i < world", "then": [
        {"op": "communication", "name": "s", "type": "send", "tensor": "z[0][0:n]",
         "peer": "(rank + i) % world", "backend": "ipc", "protocol": "get"}
      ], "else": [
        {"op": "communication", "name": "r", "type": "recv", "tensor": "z[1][n:2 * n]",
         "peer": "(rank - i + world) % world", "backend": "ipc", "protocol": "put"}
      ]},
      {"op": "wait", "communication": "s"}
    ]},
    {"op": "if", "cond": "!(rank & 1)", "then": [
      {"op": "copy", "src": "z[1]", "dst": "z[2]"}
    ]},
    {"op": "check", "tensor": "x[rank]", "value": "rank * 100", "step": 1, "tolerance": 0.5},
    {"op": "check", "tensor": "z[3][0:2]", "value": -1},
    {"op": "deallocate", "name": "z"}
  ]
})json";

}  // namespace hir::test
