#!/usr/bin/python3
"""Writes the golden engine-event payloads that engine_wire_test.cc decodes.

Run with Debian's interpreter, which has python3-msgpack:

    /usr/bin/python3 src/adapters/testdata/make_golden.py

Each payload is packed the way its publisher packs it (msgspec and the
Mooncake master both write plain msgpack: ints as the smallest int type,
floats as float64, bytes as bin, tuples as arrays, maps in field order), so a
decoder that passes these reads the real streams. The expected records are
written out by hand in the test, not derived from this file.

The output is deterministic: re-running it must leave git clean.
"""

import os
import sys

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))

# vLLM publishes hashes as the last 8 bytes of the digest as an unsigned int,
# which often exceeds the int64 range.
BIG = 0xF0E1D2C3B4A59687
TS = 1789095808.83  # from a vLLM v0.26.0 capture (kthena#1535)


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def tokens(start, count):
    return list(range(start, start + count))


def legacy_positional():
    # vLLM <= v0.23 / SGLang original: array_like structs, trailing default
    # fields omitted, batch [ts, events] without dp_rank.
    return [
        TS,
        [
            ["BlockStored", [1, BIG], None, tokens(100, 8), 4, None],
            ["BlockStored", [3], BIG, tokens(200, 4), 4, None, "GPU"],
            ["BlockRemoved", [1]],
            ["BlockRemoved", [BIG], "GPU"],
            ["AllBlocksCleared"],
        ],
    ]


def vllm_v026():
    # vLLM v0.26: map events tagged by "type", positional batch. Fields
    # without a default are always sent (None included); defaulted ones only
    # when set.
    return [
        TS,
        [
            {
                "type": "BlockStored",
                "block_hashes": [11, 12],
                "parent_block_hash": None,
                "token_ids": tokens(0, 32),
                "block_size": 16,
                "lora_id": None,
                "medium": "GPU",
                "lora_name": None,
                "extra_keys": [("s1",), None],
                "group_idx": 0,
                "kv_cache_spec_kind": "full_attention",
            },
            {
                "type": "BlockStored",
                "block_hashes": [13],
                "parent_block_hash": 12,
                "token_ids": tokens(32, 16),
                "block_size": 16,
                "lora_id": 7,
                "medium": "CPU",
                "lora_name": "adapter-a",
                "extra_keys": [("adapter-a", ("mm-0", 4), b"\x01\xab", True, -3)],
                "group_idx": 1,
                "kv_cache_spec_kind": "sliding_window",
                "kv_cache_spec_sliding_window": 4096,
            },
            {"type": "BlockRemoved", "block_hashes": [11], "medium": "GPU", "group_idx": 0},
            {"type": "AllBlocksCleared"},
        ],
        0,
    ]


def map_outer_map_inner():
    # Newest vLLM EventBatch without array_like: maps at both levels. Carries
    # one field and one event type from the future, which must be counted.
    return {
        "ts": TS,
        "events": [
            {
                "type": "BlockStored",
                "block_hashes": [21],
                "parent_block_hash": None,
                "token_ids": tokens(0, 16),
                "block_size": 16,
                "lora_id": None,
                "medium": None,
                "lora_name": None,
                "event_version": 1,
            },
            {"type": "BlockPinned", "block_hashes": [21]},
            {"type": "BlockRemoved", "block_hashes": [21], "medium": None},
        ],
        "data_parallel_rank": 3,
    }


def sglang_cpu_tier1():
    # SGLang HiCache: L2 medium "CPU_TIER1", hashes as signed int64 (first 16
    # hex digits of a SHA-256), map events (#37482) with its cache_salt field.
    return [
        TS,
        [
            {
                "type": "BlockStored",
                "block_hashes": [-0x1122334455667788, 42],
                "parent_block_hash": -1,
                "token_ids": tokens(7, 4),
                "block_size": 2,
                "lora_id": None,
                "medium": "CPU_TIER1",
                "cache_salt": "salt-x",
            },
            {"type": "BlockRemoved", "block_hashes": [-0x1122334455667788], "medium": "CPU_TIER1"},
        ],
        0,
    ]


def bytes_hashes():
    # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: raw digests as bin. A 32-byte
    # SHA-256 keeps its last 8 bytes; a 4-byte value is left-padded.
    digest = bytes(range(32))
    short = b"\xde\xad\xbe\xef"
    return [
        TS,
        [
            ["BlockStored", [digest, short], short, tokens(0, 32), 16, None, "GPU", None],
            ["BlockRemoved", [digest], "GPU"],
        ],
        None,
    ]


def mooncake_envelope(event_id, event_type, legacy_type, medium, tenant):
    event = {
        "event_id": event_id,
        "timestamp": 1760000000123,
        "event_type": event_type,
        "type": legacy_type,
        "model_name": "Qwen/Qwen2.5-7B-Instruct",
        "block_size": 16,
        "additional_salt": None,
        "lora_name": None,
        "tenant_id": tenant,
        "backend_id": "pool-a",
        "medium": medium,
        "dp_rank": 0,
    }
    return event


