#!/usr/bin/env python3
"""Regenerates the seed corpus of the fuzz targets (tests/fuzz/corpus/).

    tests/fuzz/make_corpus.py        (from anywhere; rewrites the seed_* and
                                      hostile_* files, keeps crash_* files)

Seeds, each a file:
  corpus/programs/  (fuzz_json and fuzz_check) ir_examples/**/*.json,
                    tests/**/*.json, the JSON of the tests' raw strings (whole
                    programs, or node lists wrapped in a program), and hostile
                    programs;
  corpus/expr/      (fuzz_expr) every string of those programs that looks like
                    an expression, and hostile expressions.
Inputs that once crashed a target are added by hand as crash_<what>
(docs/testing.md) and are never removed by this script.
"""
import hashlib
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fuzz" / "corpus"
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def prog(body, **top):
    doc = {"format": "hostir/1", "name": "h"}
    doc.update(top)
    doc["body"] = body
    return json.dumps(doc)


def alloc(name, shape, dtype="float32"):
    return {"op": "allocate", "name": name, "dtype": dtype, "shape": shape}


def comm(name, type_, **fields):
    node = {"op": "communication", "name": name, "type": type_}
    node.update(fields)
    return node


def wait(name, mode=None):
    node = {"op": "wait", "communication": name}
    if mode:
        node["mode"] = mode
    return node


def loop(index, start, stop, body, step=None):
    node = {"op": "for", "index": index, "start": start, "stop": stop, "body": body}
    if step is not None:
        node["step"] = step
    return node


