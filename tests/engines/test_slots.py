"""Cascade attention over a shared block and per-row slots equals ordinary causal attention."""

import sys

import pytest
import torch
import torch.nn.functional as F

from rstar2.engines import slots


class FakeAttentionModule:
    """Stands in for a transformers attention layer: only ``layer_idx`` is read."""

    layer_idx = 0


def reference(q, keys, values, visible):
    """SDPA over each row's full key list (block + own), with GQA heads repeated."""
    group = q.shape[1] // keys.shape[1]
    keys = keys.repeat_interleave(group, dim=1)
    values = values.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)


@pytest.mark.parametrize("readers", [None, [0, 2]])
def test_cascade_decode_matches_full_attention(readers):
    """All rows read the block (None), or only rows 0 and 2 do and row 1 has no block."""
    torch.manual_seed(0)
    n, heads, kv_heads, d, block_len = 3, 6, 2, 16, 7
    own_lens = [4, 9, 1]  # keys already in each row's slot
    block = slots.PrefixBlock(tuple(range(block_len)), torch.randn(1, kv_heads, block_len, d),
                              torch.randn(1, kv_heads, block_len, d))
    cache = slots.SlotCache(1, kv_heads, d, torch.float32, "cpu")
    cache.reserve(n, 12)
    cache.k.normal_()
    cache.v.normal_()
    q = torch.randn(n, heads, 1, d)
    k_new, v_new = torch.randn(n, kv_heads, 1, d), torch.randn(n, kv_heads, 1, d)
    write = torch.tensor([[length] for length in own_lens])
    rows = None if readers is None else torch.tensor(readers)
    plan = slots.AttentionPlan(cache.k, cache.v, 0, write, [(block, rows)])
    out, _ = slots.slot_attention(FakeAttentionModule(), q, k_new, v_new, None, kv_plan=plan)

    for r, length in enumerate(own_lens):
        own_k = cache.k[0, r, :, : length + 1]  # the new key was written at position `length`
        own_v = cache.v[0, r, :, : length + 1]
        assert torch.equal(own_k[:, length], k_new[r, :, 0])
        with_block = readers is None or r in readers
        keys = torch.cat([block.k[0], own_k], dim=1)[None] if with_block else own_k[None]
        values = torch.cat([block.v[0], own_v], dim=1)[None] if with_block else own_v[None]
        expected = reference(q[r : r + 1], keys, values, None)
        torch.testing.assert_close(out[r : r + 1].transpose(1, 2), expected, atol=1e-5, rtol=1e-5)


def test_prefill_rows_without_block_are_causal():
    torch.manual_seed(1)
    kv_heads, heads, d, steps = 1, 2, 8, 5
    cache = slots.SlotCache(1, kv_heads, d, torch.float32, "cpu")
    cache.reserve(1, steps)
    q, k, v = torch.randn(1, heads, steps, d), torch.randn(1, kv_heads, steps, d), torch.randn(
        1, kv_heads, steps, d)
    plan = slots.AttentionPlan(cache.k, cache.v, 0, torch.arange(steps)[None], [])
    out, _ = slots.slot_attention(FakeAttentionModule(), q, k, v, None, kv_plan=plan)
    causal = torch.ones(steps, steps, dtype=torch.bool).tril()
    torch.testing.assert_close(out.transpose(1, 2), reference(q, k, v, causal), atol=1e-5,
                               rtol=1e-5)


def test_slot_cache_grows_by_a_fraction_rounded_to_64_positions():
    """Each growth copies the whole cache: slots by half again (at least 8), lengths by a
    quarter (rounded up to 64), never the doubling that leaves most of a big cache unreachable."""
    cache = slots.SlotCache(1, 1, 4, torch.float32, "cpu")
    cache.reserve(2, 300)
    assert (cache.slots, cache.length) == (8, 320)
    cache.reserve(9, 321)
    assert (cache.slots, cache.length) == (12, 448)
    cache.reserve(40, 2000)
    assert (cache.slots, cache.length) == (40, 2048)
    cache.reserve(40, 2000)  # room already: nothing moves
    assert (cache.slots, cache.length) == (40, 2048)


