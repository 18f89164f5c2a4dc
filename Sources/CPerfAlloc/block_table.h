// The live-block tables (stripes of open-addressed slots, a lock each) and the tables of
// frees by category: hot operations static inline here, the rest in block_table.c.
#ifndef CPERFALLOC_BLOCK_TABLE_H
#define CPERFALLOC_BLOCK_TABLE_H

#include "alloc_support.h"

// MARK: - Live-block tables
//
// Open addressing with linear probing, split into stripes by address hash so threads
// rarely share a lock. A slot is 24 bytes:
//   w0: address >> 4 (43 bits; 0 empty, 1 tombstone) | generation << 43 (16 bits)
//   w1: size (40 bits) | tid << 40 (22 bits: pid_max <= 2^22) | object flag << 62
//   w2: stackId (32 bits) | microseconds since start << 32 (wraps after 71 minutes)
// Tables grow by 1.5x at 3/4 load, so a live block costs 32-48 bytes of table.

#ifndef STRIPE_BITS
#define STRIPE_BITS 6
#endif
#define STRIPES       (1 << STRIPE_BITS)
#define INITIAL_SLOTS 256
#define FREED_SLOTS   4096
// After the hashed slots, one slot per size class: untyped frees need no lookup (sizes
// have 40 bits, so classes stay under 37).
#define SIZE_CLASS_SLOTS  64
#define FREED_TABLE_BYTES pageRound((FREED_SLOTS + SIZE_CLASS_SLOTS) * sizeof(FreedSlot))
#define KEY_EMPTY         0ull
#define KEY_TOMBSTONE     1ull
#define ADDR_BITS         43
#define ADDR_MASK         ((1ull << ADDR_BITS) - 1)
#define SIZE_MASK         ((1ull << 40) - 1)
#define TID_MASK          ((1ull << 22) - 1)
#define OBJECT_BIT        (1ull << 62)
// w1: the block was allocated before the session started (tracked from process start,
// see CPerfAlloc_preexistingBlocks): it is in no statistic, only in the table.
#define PREEXISTING_BIT (1ull << 63)

typedef struct Slot {
  uint64_t w0, w1, w2;
} Slot;
_Static_assert(sizeof(Slot) == 24, "live-block slot must stay 24 bytes (per-block overhead)");

typedef struct FreedSlot {
  uint64_t key, count, bytes;
} FreedSlot;
_Static_assert(sizeof(FreedSlot) == 24, "freed slot layout");

// Frees counted by category: a stripe's (under its lock) or a nursery's (its owner's).
typedef struct FreedTable {
  FreedSlot *slots;  // FREED_TABLE_BYTES, mapped at the first free
  uint64_t used;
  uint64_t lost;  // frees whose category found no room (or no table)
} FreedTable;

typedef struct __attribute__((aligned(128))) Stripe {
  CPerfSupport_SpinLock lock;
  Slot *slots;
  uint64_t capacity;  // slots
  uint64_t mappedBytes;
  uint64_t used;  // live + tombstones
  uint64_t live;
  uint64_t liveBytes;
  uint64_t allocations;
  uint64_t allocatedBytes;
  uint64_t frees;
  uint64_t lostBlocks;
  FreedTable freed;
  uint64_t preLive;  // blocks with PREEXISTING_BIT
  uint64_t preLiveBytes;
} Stripe;
_Static_assert(sizeof(Stripe) == 128, "a stripe fills two cache lines, no false sharing");

extern ALLOC_HIDDEN Stripe g_stripes[STRIPES];
// Full stacks: the allocations that went to a stripe, by stack, under that stripe's lock
// (outside the stripe, which fills its two cache lines).
extern ALLOC_HIDDEN FreedTable g_stripeByStack[STRIPES];

// Blocks allocated together are mostly neighbours in memory and are often freed together:
// a block's home slot keeps that locality. The address's CHUNK_BITS-granule chunk (1 KiB)
// is hashed (stripe and base slot); the block's 32-byte position in the chunk is added to
// the base, so a chunk's blocks sit in consecutive slots of one stripe and a run of
// neighbours costs a few cache lines instead of a miss each. The position is h's low bits.
#ifndef CHUNK_BITS
#define CHUNK_BITS 6
#endif
#define POSITION_BITS (CHUNK_BITS - 1)
#define POSITION_MASK ((1ull << POSITION_BITS) - 1)

static inline uint64_t hashAddress(uint64_t key) {
  uint64_t h = (key >> CHUNK_BITS) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return (h & ~POSITION_MASK) | ((key >> 1) & POSITION_MASK);
}

static inline Stripe *stripeFor(uint64_t h) { return &g_stripes[h >> (64 - STRIPE_BITS)]; }

// Multiply-shift range reduction of the chunk's hash (any capacity works, so tables can
// grow by 1.5x), plus the position.
static inline uint64_t slotIndex(uint64_t h, uint64_t capacity) {
  uint64_t base = (uint64_t)(((unsigned __int128)((h & ~POSITION_MASK) << STRIPE_BITS) * capacity) >> 64);
  uint64_t i = base + (h & POSITION_MASK);
  return i >= capacity ? i - capacity : i;
}