def hostile_programs():
    """name -> text: what a hostile or careless author could write."""
    h = {}
    ring = json.loads((ROOT / "ir_examples" / "ring_allgather.json").read_text())
    ring_text = json.dumps(ring)
    # Truncated and damaged JSON.
    for cut in (1, len(ring_text) // 3, len(ring_text) // 2, len(ring_text) - 1):
        h[f"truncated_{cut}"] = ring_text[:cut]
    h["empty"] = ""
    h["null"] = "null"
    h["array"] = "[]"
    h["object"] = "{}"
    h["bom"] = "\ufeff" + prog([])
    h["trailing_garbage"] = prog([]) + " }"
    h["comment"] = prog([]).replace("{", "{ /* c */", 1)
    h["duplicate_key"] = '{"format": "hostir/1", "name": "a", "name": "b", "body": []}'
    # Nesting: arrays past the limit, loops and ifs just under and over it.
    h["deep_arrays_199"] = "[" * 199 + "]" * 199
    h["deep_arrays_201"] = "[" * 201 + "]" * 201
    h["deep_arrays_unclosed"] = "[" * 10000
    h["deep_objects"] = '{"a":' * 300 + "1" + "}" * 300
    body = [{"op": "set_stream", "stream": 0}]
    for i in range(97):
        body = [loop(f"i{i}", 0, 2, body)]
    h["deep_loops_97"] = prog(body)
    body = [{"op": "set_stream", "stream": 1}]
    for i in range(120):
        body = [{"op": "if", "cond": "rank == 0", "then": body}]
    h["deep_ifs_120"] = prog(body)
    groups = [comm("a", "allreduce", input="x", output="x", reduce="sum")]
    for i in range(60):
        groups = [{"op": "group", "name": f"g{i}", "body": groups}]
    h["deep_groups"] = prog([alloc("x", [4])] + groups + [wait("g59")])
    # Numbers JSON or int64 cannot hold.
    h["float_1e400"] = prog([alloc("x", ["n"])], params={"n": 0}).replace('"n": 0', '"n": 1e400')
    h["float_shape"] = prog([alloc("x", [4.5])])
    h["float_int"] = prog([alloc("x", [4.0])])
    h["tolerance_1e400"] = prog([alloc("x", [4]), {"op": "fill", "tensor": "x", "value": 1},
                                 {"op": "check", "tensor": "x", "value": 1,
                                  "tolerance": 0}]).replace('"tolerance": 0', '"tolerance": 1e400')
    h["tolerance_negative_zero"] = prog([alloc("x", [4]),
                                         {"op": "check", "tensor": "x", "value": 1,
                                          "tolerance": -0.0}])
    h["uint64_max"] = prog([], params={"n": 2**64 - 1})
    h["int64_edges"] = prog([], params={"a": INT64_MAX, "b": INT64_MIN})
    h["below_int64_min"] = prog([], params={"a": INT64_MIN - 1})
    h["world_size_huge"] = prog([], world_size=INT64_MAX, min_world_size=INT64_MAX)
    h["world_size_zero"] = prog([], world_size=0)
    # Huge shapes: elements and bytes past 2^63, negative extents.
    h["shape_1_shl_62"] = prog([alloc("x", ["1 << 62", 4])])
    h["shape_2_pow_62_x2"] = prog([alloc("x", [2**62, 2])], min_world_size=2)
    h["shape_bytes_overflow"] = prog([alloc("x", [2**61], "float64"),
                                      {"op": "fill", "tensor": "x", "value": 0}])
    h["shape_int64_max"] = prog([alloc("x", [INT64_MAX], "uint8"),
                                 comm("a", "allreduce", input="x", output="x", reduce="sum"),
                                 wait("a")])
    h["shape_negative"] = prog([alloc("x", ["rank - 1"])], min_world_size=2)
    h["shape_many_dims"] = prog([alloc("x", [2] * 64)])
    h["shape_huge_allgather"] = prog([alloc("x", ["1 << 61"]), alloc("y", ["world", "1 << 61"]),
                                      comm("a", "allgather", input="x", output="y"), wait("a")],
                                     min_world_size=4)
    # Loops near 2^63, and loops too long to check.
    h["loop_near_int64_max"] = prog([loop("i", INT64_MAX - 3, INT64_MAX,
                                          [{"op": "set_stream", "stream": "i % 2"}])])
    h["loop_step_huge"] = prog([loop("i", 0, INT64_MAX, [{"op": "set_stream", "stream": 0}],
                                     step=2**62)])
    h["loop_negative_step"] = prog([loop("i", 0, INT64_MIN, [{"op": "set_stream", "stream": 0}],
                                         step=-(2**62))])
    h["loop_min_to_max"] = prog([loop("i", INT64_MIN, INT64_MAX,
                                      [{"op": "set_stream", "stream": 0}], step=INT64_MAX)])
    h["loop_long"] = prog([alloc("x", [4]), loop("i", 0, 10**12, [
        comm("a", "allreduce", input="x", output="x", reduce="sum"), wait("a")])])
    h["loop_nested_long"] = prog([alloc("x", [4]), loop("i", 0, 1000, [loop("j", 0, 1000, [
        comm("a", "send", tensor="x", peer="(rank + 1) % world"),
        comm("b", "recv", tensor="x", peer="(rank - 1) % world"), wait("a"), wait("b")])])],
                                 min_world_size=2)
    h["loop_index_overflow"] = prog([loop("i", INT64_MAX - 1, INT64_MAX, [alloc("y", ["i + 1"])])])
    # Expressions that fail when evaluated.
    h["div_zero_shape"] = prog([alloc("x", ["4 / (rank - rank)"])])
    h["mod_zero_peer"] = prog([alloc("x", [4]), comm("a", "send", tensor="x", peer="rank % 0"),
                               wait("a")])
    h["shift_64"] = prog([alloc("x", ["1 << 64"])])
    h["shift_negative"] = prog([alloc("x", ["1 >> (rank - 1)"])], min_world_size=2)
    h["int64_min_div"] = prog([alloc("x", ["-9223372036854775808 / -1"])])
    h["overflow_add"] = prog([alloc("x", ["9223372036854775807 + rank"])], min_world_size=2)
    h["stream_16"] = prog([{"op": "set_stream", "stream": 16}])
    h["stream_negative"] = prog([{"op": "sync_stream", "stream": "rank - 5"}])
    h["root_outside"] = prog([alloc("x", [4]),
                              comm("b", "broadcast", input="x", output="x", root="world"),
                              wait("b")])
    h["team_huge_rank"] = prog([alloc("x", [4]),
                                comm("a", "allreduce", input="x", output="x", reduce="sum",
                                     team=[0, INT64_MAX]), wait("a")])
    h["team_duplicates"] = prog([alloc("x", [4]),
                                 comm("a", "allreduce", input="x", output="x", reduce="avg",
                                      team=["0", "world - world"]), wait("a")])
    # Tensor references at the edges.
    h["ref_huge_range"] = prog([alloc("x", [4, 4]),
                                {"op": "fill", "tensor": "x[0:9223372036854775807]", "value": 0}])
    h["ref_negative"] = prog([alloc("x", [4]), {"op": "fill", "tensor": "x[-1]", "value": 0}])
    h["ref_reversed"] = prog([alloc("x", [4]), {"op": "fill", "tensor": "x[3:1]", "value": 0}])
    h["ref_too_many_indices"] = prog([alloc("x", [4]),
                                      {"op": "copy", "src": "x[0][0][0]", "dst": "x"}])
    h["ref_unclosed"] = prog([alloc("x", [4]), {"op": "fill", "tensor": "x[0", "value": 0}])
    h["ref_overflow_range"] = prog([alloc("x", [2**62, 2]),
                                    {"op": "fill", "tensor": "x[1:9223372036854775807][1]",
                                     "value": 0}])
    # Names and strings: unicode, escapes, control characters.
    h["unicode_name"] = prog([alloc("ñame", [4])])
    h["unicode_escapes"] = '{"format": "hostir/1", "name": "\\u0000\\ud83d\\ude00\\u00e9", "body": []}'
    h["lone_surrogate"] = '{"format": "hostir/1", "name": "\\ud800", "body": []}'
    h["invalid_utf8"] = '{"format": "hostir/1", "name": "\xff\xfe", "body": []}'
    h["nul_in_expr"] = prog([alloc("x", ["4\u0000"])])
    h["unicode_expr"] = prog([alloc("x", ["n\u00e9"])], params={"n": 4})
    h["kernel_many_buffers"] = prog([alloc("x", [4]),
                                     {"op": "kernel", "name": "k", "reads": ["x"] * 17,
                                      "writes": ["x"], "args": {"a": "1 / 0"}}])
    h["kernel_rotate"] = prog([alloc("x", [4, 4]), alloc("y", [4, 4]),
                               {"op": "kernel", "name": "rotate_rows", "reads": ["x"],
                                "writes": ["y"], "args": {"shift": "rank"}}])
    # Hazards and pending communications at the ends of bodies.
    h["pending_at_end"] = prog([alloc("x", [4]),
                                comm("a", "allreduce", input="x", output="x", reduce="sum")])
    h["dealloc_pending"] = prog([alloc("x", [4]),
                                 comm("a", "allreduce", input="x", output="x", reduce="sum"),
                                 {"op": "deallocate", "name": "x"}, alloc("x", [8]), wait("a")])
    h["ipc_self_send"] = prog([alloc("x", [4]),
                               {"op": "share_mem_handles", "communications": ["s", "r"]},
                               comm("s", "send", tensor="x", peer="rank", backend="ipc"),
                               comm("r", "recv", tensor="x", peer="rank", backend="ipc"),
                               wait("s"), wait("r")])
    return h


def hostile_expressions():
    e = {}
    e["parens_99"] = "(" * 99 + "1" + ")" * 99
    e["parens_101"] = "(" * 101 + "1" + ")" * 101
    e["parens_unclosed"] = "(" * 5000
    e["unary_chain"] = "-" * 150 + "x"
    e["not_chain"] = "!~" * 60 + "x"
    e["long_chain"] = " + ".join(["1"] * 1001)
    e["right_chain_65"] = "".join(f"a{i} + (" for i in range(65)) + "1" + ")" * 65
    e["calls_nested"] = "min(" * 60 + "x" + ", 1)" * 60
    e["int64_max"] = "9223372036854775807"
    e["int64_max_plus_1"] = "9223372036854775808"
    e["int64_min"] = "-9223372036854775808"
    e["int64_min_neg"] = "-(-9223372036854775808)"
    e["int64_min_div_m1"] = "-9223372036854775808 / -1"
    e["int64_min_mod_m1"] = "-9223372036854775808 % -1"
    e["huge_literal"] = "1" * 400
    e["float_1e400"] = "1e400"
    e["hex"] = "0x10"
    e["div_zero"] = "n / (rank - rank)"
    e["mod_zero"] = "x % 0"
    e["div_zero_short_circuit"] = "0 && 1 / 0"
    e["or_short_circuit"] = "1 || 1 % 0"
    e["ternary"] = "rank > 99 ? 1 : 1 / 0"
    e["shift_64"] = "1 << 64"
    e["shift_63"] = "1 << 63"
    e["shift_negative"] = "x >> -1"
    e["shift_var"] = "x << y"
    e["mul_overflow"] = "4611686018427387904 * 2"
    e["add_overflow"] = "9223372036854775807 + 1"
    e["sub_overflow"] = "-9223372036854775808 - 1"
    e["neg_min"] = "-x"
    e["min_max"] = "max(min(a, b), -9223372036854775808)"
    e["call_missing_arg"] = "min(1)"
    e["call_no_parens"] = "max"
    e["empty"] = ""
    e["spaces"] = "   "
    e["unicode"] = "n\u00e9 + 1"
    e["nul"] = "1\u0000 + 2"
    e["operators_only"] = "&& || == != <= >= << >>"
    e["comparison_chain"] = "a < b < c == d != e"
    e["logic_mix"] = "a && b || !c && (d | e ^ f & g)"
    e["mod_negative"] = "(rank - 1) % world"
    e["floor_div"] = "-7 / 2 + -7 % 2"
    return e


def expression_strings(value, out):
    """Every string in a JSON value that looks like an expression."""
    if isinstance(value, dict):
        for v in value.values():
            expression_strings(v, out)
    elif isinstance(value, list):
        for v in value:
            expression_strings(v, out)
    elif isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_ +\-*/%()<>=!&|^~,]+", value):
        if re.search(r"[0-9+\-*/%()<>=!&|^~]", value):
            out.add(value)


