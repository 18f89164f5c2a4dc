// The recording paths' hot half: a new block's slot, its way into the shadow table, a freed
// block's way out (takeBlock); static inline, so the hooks inline them.
#ifndef CPERFALLOC_RECORD_H
#define CPERFALLOC_RECORD_H

#include "shadow.h"
#include "swift_objects.h"
#include "thread_table.h"
#include "timeline.h"

// MARK: - Recording paths (only reached while g_recording is set)

// Reads the clock on its turn (every CLOCK_EVERY allocations of a thread); true if it did,
// with the time in *micros (the timeline is sampled then).
static inline bool tickClock(uint64_t *micros) {
  if (LIKELY(t_clockCountdown != 0)) {
    t_clockCountdown--;
    return false;
  }
  t_clockCountdown = CLOCK_EVERY - 1;
  uint64_t now = microsSinceStart();
  uint64_t seen = atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
  while (now > seen &&
         !atomic_compare_exchange_weak_explicit(&g_nowMicros, &seen, now, memory_order_relaxed, memory_order_relaxed)) {
  }
  *micros = now;
  return true;
}

// A session block's slot but its size and stack: generation, flags.
static inline uint64_t sessionBits(uint64_t address, bool object) {
  return atomic_load_explicit(&g_generationBits, memory_order_relaxed) | halfBit(address) | (object ? OBJECT_BIT : 0) |
         LIVE_BIT;
}

// A block its free never reached us for (freed by a path that bypasses free) had the slot
// at `address`'s granule: it is gone.
static inline void forgetSlot(ThreadTable *t, uint64_t address, uint64_t old) {
  uint64_t oldAddress = (address & ~31ull) | ((old & HALF_BIT) ? 16 : 0);
  uint64_t size = slotSize(oldAddress, old, true);
  if (old & PREEXISTING_BIT) {
    BUMP(t->preLive, -1);
    BUMP(t->preLiveBytes, -size);
  } else {
    BUMP(t->removed, 1);
    BUMP(t->removedBytes, size);
  }
}

// Puts a block into the shadow table (inside t's busy section); false (counted) without a
// leaf. `bits`: the slot but its size.
static inline __attribute__((always_inline)) bool shadowInsert(ThreadTable *t, uint64_t address, uint64_t size,
                                                               uint64_t bits) {
  if (UNLIKELY(address & ~BLOCK_ADDRESS)) {
    BUMP(t->lost, 1);
    return false;
  }
  Slot *leaf = leafFor(address);
  if (UNLIKELY(!leaf) && !(leaf = leafCreate(address))) {
    BUMP(t->lost, 1);
    return false;
  }
  Slot *e = slotIn(leaf, address);
  uint64_t old = e->w0;
  if (UNLIKELY(old & LIVE_BIT)) forgetSlot(t, address, old);
  e->w0 = bits | sizeBits(address, size);
  if (bits & PREEXISTING_BIT) {
    BUMP(t->preLive, 1);
    BUMP(t->preLiveBytes, size);
  } else {
    BUMP(t->allocations, 1);
    BUMP(t->allocatedBytes, size);
  }
  return true;
}

// In record.c: the out-of-line paths.
// `cacheMissed`: the caller looked the walk up in the thread's stack cache and missed.
__attribute__((noinline)) ALLOC_HIDDEN void recordAllocWithStack(void *pointer, size_t size, uintptr_t *frame,
                                                                 bool object, bool cacheMissed);
__attribute__((noinline)) ALLOC_HIDDEN void recordAllocCountsAt(void *pointer, size_t size, bool object);
__attribute__((noinline, cold)) ALLOC_HIDDEN void recordPaused(void *pointer, size_t size, uintptr_t *frame);

static inline __attribute__((always_inline)) void recordAllocCounts(void *pointer, size_t size, uintptr_t *frame) {
  if (UNLIKELY(t_ignoringAllocations)) return;
  recordAllocCountsAt(pointer, size, isObjectAllocation(frame));
}

static inline __attribute__((always_inline)) void recordAlloc(void *pointer, size_t size, uintptr_t *frame) {
  if (UNLIKELY(atomic_load_explicit(&g_paused, memory_order_relaxed))) {
    recordPaused(pointer, size, frame);
    return;
  }
  if (UNLIKELY(g_mode == CPerfAlloc_ModeFullStacks ||
               atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed))) {
    if (!t_ignoringAllocations) recordAllocWithStack(pointer, size, frame, isObjectAllocation(frame), false);
    return;
  }
  recordAllocCounts(pointer, size, frame);
}