def test_slot_cache_grows_and_swaps_keeping_contents():
    cache = slots.SlotCache(2, 1, 4, torch.float32, "cpu")
    cache.reserve(2, 3)
    cache.k[:, 0] = 1.0
    cache.k[:, 1] = 2.0
    cache.reserve(3, 300)
    assert cache.slots >= 3 and cache.length >= 300
    assert torch.all(cache.k[:, 0, :, :3] == 1.0) and torch.all(cache.k[:, 1, :, :3] == 2.0)
    cache.swap(0, 1, used=3)
    assert torch.all(cache.k[:, 0, :, :3] == 2.0) and torch.all(cache.k[:, 1, :, :3] == 1.0)


def mapping_rss_kb(*tensors: torch.Tensor) -> int:
    """Resident kB of the memory mappings that hold ``tensors`` (/proc/self/smaps; the system
    may merge neighbouring mappings into one, counted once)."""
    addresses, total, inside, found = [t.data_ptr() for t in tensors], 0, False, set()
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = any(start <= a < end for a in addresses)
                found |= {a for a in addresses if start <= a < end}
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    assert found == set(addresses), "no mapping holds a tensor"
    return total


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux memory maps")


@linux_only
def test_a_reserved_cache_maps_its_capacity_once_and_stays_put():
    cache = slots.SlotCache(2, 1, 64, torch.bfloat16, "cpu", capacity=(6, 1000))
    cache.reserve(2, 10)
    assert (cache.slots, cache.length) == (6, 1000)
    where = cache.k.data_ptr()
    cache.k[:, 1, :, :5] = 2.0
    cache.reserve(6, 1000)  # within the capacity: nothing moves, nothing is copied
    assert cache.k.data_ptr() == where
    assert torch.all(cache.k[:, 1, :, :5] == 2.0) and torch.all(cache.k[:, 1, :, 5:] == 0)
    assert torch.all(cache.v == 0)  # never written: the system's zeros
    cache.swap(1, 4, used=5)
    assert torch.all(cache.k[:, 4, :, :5] == 2.0) and torch.all(cache.k[:, 1, :, :5] == 0)
    with pytest.raises(ValueError, match="beyond the cache's capacity of 6 x 1000"):
        cache.reserve(7, 10)
    cache.clear()
    assert cache.slots == 0
    cache.reserve(1, 1)  # mapped afresh: zeros again
    assert cache.slots == 6 and torch.all(cache.k == 0)


@linux_only
def test_a_reserved_cache_is_resident_only_where_keys_are_written():
    """Two layers, slots of 4,096 positions (512 KiB a row): 100 keys in each of two slots
    make 4 pages of each of the 4 rows resident, not the 24 MiB the capacity spans."""
    cache = slots.SlotCache(2, 1, 64, torch.bfloat16, "cpu", capacity=(12, 4096))
    cache.reserve(2, 100)
    assert mapping_rss_kb(cache.k, cache.v) == 0
    cache.k[:, :2, :, :100] = 1.0
    written_kb = 2 * 2 * 100 * 64 * 2 / 1024  # layers x slots x positions x head_dim x bytes
    assert written_kb <= mapping_rss_kb(cache.k, cache.v) <= 2 * 2 * 16  # rows x 4 pages of 4 KiB


def test_a_cache_the_system_will_not_map_grows_as_before(monkeypatch):
    monkeypatch.setattr(slots, "RESERVE_LIMIT", 1024)
    cache = slots.SlotCache(1, 1, 4, torch.float32, "cpu", capacity=(40, 5000))
    cache.reserve(2, 300)
    assert (cache.slots, cache.length) == (8, 320)  # the growth rule above, not the capacity
    assert cache.capacity is None
