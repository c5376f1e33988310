#!/usr/bin/env python3
"""Reference GGUF files for test_gguf, written by the PyPI `gguf` package (llama.cpp's own Python
writer and numpy (de)quantizers), so that the C++ reader is checked against an independent writer.

  OUT/values.gguf             metadata of every value type (each scalar type, and an array of each
                              element type) and a tensor of each supported ggml type (F32, F16, BF16,
                              Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) in 1 to 4 dimensions; alignment 32
  OUT/aligned64.gguf          the same tensors under general.alignment = 64
  OUT/big_endian.gguf         the same file written big-endian (which the reader refuses by name)
  OUT/iq4_nl.gguf             one IQ4_NL tensor (a ggml type the reader refuses by name)
  OUT/reference.safetensors   every tensor of values.gguf dequantized by gguf.quants.dequantize,
                              fp32, in the row-major shape (GGUF's ne reversed)
  OUT/expected.json           per key: value type, array element type, value (floats as written,
                              FLOAT32 ones after rounding to float32); per tensor: ggml type name,
                              ne and data offset as gguf's own GGUFReader reads them back

The float tensors hold special values too (signed zeros, subnormals, infinities, a quiet NaN). Q4_0,
Q4_1, Q8_0 and BF16 are quantized by gguf.quants.quantize. gguf 0.19 cannot quantize the K-quants,
so their blocks are random bytes with random finite fp16 super-scales written over the scale
fields: every packed 6-bit scale and min, every nibble and high bit pattern occurs.

With --fuzz-seeds DIR it also writes small valid GGUF and safetensors files (each under 8 KB) as
the libFuzzer seed corpora DIR/gguf and DIR/safetensors (committed under tests/fuzz/corpus).

Run:  .venv/bin/python tests/oracle/make_gguf_fixtures.py --out build/gguf_oracle
"""
import argparse
import json
import os
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as V
    from safetensors.numpy import save_file