enum { TAKE_UNTRACKED = 0, TAKE_TRACKED = 1, TAKE_PREEXISTING = 2 };

// A block taken out of the shadow table: its slot and its size.
typedef struct Taken {
  uint64_t w0, size;
} Taken;

// Takes `pointer`'s slot out of the shadow table (inside t's busy section); fills *out.
// With `aggregate`, counts the free under its category (the block is still allocated: a
// Swift object's first word is its metadata).
static inline __attribute__((always_inline)) int shadowTake(ThreadTable *t, void *pointer, Taken *out, bool aggregate) {
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  if (UNLIKELY(address & ~BLOCK_ADDRESS)) return TAKE_UNTRACKED;
  Slot *leaf = leafFor(address);
  if (!leaf) return TAKE_UNTRACKED;
  Slot *e = slotIn(leaf, address);
  uint64_t w0 = e->w0;
  if ((w0 & (LIVE_BIT | HALF_BIT)) != (LIVE_BIT | halfBit(address))) return TAKE_UNTRACKED;
  e->w0 = 0;
  uint64_t size = slotSize(address, w0, true);
  *out = (Taken){w0, size};
  if (w0 & PREEXISTING_BIT) {
    BUMP(t->preLive, -1);
    BUMP(t->preLiveBytes, -size);
    return TAKE_PREEXISTING;
  }
  BUMP(t->removed, 1);
  BUMP(t->removedBytes, size);
  if (aggregate) {
    BUMP(t->frees, 1);
    uint64_t metadata = (w0 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
    if (metadata != 0 && !(metadata & 7))
      freedAdd(&t->freed, t->index, metadata, size);
    else
      freedAddUntyped(&t->freed, size);
  }
  return TAKE_TRACKED;
}

// Removes `pointer` from the shadow table; fills *out.
static inline int takeBlock(void *pointer, Taken *out, bool aggregate) {
  ThreadTable *t = tableAcquire();
  if (!t) return TAKE_UNTRACKED;
  int taken = shadowTake(t, pointer, out, aggregate);
  tableRelease(t);
  return taken;
}

// Call while the block is still allocated: a Swift object's first word is its metadata.
static inline uint64_t categoryKey(void *pointer, const Taken *block) {
  if (!(block->w0 & OBJECT_BIT)) return sizeKey(block->size);
  uint64_t metadata = *(uint64_t *)pointer;
  return (metadata == 0 || (metadata & 7)) ? sizeKey(block->size) : metadata;
}

// realloc's free of the old block, counted under the category it had.
static inline void aggregateFree(const Taken *block, uint64_t key) {
  ThreadTable *t = tableAcquire();
  if (!t) return;
  BUMP(t->frees, 1);
  freedAdd(&t->freed, t->index, key, block->size);
  tableRelease(t);
}

// realloc failed: the old block is still valid, put it back unchanged.
static inline void putBack(void *pointer, const Taken *block) {
  ThreadTable *t = tableAcquire();
  if (!t) return;
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  Slot *leaf = leafFor(address);
  if (leaf) {
    Slot *e = slotIn(leaf, address);
    e->w0 = (block->w0 & ~(SIZE_MASK | BIG_BIT)) | sizeBits(address, block->size);
    if (block->w0 & PREEXISTING_BIT) {
      BUMP(t->preLive, 1);
      BUMP(t->preLiveBytes, block->size);
    } else {
      BUMP(t->removed, -1);
      BUMP(t->removedBytes, -block->size);
    }
  }
  tableRelease(t);
}

static inline void recordFree(void *pointer) {
  Taken block;
  takeBlock(pointer, &block, true);
}

// While every block is tracked for the leaks instrument, new blocks start zeroed (their
// content is unspecified, so this changes no defined behaviour, as glibc's
// MALLOC_PERTURB_ does with another byte). A conservative scan reads every word of a live
// block: uninitialized bytes left from a freed block (spare array capacity, the unused
// end of an allocator's page, padding) would otherwise hold stale pointers, and a stale
// pointer to an address reused since reads as a reference that keeps a leak alive.
extern ALLOC_HIDDEN bool g_zeroNewBlocks;

static inline void zeroIfTrackingAll(void *pointer, size_t from, size_t to) {
  if (UNLIKELY(g_zeroNewBlocks)) memset((char *)pointer + from, 0, to - from);
}

#endif
