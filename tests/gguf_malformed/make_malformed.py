"""Build the malformed GGUF test set by hand, byte by byte.

Usage: python make_malformed.py [OUT_DIR]   (default: this directory)

Writes one small .gguf file per case plus expected.json, which maps each file
name to a fragment the reader's error message must contain ("" = must load).
The files are committed; tests/test_gguf.py regenerates them in a temp dir and
checks the committed copies are identical, so this script is the source of truth.
"""
import json
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32_T, F16_T, Q4_0_T, Q8_0_T, F64_T = 0, 1, 2, 8, 28


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def kv_u32(key, v):
    return kv(key, U32, struct.pack("<I", v))


def tinfo(name, ne, ttype, off, n_dims=None):
    nd = len(ne) if n_dims is None else n_dims
    return s(name) + struct.pack("<I", nd) + struct.pack(f"<{len(ne)}q", *ne) + struct.pack("<IQ", ttype, off)


def gguf(kvs=(), tensors=(), data=b"", version=3, n_tensors=None, n_kv=None, align=32, magic=b"GGUF", pad=True):
    h = magic + struct.pack("<I", version)
    h += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
    h += b"".join(kvs) + b"".join(tensors)
    if pad:
        h += b"\0" * (-len(h) % align)
    return h + data


def nested(depth):
    """An array value nested `depth` levels deep (innermost: one u8)."""
    v = struct.pack("<IQ", U8, 1) + b"\x07"
    for _ in range(depth - 1):
        v = struct.pack("<IQ", ARR, 1) + v
    return v


F32_4 = struct.pack("<4f", 1, 2, 3, 4)
GOOD_KV = kv("general.name", STR, s("ok"))