def mooncake_batch():
    # What mooncake_master publishes: [timestamp_ms, [event maps], dp_rank],
    # legacy aliases on (the alias hashes are packed as int64).
    seq = 0xFEDCBA9876543210
    stored = mooncake_envelope(1, "stored", "BlockStored", "cpu", "default")
    stored.update({
        "group_id": "group:2",
        "object_key": "Qwen@tp_rank:0@pcp0@dcp0@pp_rank:0@group:2@fedcba9876543210",
        "seq_hashes": [seq],
        "block_hashes": [seq - (1 << 64)],
        "base_block_idx": None,
        "parent_hash": None,
        "token_ids": None,
        "parent_block_hash": None,
        "connector_block_hash": "fedcba9876543210",
    })
    removed = mooncake_envelope(2, "removed", "BlockRemoved", "disk", "default")
    removed.update({
        "group_id": None,
        "object_key": "Qwen@tp_rank:0@pcp0@dcp0@pp_rank:0@fedcba9876543210",
        "seq_hashes": [seq],
        "block_hashes": [seq - (1 << 64)],
        "base_block_idx": None,
    })
    cleared = mooncake_envelope(3, "cleared", "AllBlocksCleared", None, "tenant-b")
    return [1760000000123, [stored, removed, cleared], 0]


def mooncake_single():
    # The RFC #1527 example: one stored event map with a chain of three blocks.
    return {
        "event_id": 42,
        "timestamp": 1739145600000,
        "event_type": "stored",
        "model_name": "llama-3.1-8b",
        "block_size": 64,
        "additional_salt": "salt-1",
        "lora_name": None,
        "tenant_id": "tenant-a",
        "backend_id": "worker-0",
        "medium": "gpu",
        "dp_rank": 1,
        "seq_hashes": [1234567890, 9876543210, 1122334455],
        "base_block_idx": 5,
        "parent_hash": 9999999999,
        "token_ids": None,
    }


def mooncake_list():
    removed = mooncake_envelope(7, "removed", None, "L2", None)
    del removed["type"]
    removed.update({"seq_hashes": [5, 6]})
    cleared = mooncake_envelope(8, "cleared", None, None, "default")
    del cleared["type"]
    return [removed, cleared]


def vllm_storage_locality():
    # vLLM 0.26 storage tiers (#47923, #48281): FS and OBJ media with
    # locality on stored and removed events, plus ownership and session_id.
    return [
        TS,
        [
            {"type": "BlockStored", "block_hashes": [31], "parent_block_hash": None,
             "token_ids": tokens(0, 4), "block_size": 4, "lora_id": None, "medium": "FS",
             "lora_name": None, "group_idx": 0, "kv_cache_spec_kind": "full_attention",
             "locality": "REMOTE", "ownership": "shared", "session_id": "s-1"},
            ["BlockStored", [32], 31, tokens(4, 4), 4, None, "OBJ", None, None, 0,
             "full_attention", None, "LOCAL"],
            {"type": "BlockRemoved", "block_hashes": [31], "medium": "FS", "locality": "REMOTE"},
        ],
        0,
    ]


def sglang_salted():
    # SGLang's salted events in both forms: the #30827 positional metadata map
    # where vLLM has lora_name, and #37482 map events with cache_salt,
    # session_id; EAGLE bigram token ids; CPU_PINNED and EXTERNAL media.
    return [
        TS,
        [
            ["BlockStored", [-5, 6], None, tokens(10, 4), 2, None, "CPU_PINNED",
             {"cache_salt": "tenant-salt"}],
            {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None,
             "token_ids": [[20, 21], [21, 22]], "block_size": 2, "lora_id": None,
             "medium": "EXTERNAL", "cache_salt": "tenant-salt", "session_id": "sess"},
        ],
        1,
    ]


GOLDEN = {
    "vllm_legacy_positional.msgpack": legacy_positional,
    "vllm_v026_map_events.msgpack": vllm_v026,
    "vllm_map_batch_map_events.msgpack": map_outer_map_inner,
    "sglang_cpu_tier1_negative_hash.msgpack": sglang_cpu_tier1,
    "vllm_bytes_hashes.msgpack": bytes_hashes,
    "vllm_storage_locality.msgpack": vllm_storage_locality,
    "sglang_salted_eagle.msgpack": sglang_salted,
    "mooncake_batch.msgpack": mooncake_batch,
    "mooncake_single_event.msgpack": mooncake_single,
    "mooncake_event_list.msgpack": mooncake_list,
}


def main():
    for name, build in GOLDEN.items():
        with open(os.path.join(HERE, name), "wb") as out:
            out.write(pack(build()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
