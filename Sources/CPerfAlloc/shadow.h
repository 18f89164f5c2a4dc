// The live-block table: one 8-byte slot per 32-byte granule of the address space, found from the
// block's address alone (no hashing, no probing, no lock); and the tables of frees by
// category. Hot operations static inline here, the rest in shadow.c.
#ifndef CPERFALLOC_SHADOW_H
#define CPERFALLOC_SHADOW_H

#include "alloc_support.h"

// MARK: - The shadow table
//
// glibc's chunks are at least 32 bytes and a block starts 16 bytes into its chunk, so no
// two live blocks start in the same 32-byte granule: a granule's slot belongs to at most
// one block, and malloc's own ordering (an address is handed out again only after its
// free) makes the thread that allocated a block and the one that frees it take turns on
// the slot. So a slot is written with plain stores, and its cost does not depend on how long
// the block lives: a tree's nodes, allocated side by side, fill consecutive slots.
// The address space is cut into 4 MiB regions, each with a leaf of 2^17 slots mapped at its
// first block (never reserved; the kernel backs only the pages written). A pointer array,
// mapped once per process, finds a region's leaf. Only a quiesced table (tableHold) is
// listed or unmapped.
#define REGION_BITS   22
#define GRANULE_BITS  5
#define ADDRESS_BITS  47
#define LEAF_SLOTS    (1ull << (REGION_BITS - GRANULE_BITS))
#define TOP_ENTRIES   (1ull << (ADDRESS_BITS - REGION_BITS))
#define MAX_LEAVES    (1u << 20)                     // 4 TiB of heap
#define BLOCK_ADDRESS ((1ull << ADDRESS_BITS) - 16)  // the bits a tracked block's address may have

// A slot, one word: size (22 bits; BIG_BIT: the size is in the big blocks' table) | stackId
// << 22 (21 bits) | generation << 43 (16 bits) | HALF_BIT (the block starts 16 bytes into
// the granule) | OBJECT_BIT | PREEXISTING_BIT (allocated before the session, see
// CPerfAlloc_preexistingBlocks: in no statistic) | LIVE_BIT; 0 when empty.
typedef struct Slot {
  uint64_t w0;
} Slot;
_Static_assert(sizeof(Slot) == 8, "a slot is 8 bytes: a quarter byte per byte of a heap of 32-byte blocks");

#define SIZE_MASK        ((1ull << 22) - 1)
#define STACK_SHIFT      22
#define STACK_MASK       ((1ull << 21) - 1)
#define GENERATION_SHIFT 43
#define HALF_BIT         (1ull << 59)
#define BIG_BIT          (1ull << 60)
#define OBJECT_BIT       (1ull << 61)
#define PREEXISTING_BIT  (1ull << 62)
#define LIVE_BIT         (1ull << 63)
#define LEAF_BYTES       (LEAF_SLOTS * sizeof(Slot))

// Leaves by region, mapped at the first session (TOP_ENTRIES pointers, never unmapped, so a
// hook can always read it).
extern ALLOC_HIDDEN Slot *_Atomic *g_top;
// The regions that have a leaf, in the order they were mapped (under g_leafLock).
extern ALLOC_HIDDEN uint32_t *g_leafRegions;
extern ALLOC_HIDDEN _Atomic uint32_t g_leafCount;
extern ALLOC_HIDDEN _Atomic uint64_t g_lostLeaves;  // blocks without a leaf (mapping failed or MAX_LEAVES)

static inline uint64_t halfBit(uint64_t address) { return (address & 16) ? HALF_BIT : 0; }

static inline Slot *leafFor(uint64_t address) {
  return atomic_load_explicit(&g_top[address >> REGION_BITS], memory_order_acquire);
}

static inline Slot *slotIn(Slot *leaf, uint64_t address) { return &leaf[(address >> GRANULE_BITS) & (LEAF_SLOTS - 1)]; }

static inline uint64_t slotAddress(uint32_t region, uint64_t index, uint64_t w0) {
  return ((uint64_t)region << REGION_BITS) | (index << GRANULE_BITS) | ((w0 & HALF_BIT) ? 16 : 0);
}

// In shadow.c: the region's leaf, mapped now if it has none; NULL (counted) when it cannot be.
__attribute__((noinline, cold)) ALLOC_HIDDEN Slot *leafCreate(uint64_t address);
ALLOC_HIDDEN bool shadowMapTop(void);
// Sorts g_leafRegions by address, so a listing comes out in address order.
ALLOC_HIDDEN void shadowSortLeaves(void);
// Calls visit(slot, address, context) for every live slot of leaf i (of g_leafRegions), reading
// only the pages the kernel has backed; returns the leaf's resident bytes.
ALLOC_HIDDEN uint64_t shadowVisitLeaf(uint32_t i, void (*visit)(const Slot *, uint64_t, void *), void *context);
// Gives a listed leaf's memory back (the table must be quiesced).
ALLOC_HIDDEN void shadowUnmapLeaf(uint32_t i);
ALLOC_HIDDEN void shadowReleaseLeaf(uint32_t i);
ALLOC_HIDDEN void shadowUnmapAll(void);

// MARK: - Big blocks
//
// A size that does not fit a slot's 22 bits (4 MiB and more: few blocks, and each a mapping of
// its own) is kept here by address, under a lock. bigPut: false when the table is full (the
// slot then keeps the size clamped). bigSize: the block's size, taken out with `remove`.
ALLOC_HIDDEN bool bigPut(uint64_t address, uint64_t size);
ALLOC_HIDDEN uint64_t bigSize(uint64_t address, bool remove);
ALLOC_HIDDEN void bigUnmap(void);

// The size bits of a new block's slot.
static inline uint64_t sizeBits(uint64_t address, uint64_t size) {
  if (LIKELY(size < SIZE_MASK)) return size;
  return bigPut(address, size) ? BIG_BIT : SIZE_MASK;
}

// A slot's block size (with `remove`, the big blocks' table forgets it).
static inline uint64_t slotSize(uint64_t address, uint64_t w0, bool remove) {
  if (LIKELY(!(w0 & BIG_BIT))) return w0 & SIZE_MASK;
  return bigSize(address, remove);
}

// MARK: - Frees by category

#define FREED_SLOTS 4096
// After the hashed slots, one slot per size class: untyped frees need no lookup (sizes
// have 40 bits, so classes stay under 37).
#define SIZE_CLASS_SLOTS  64
#define FREED_TABLE_BYTES pageRound((FREED_SLOTS + SIZE_CLASS_SLOTS) * sizeof(FreedSlot))

typedef struct FreedSlot {
  uint64_t key, count, bytes;
} FreedSlot;
_Static_assert(sizeof(FreedSlot) == 24, "freed slot layout");

// Frees counted by category, or allocations by stack: a thread table's (its owner's).
typedef struct FreedTable {
  FreedSlot *slots;  // FREED_TABLE_BYTES, mapped at the first free
  uint64_t used;
  uint64_t lost;  // frees whose category found no room (or no table)
} FreedTable;

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
// in all tables and keep evicting itself. `table` numbers the thread table.
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

#endif
