// The stack table's storage, its insertion (stackIntern) and CPerfAlloc_stackFrames, which
// reads it while recording and after.
#include "stack_table.h"

ALLOC_HIDDEN StackSlot *g_stackSlots;
ALLOC_HIDDEN uint64_t *g_stackArena;
ALLOC_HIDDEN _Atomic uint64_t g_stackArenaUsed;
ALLOC_HIDDEN _Atomic uint64_t g_stackCount;
ALLOC_HIDDEN _Atomic uint64_t g_lostStacks;

ALLOC_HIDDEN uint32_t stackIntern(const uint64_t *frames, uint32_t depth, uint64_t partial) {
  // Rotate-xor keeps the per-frame dependency chain to two cycles; one multiply mixes.
  uint64_t h = partial ^ ((uint64_t)depth << 56);
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  if (h < 2) h += 2;
  uint32_t index = (uint32_t)(h >> 40) & (STACK_SLOTS - 1);
  for (uint32_t probes = 0; probes < 4096; probes++) {
    StackSlot *slot = &g_stackSlots[index];
    uint64_t seen = atomic_load_explicit(&slot->hash, memory_order_acquire);
    if (seen == 0) {
      uint64_t expected = 0;
      if (atomic_compare_exchange_strong_explicit(&slot->hash, &expected, STACK_BUSY, memory_order_acq_rel,
                                                  memory_order_acquire)) {
        uint64_t offset = atomic_fetch_add_explicit(&g_stackArenaUsed, depth, memory_order_relaxed);
        if (offset + depth > STACK_ARENA_FRAMES) {
          // Full: leave a slot that matches nothing (depth 0 never equals a real depth).
          slot->offset = 0;
          slot->depth = 0;
          atomic_store_explicit(&slot->hash, h, memory_order_release);
          atomic_fetch_add_explicit(&g_lostStacks, 1, memory_order_relaxed);
          return 0;
        }
        memcpy(&g_stackArena[offset], frames, depth * sizeof(uint64_t));
        slot->offset = (uint32_t)offset;
        slot->depth = depth;
        atomic_store_explicit(&slot->hash, h, memory_order_release);
        atomic_fetch_add_explicit(&g_stackCount, 1, memory_order_relaxed);
        return index + 1;
      }
      seen = expected;
    }
    while (seen == STACK_BUSY) {
      __builtin_ia32_pause();
      seen = atomic_load_explicit(&slot->hash, memory_order_acquire);
    }
    if (seen == h && slot->depth == depth &&
        memcmp(&g_stackArena[slot->offset], frames, depth * sizeof(uint64_t)) == 0) {
      return index + 1;
    }
    index = (index + 1) & (STACK_SLOTS - 1);
  }
  atomic_fetch_add_explicit(&g_lostStacks, 1, memory_order_relaxed);
  return 0;
}

const uint64_t *CPerfAlloc_stackFrames(uint32_t stackId, uint32_t *depth) {
  if (depth) *depth = 0;
  int32_t state = atomic_load(&g_state);
  // Entries are published with release order and never change: readable while recording.
  if ((state != STATE_STOPPED && state != STATE_RUNNING) || !g_stackSlots || stackId == 0 || stackId > STACK_SLOTS)
    return NULL;
  StackSlot *slot = &g_stackSlots[stackId - 1];
  if (atomic_load(&slot->hash) < 2 || slot->depth == 0) return NULL;
  if (depth) *depth = slot->depth;
  return &g_stackArena[slot->offset];
}