def raw_strings(text):
    """The raw string literals of a C++ source: R"(...)" and R"json(...)json"."""
    for m in re.finditer(r'R"([a-z]*)\((.*?)\)\1"', text, re.S):
        yield m.group(2)


def test_programs():
    """Whole programs and node lists from the tests' raw strings."""
    out = []
    for src in sorted((ROOT / "tests").rglob("*")):
        if src.suffix not in (".cc", ".h") or "fuzz" in src.parts:
            continue
        for s in raw_strings(src.read_text(errors="replace")):
            candidates = [s, '{"format": "hostir/1", "name": "t", "params": {"n": 8}, '
                             '"body": [' + s + "]}"]
            for c in candidates:
                try:
                    doc = json.loads(c)
                except ValueError:
                    continue
                if isinstance(doc, dict) and "format" in doc and doc.get("body"):
                    out.append(c)
                    break
    return out


def write(dir_, name, text):
    dir_.mkdir(parents=True, exist_ok=True)
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    (dir_ / name).write_bytes(data)


def main():
    for kind in ("programs", "expr"):
        for old in (OUT / kind).glob("*"):
            if old.name.startswith(("seed_", "hostile_")):
                old.unlink()
    programs = {}
    for path in sorted(list((ROOT / "ir_examples").rglob("*.json")) +
                       list((ROOT / "tests").rglob("*.json"))):
        if "fuzz" in path.parts or "install" in path.parts:
            continue
        name = str(path.relative_to(ROOT)).replace("/", "_")
        programs["seed_" + name] = path.read_text()
    seen = set(programs.values())
    for text in test_programs():
        if text in seen:
            continue
        seen.add(text)
        programs["seed_test_" + hashlib.sha1(text.encode()).hexdigest()[:10] + ".json"] = text
    for name, text in hostile_programs().items():
        programs[f"hostile_{name}.json"] = text
    exprs = set()
    for text in programs.values():
        try:
            expression_strings(json.loads(text), exprs)
        except (ValueError, RecursionError):
            pass
    for name, text in programs.items():
        write(OUT / "programs", name, text.encode("latin-1") if name == "hostile_invalid_utf8.json"
              else text)
    for text in sorted(exprs):
        write(OUT / "expr", "seed_" + hashlib.sha1(text.encode()).hexdigest()[:10], text)
    for name, text in hostile_expressions().items():
        write(OUT / "expr", f"hostile_{name}", text)
    for kind in ("programs", "expr"):
        files = list((OUT / kind).glob("*"))
        print(f"{kind}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