# (file name, bytes, expected message fragment; "" = valid)
CASES = [
    # --- valid controls (also fuzzer seeds)
    ("valid_empty.gguf", gguf(), ""),
    ("valid_kv_tensor.gguf", gguf([GOOD_KV], [tinfo("w", [4], F32_T, 0)], F32_4), ""),
    ("valid_nested_align8.gguf",
     gguf([kv_u32("general.alignment", 8), kv("a", ARR, nested(3)),
           kv("s", ARR, struct.pack("<IQ", STR, 2) + s("x") + s(b"\xff"))],
          [tinfo("a", [2], F32_T, 0), tinfo("b", [2], F32_T, 8)], F32_4, align=8), ""),
    ("valid_v2.gguf", gguf([GOOD_KV], version=2), ""),
    # --- header
    ("empty_file.gguf", b"", "truncated: magic"),
    ("short_magic.gguf", b"GG", "truncated: magic"),
    ("bad_magic.gguf", gguf(magic=b"GGUX"), "bad magic"),
    ("version_1.gguf", gguf(version=1), "unsupported version 1"),
    ("version_4.gguf", gguf(version=4), "unsupported version 4"),
    ("big_endian.gguf", gguf(version=0x03000000), "big-endian"),
    ("truncated_counts.gguf", b"GGUF" + struct.pack("<I", 3) + b"\0\0\0", "truncated: tensor count"),
    ("huge_kv_count.gguf", gguf(n_kv=2**62), "kv count"),
    ("huge_tensor_count.gguf", gguf(n_tensors=2**64 - 1), "tensor count"),
    # --- keys
    ("key_length_huge.gguf", gguf([struct.pack("<Q", 2**63) + b"abcdefgh" + b"\0" * 8]), "key at offset 24 has length"),
    ("key_empty.gguf", gguf([kv("", U8, b"\1")]), "is empty"),
    ("key_bad_utf8.gguf", gguf([kv(b"k\xc3\x28", U8, b"\1")]), "is not valid UTF-8"),
    ("key_overlong_utf8.gguf", gguf([kv(b"k\xc0\x80", U8, b"\1")]), "is not valid UTF-8"),
    ("key_surrogate_utf8.gguf", gguf([kv(b"k\xed\xa0\x80", U8, b"\1")]), "is not valid UTF-8"),
    ("key_nul.gguf", gguf([kv(b"a\0b", U8, b"\1")]), "contains a NUL byte"),
    ("key_duplicate.gguf", gguf([kv("k", U8, b"\1"), kv("k", U8, b"\2")]), "duplicate key 'k'"),
    # --- values
    ("value_type_unknown.gguf", gguf([kv("k", 13, b"\0" * 8)]), "unknown value type 13"),
    ("value_truncated_u64.gguf", gguf([kv("k", U64, b"\1\2\3")], pad=False), "truncated: scalar value"),
    ("value_string_too_long.gguf", gguf([kv("k", STR, struct.pack("<Q", 1000) + b"abc")], pad=False), "string value"),
    ("value_bool_invalid.gguf", gguf([kv("k", BOOL, b"\2")]), "invalid bool value 2"),
    ("array_elem_type_unknown.gguf", gguf([kv("k", ARR, struct.pack("<IQ", 99, 1) + b"\0" * 8)]),
     "unknown array element type 99"),
    ("array_count_huge.gguf", gguf([kv("k", ARR, struct.pack("<IQ", U32, 2**61) + b"\0" * 8)]), "array of"),
    ("array_string_count_huge.gguf", gguf([kv("k", ARR, struct.pack("<IQ", STR, 2**40) + s("a"))]), "array of"),
    ("array_string_elem_truncated.gguf", gguf([kv("k", ARR, struct.pack("<IQ", STR, 2) + s("a") +
                                                  struct.pack("<Q", 50))], pad=False),
     "string array element"),
    ("array_bool_invalid.gguf", gguf([kv("k", ARR, struct.pack("<IQ", BOOL, 3) + b"\1\0\5")]),
     "invalid bool value 5 in array"),
    ("array_nested_too_deep.gguf", gguf([kv("k", ARR, nested(9))]), "nested deeper than 8"),
    ("array_nested_truncated.gguf", gguf([kv("k", ARR, struct.pack("<IQ", ARR, 1) +
                                             struct.pack("<IQ", U32, 1) + b"\1\2")], pad=False),
     "truncated"),
    # --- alignment
    ("alignment_not_pow2.gguf", gguf([kv_u32("general.alignment", 48)]), "not a nonzero power of two"),
    ("alignment_zero.gguf", gguf([kv_u32("general.alignment", 0)]), "not a nonzero power of two"),
    ("alignment_wrong_type.gguf", gguf([kv("general.alignment", U64, struct.pack("<Q", 32))]),
     "general.alignment must be u32"),
    # --- tensor infos
    ("tensor_name_bad_utf8.gguf", gguf([], [tinfo(b"w\xff", [4], F32_T, 0)], F32_4), "is not valid UTF-8"),
    ("tensor_name_empty.gguf", gguf([], [tinfo("", [4], F32_T, 0)], F32_4), "is empty"),
    ("tensor_name_nul.gguf", gguf([], [tinfo(b"w\0x", [4], F32_T, 0)], F32_4), "contains a NUL byte"),
    ("tensor_name_too_long.gguf", gguf([], [tinfo("w" * 64, [4], F32_T, 0)], F32_4), "longer than 63"),
    ("tensor_name_duplicate.gguf", gguf([], [tinfo("w", [2], F32_T, 0),
                                             tinfo("w", [2], F32_T, 32)], F32_4 + b"\0" * 48),
     "duplicate tensor name 'w'"),
    ("tensor_n_dims_5.gguf", gguf([], [tinfo("w", [1, 1, 1, 1, 4], F32_T, 0)], F32_4), "n_dims 5 > 4"),
    ("tensor_n_dims_huge.gguf", gguf([], [tinfo("w", [4], F32_T, 0, n_dims=0xFFFFFFFF)], F32_4), "n_dims 4294967295"),
    ("tensor_ne_negative.gguf", gguf([], [tinfo("w", [4, -1], F32_T, 0)], F32_4), "negative dimension ne[1]"),
    ("tensor_nelements_overflow.gguf", gguf([], [tinfo("w", [2**32, 2**32], F32_T, 0)], F32_4),
     "element count overflows"),
    ("tensor_nbytes_overflow.gguf", gguf([], [tinfo("w", [2**62], F64_T, 0)], F32_4), "byte size overflows"),
    ("tensor_type_removed_4.gguf", gguf([], [tinfo("w", [32], 4, 0)], b"\0" * 32), "unknown tensor type 4"),
    ("tensor_type_huge.gguf", gguf([], [tinfo("w", [4], 0xFFFFFFFF, 0)], F32_4), "unknown tensor type 4294967295"),
    ("tensor_ne0_not_block_multiple.gguf", gguf([], [tinfo("w", [33], Q4_0_T, 0)], b"\0" * 64),
     "not a multiple of the q4_0 block size 32"),
    ("tensor_offset_misaligned.gguf", gguf([], [tinfo("w", [4], F32_T, 4)], F32_4 * 2),
     "not a multiple of the alignment 32"),
    ("tensor_data_past_eof.gguf", gguf([], [tinfo("w", [8], F32_T, 0)], F32_4), "lies outside the data section"),
    ("tensor_offset_huge.gguf", gguf([], [tinfo("w", [4], F32_T, 2**63)], F32_4), "lies outside the data section"),
    ("tensor_overlap.gguf", gguf([], [tinfo("a", [16], F32_T, 0), tinfo("b", [4], F32_T, 32)], F32_4 * 4),
     "tensors 'a' and 'b' overlap"),
    ("tensor_info_truncated.gguf", gguf([], [tinfo("w", [4, 4], F32_T, 0)[:-14]], pad=False, n_tensors=1), "truncated"),
    ("data_section_past_eof.gguf", gguf([], [tinfo("w", [0], F32_T, 0)], pad=False), "data section starts"),
    ("q8_0_data_short.gguf", gguf([], [tinfo("w", [64], Q8_0_T, 0)], b"\0" * 34), "lies outside the data section"),
]


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    expected = {}
    for name, data, frag in CASES:
        assert name not in expected, name
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        expected[name] = frag
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