ALLOC_HIDDEN bool stripeMap(Stripe *s, uint64_t capacity);
// stripeMap's scratch buffer (the largest stripe's live slots), kept for the session.
extern ALLOC_HIDDEN Slot *g_growScratch;
extern ALLOC_HIDDEN uint64_t g_growScratchBytes;

// Called with the stripe locked. Keeps (live + tombstones) <= 3/4 of the capacity.
static inline bool stripeReserve(Stripe *s) {
  if (LIKELY(s->slots && (s->used + 1) * 4 <= s->capacity * 3)) return true;
  uint64_t capacity = s->capacity ? s->capacity : INITIAL_SLOTS;
  if ((s->live + s->preLive + 1) * 2 > capacity) capacity += capacity / 2;
  return stripeMap(s, capacity);
}

// Backward-shift deletion (no tombstones): later slots of the probe run move back into
// the hole unless that would put them before their home slot. Called with the lock held.
static inline void stripeErase(Stripe *s, uint64_t i) {
  Slot *slots = s->slots;
  uint64_t capacity = s->capacity;
  uint64_t j = i;
  // A run of slots is mostly one chunk's blocks: its base is hashed once.
  uint64_t chunk = UINT64_MAX, base = 0;
  for (;;) {
    j = (j + 1 == capacity) ? 0 : j + 1;
    uint64_t k = slots[j].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) break;
    if (k == KEY_TOMBSTONE) continue;  // none are made any more; a hole cannot move past one
    if (k >> CHUNK_BITS != chunk) {
      chunk = k >> CHUNK_BITS;
      base = slotIndex(hashAddress(k) & ~POSITION_MASK, capacity);
    }
    uint64_t home = base + ((k >> 1) & POSITION_MASK);
    if (home >= capacity) home -= capacity;
    // Slot j may fill the hole at i unless its home lies cyclically in (i, j].
    bool homeInRange = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
    if (homeInRange) continue;
    slots[i] = slots[j];
    i = j;
  }
  slots[i].w0 = KEY_EMPTY;
  s->used--;
}

__attribute__((noinline, cold)) ALLOC_HIDDEN bool freedMap(FreedTable *t);

// An untyped free: its size class's slot.
static inline void freedAddUntyped(FreedTable *t, uint64_t size) {
  if (UNLIKELY(!t->slots) && !freedMap(t)) return;
  uint32_t sizeClass = sizeClassOf(size);
  FreedSlot *f = &t->slots[FREED_SLOTS + sizeClass];
  if (UNLIKELY(f->count == 0)) {
    f->key = ((uint64_t)sizeClass << 1) | 1;
    t->used++;
  }
  f->count++;
  f->bytes += size;
}

// Keys are metadata pointers or small odd numbers: mix before indexing. The tables are
// page-aligned, so without the per-table offset one key would land in the same cache set
// in all tables and keep evicting itself. `table` numbers the table (stripes first, then
// nurseries).
static inline uint64_t freedHome(uint64_t table, uint64_t key) {
  uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> 52;  // 12 bits: FREED_SLOTS == 4096
  return (i + table * 43) & (FREED_SLOTS - 1);
}

ALLOC_HIDDEN void freedProbe(FreedTable *t, uint64_t i, uint64_t key, uint64_t size);

static inline __attribute__((always_inline)) void freedAdd(FreedTable *t, uint64_t table, uint64_t key, uint64_t size) {
  if (key & 1) {
    freedAddUntyped(t, size);  // the key is the size's
    return;
  }
  if (UNLIKELY(!t->slots) && !freedMap(t)) return;
  uint64_t i = freedHome(table, key);
  FreedSlot *f = &t->slots[i];
  if (LIKELY(f->key == key && f->count)) {  // the category's slot, met before
    f->count++;
    f->bytes += size;
    return;
  }
  freedProbe(t, i, key, size);
}

// An allocation counted under its stack (the slot's w2 holds the stack id; 0: none), in a
// freed-style table keyed by stackId << 1 (even, so never taken for a size class).
static inline __attribute__((always_inline)) void countByStack(FreedTable *t, uint64_t table, uint64_t w2,
                                                               uint64_t size) {
  uint32_t stackId = (uint32_t)w2;
  if (stackId) freedAdd(t, table, (uint64_t)stackId << 1, size);
}

// In block_table.c: puts a live block's slot into its stripe (called with the stripe locked).
ALLOC_HIDDEN bool stripePlace(Stripe *s, uint64_t h, const Slot *slot);

// Takes out the slot stripePlace put in, if it is still there unchanged.
static inline void stripeRemoveExact(Stripe *s, uint64_t h, const Slot *slot) {
  uint64_t key = slot->w0 & ADDR_MASK;
  uint64_t capacity = s->capacity;
  for (uint64_t i = slotIndex(h, capacity);; i = (i + 1 == capacity) ? 0 : i + 1) {
    const Slot *at = &s->slots[i];
    uint64_t k = at->w0 & ADDR_MASK;
    if (k == KEY_EMPTY) return;
    if (k != key) continue;
    if (at->w0 == slot->w0 && at->w1 == slot->w1 && at->w2 == slot->w2) {
      stripeErase(s, i);
      s->live--;
      __atomic_store_n(&s->liveBytes, s->liveBytes - (slot->w1 & SIZE_MASK), __ATOMIC_RELAXED);
    }
    return;
  }
}

#endif