except ImportError as e:  # the C++ test skips with a message when the fixtures are absent
    print(f"make_gguf_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)

# key -> (value type, array element type or None, value). The writer adds general.architecture.
METADATA = [
    ("test.uint8", V.UINT8, None, 200),
    ("test.int8", V.INT8, None, -100),
    ("test.uint16", V.UINT16, None, 65535),
    ("test.int16", V.INT16, None, -32768),
    ("test.uint32", V.UINT32, None, 4294967295),
    ("test.int32", V.INT32, None, -2147483648),
    ("test.uint64", V.UINT64, None, 2**63 - 1),
    ("test.uint64_huge", V.UINT64, None, 2**64 - 1),  # beyond int64: get_int must refuse it
    ("test.int64", V.INT64, None, -(2**63)),
    ("test.float32", V.FLOAT32, None, 9.999999747378752e-06),  # SmolLM2's rms eps
    ("test.float32_tiny", V.FLOAT32, None, 1e-45),  # a float32 subnormal
    ("test.float64", V.FLOAT64, None, 0.1),
    ("test.bool_true", V.BOOL, None, True),
    ("test.bool_false", V.BOOL, None, False),
    ("test.string", V.STRING, None, "h\u00e9llo \"w\u00f6rld\" \u2603 \U0001f600"),
    ("test.string_empty", V.STRING, None, ""),
    ("test.array.uint8", V.ARRAY, V.UINT8, [0, 1, 255]),
    ("test.array.int8", V.ARRAY, V.INT8, [-128, 0, 127]),
    ("test.array.uint16", V.ARRAY, V.UINT16, [0, 65535]),
    ("test.array.int16", V.ARRAY, V.INT16, [-32768, 32767]),
    ("test.array.uint32", V.ARRAY, V.UINT32, [1, 2, 4294967295]),
    ("test.array.int32", V.ARRAY, V.INT32, [-1, 0, 1, 2147483647]),
    ("test.array.uint64", V.ARRAY, V.UINT64, [0, 2**63 - 1]),
    ("test.array.int64", V.ARRAY, V.INT64, [-(2**63), 2**63 - 1]),
    ("test.array.float32", V.ARRAY, V.FLOAT32, [0.5, -1.25, 3.4028234663852886e38, -0.0]),
    ("test.array.float64", V.ARRAY, V.FLOAT64, [1e-300, -2.5, 1e300]),
    ("test.array.bool", V.ARRAY, V.BOOL, [True, False, True]),
    ("test.array.string", V.ARRAY, V.STRING, ["a", "", "<|im_start|>", "\u0120the"]),
]

SPECIAL_FLOATS = [0.0, -0.0, 1.0, -2.5, 65504.0, 6.1035156e-05, 5.9604645e-08, 1e-40,
                  float("inf"), float("-inf"), float("nan"), 3.0e38]


def tensors(rng):
    """(name, ggml type, numpy row-major value shape, stored array) for each tensor."""
    out = []

    def float_values(shape):
        v = rng.standard_normal(shape).astype(np.float32).ravel()
        v[: len(SPECIAL_FLOATS)] = SPECIAL_FLOATS
        return v.reshape(shape)

    out.append(("norm.f32", Q.F32, (16,), float_values((16,))))
    out.append(("w.f32", Q.F32, (3, 8), float_values((3, 8))))
    with np.errstate(over="ignore"):  # 3e38 becomes inf in fp16, as it should
        out.append(("w.f16", Q.F16, (2, 16), float_values((2, 16)).astype(np.float16)))
    out.append(("w.bf16", Q.BF16, (4, 8), gguf.quants.quantize(float_values((4, 8)), Q.BF16)))
    for name, qtype, shape in [("w.q8_0", Q.Q8_0, (4, 64)), ("w.q4_0", Q.Q4_0, (3, 64)),
                               ("w.q4_1", Q.Q4_1, (2, 2, 32)), ("w.q5_0", Q.Q5_0, (2, 64)),
                               ("w.q5_1", Q.Q5_1, (3, 32))]:
        values = (rng.standard_normal(shape) * 0.05 + rng.uniform(-0.02, 0.02)).astype(np.float32)
        out.append((name, qtype, shape, gguf.quants.quantize(values, qtype)))
    # K-quants: random blocks, finite fp16 super-scales at their offsets in the block.
    for name, qtype, shape, scale_offsets in [("w.q4_k", Q.Q4_K, (2, 256), [0, 2]),
                                              ("w.q5_k", Q.Q5_K, (1, 2, 1, 512), [0, 2]),
                                              ("w.q6_k", Q.Q6_K, (3, 256), [208])]:
        block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = int(np.prod(shape)) // block_values
        blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
        for off in scale_offsets:
            scales = (rng.standard_normal(n_blocks) * 0.01).astype(np.float16)
            blocks[:, off:off + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
        byte_shape = (*shape[:-1], shape[-1] // block_values * block_bytes)
        out.append((name, qtype, shape, blocks.reshape(byte_shape)))
    return out


def add_metadata(writer):
    for key, vtype, sub_type, value in METADATA:
        writer.add_key_value(key, value, vtype, sub_type=sub_type)


def write(path, items, alignment=None, endianess=gguf.GGUFEndian.LITTLE):
    writer = gguf.GGUFWriter(path, "llama", endianess=endianess)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    add_metadata(writer)
    for name, qtype, _shape, data in items:
        if qtype in (Q.F32, Q.F16):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def dequantized(qtype, data):
    return np.ascontiguousarray(gguf.quants.dequantize(data, qtype), dtype=np.float32)


def expected_json(path, items):
    """What gguf's own reader sees in the file: types, values, ne and offsets."""
    reader = gguf.GGUFReader(path)
    keys = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's pseudo-keys for the header
            continue
        vtype = field.types[0]
        entry = {"type": vtype.name}
        if vtype == V.ARRAY:
            entry["array_type"] = field.types[1].name
            entry["value"] = [as_json(field.types[1], field.parts[i][0] if field.types[1] != V.STRING
                                      else bytes(field.parts[i])) for i in field.data]
        else:
            entry["value"] = as_json(vtype, field.parts[field.data[0]][0] if vtype != V.STRING
                                     else bytes(field.parts[field.data[0]]))
        keys[key] = entry
    tensors_out = []
    for t in reader.tensors:
        tensors_out.append({"name": t.name, "type": t.tensor_type.name,
                            "ne": [int(x) for x in t.shape],
                            "offset": int(t.data_offset - reader.data_offset)})
    assert [t["name"] for t in tensors_out] == [name for name, *_ in items]
    return {"keys": keys, "tensors": tensors_out, "data_offset": int(reader.data_offset)}


def as_json(vtype, v):
    if vtype == V.STRING:
        return v.decode("utf-8")
    if vtype == V.BOOL:
        return bool(v)
    if vtype in (V.FLOAT32, V.FLOAT64):
        return float(v)
    return int(v)


def write_fuzz_seeds(out_dir, rng):
    """Small valid files for the fuzzers to start from: they reach every branch of a valid parse."""
    gdir = os.path.join(out_dir, "gguf")
    sdir = os.path.join(out_dir, "safetensors")
    os.makedirs(gdir, exist_ok=True)
    os.makedirs(sdir, exist_ok=True)
    items = tensors(rng)
    write(os.path.join(gdir, "all_types.gguf"), items)
    write(os.path.join(gdir, "aligned64.gguf"), items[:3], alignment=64)
    writer = gguf.GGUFWriter(os.path.join(gdir, "metadata_only.gguf"), "llama")
    add_metadata(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for name, qtype, _shape, data in items:
        if qtype in (Q.Q4_1, Q.Q8_0, Q.Q6_K):  # one tensor per file: the shipped model's types
            writer = gguf.GGUFWriter(os.path.join(gdir, f"{name.replace('.', '_')}.gguf"), "llama")
            writer.add_uint32("llama.block_count", 1)
            writer.add_tensor(name, data, raw_dtype=qtype)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
    save_file({"w": rng.standard_normal((4, 8)).astype(np.float32),
               "b": np.arange(8, dtype=np.int64), "h": np.ones((2, 2), dtype=np.float16),
               "m": np.array([True, False]), "e": np.zeros((0, 3), dtype=np.float32)},
              os.path.join(sdir, "mixed.safetensors"), metadata={"format": "pt"})
    save_file({"x": np.float32(rng.standard_normal((3,))).astype(np.float32)},
              os.path.join(sdir, "one.safetensors"))
    for d in (gdir, sdir):
        for f in os.listdir(d):
            assert os.path.getsize(os.path.join(d, f)) < 64 * 1024, f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fuzz-seeds", help="also write the fuzzers' seed corpora under this folder")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(20261124)
    items = tensors(rng)

    values = os.path.join(args.out, "values.gguf")
    write(values, items)
    write(os.path.join(args.out, "aligned64.gguf"), items, alignment=64)
    write(os.path.join(args.out, "big_endian.gguf"), items[:2], endianess=gguf.GGUFEndian.BIG)
    # IQ4_NL blocks (18 bytes per 32 values): a type ggml has that the reader refuses by name.
    writer = gguf.GGUFWriter(os.path.join(args.out, "iq4_nl.gguf"), "llama")
    writer.add_tensor("w.iq4_nl", np.zeros((2, 18), dtype=np.uint8), raw_dtype=Q.IQ4_NL)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    reference = {}
    for name, qtype, shape, data in items:
        ref = dequantized(qtype, data)
        assert ref.shape == tuple(shape), (name, ref.shape, shape)
        reference[name] = ref
    save_file(reference, os.path.join(args.out, "reference.safetensors"))
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(expected_json(values, items), f, indent=1)

    if args.fuzz_seeds:
        write_fuzz_seeds(args.fuzz_seeds, rng)
    print(f"make_gguf_fixtures: wrote {len(items)} tensors and {len(METADATA) + 1} keys to {args.out}")


if __name__ == "__main__":
    main()
