// The recording paths' hot half: a new block's slot and its way into a nursery or the
// stripes, a freed block's way out (takeBlock); static inline, so the hooks inline them.
#ifndef CPERFALLOC_RECORD_H
#define CPERFALLOC_RECORD_H

#include "block_table.h"
#include "nursery.h"
#include "swift_objects.h"
#include "timeline.h"

// MARK: - Recording paths (only reached while g_recording is set)

static inline uint64_t currentTidBits(void) {
  if (UNLIKELY(t_tidBits == 0)) t_tidBits = ((uint64_t)currentTid() & TID_MASK) << 40;
  return t_tidBits;
}

// The block's slot, stack id still 0. *clockRead: this allocation read the clock (the
// timeline is sampled then).
static inline __attribute__((always_inline)) Slot newSlot(uint64_t key, size_t size, bool object, bool *clockRead) {
  uint64_t micros;
  if (UNLIKELY(t_clockCountdown == 0)) {
    t_clockCountdown = CLOCK_EVERY - 1;
    micros = microsSinceStart();
    *clockRead = true;
    uint64_t seen = atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
    while (micros > seen && !atomic_compare_exchange_weak_explicit(&g_nowMicros, &seen, micros, memory_order_relaxed,
                                                                   memory_order_relaxed)) {}
  } else {
    t_clockCountdown--;
    micros = atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
  }
  uint64_t size40 = size > SIZE_MASK ? SIZE_MASK : size;
  return (Slot){
      .w0 = key | atomic_load_explicit(&g_generationBits, memory_order_relaxed),
      .w1 = size40 | currentTidBits() | (object ? OBJECT_BIT : 0),
      .w2 = micros << 32,
  };
}

// In record.c: the out-of-line paths.
__attribute__((noinline)) ALLOC_HIDDEN void recordAllocWithStack(void *pointer, size_t size, uintptr_t *frame,
                                                                 bool object);
__attribute__((noinline)) ALLOC_HIDDEN void recordCountsInStripes(uint64_t h, uint64_t w0, uint64_t w1, uint64_t w2,
                                                                  size_t size, uint32_t flags);
__attribute__((noinline, cold)) ALLOC_HIDDEN void recordPaused(void *pointer, size_t size, uintptr_t *frame);

// Types and counts: the common case, kept lean (no stack buffers on this path).
static inline __attribute__((always_inline)) void recordAllocCountsAt(void *pointer, size_t size, bool object) {
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  bool clockRead = false;
  uint64_t key = address >> 4;
  uint64_t h = hashAddress(key);
  Slot slot = newSlot(key, size, object, &clockRead);
  bool fits = !(address & 15) && key <= ADDR_MASK;
  Nursery *n = t_nursery;
  if (UNLIKELY(n == NULL) && atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed)) n = claimNursery();
  // nurseryEnter reads the flag the drains turn off.
  if (LIKELY(n != NULL && fits) && nurseryEnter(n)) {
    nurseryInsert(n, h, &slot, size);
    if (UNLIKELY(clockRead)) timelineMaybeSample(slot.w2 >> 32);
    nurseryLeave(n);
    return;
  }
  recordCountsInStripes(h, slot.w0, slot.w1, slot.w2, size, (fits ? 1 : 0) | (clockRead ? 2 : 0));
}

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
    if (!t_ignoringAllocations) recordAllocWithStack(pointer, size, frame, isObjectAllocation(frame));
    return;
  }
  recordAllocCounts(pointer, size, frame);
}

enum { TAKE_UNTRACKED = 0, TAKE_TRACKED = 1, TAKE_PREEXISTING = 2 };

// In record.c: the ways to a block not in the thread's own nursery. noescape on `out` (only
// written through) tells callers what the compiler inferred while these were static: a
// free's slot stays the hook's own, so freeRecordingSlow still ends in a tail call.
__attribute__((noinline)) ALLOC_HIDDEN int takeFromOthers(Nursery *own, Nursery *counter, void *pointer, uint64_t key,
                                                          uint64_t h, Slot *__attribute__((noescape)) out,
                                                          bool aggregate);
__attribute__((noinline)) ALLOC_HIDDEN int takeFromStripesAfterDrain(void *pointer, uint64_t key, uint64_t h,
                                                                     Slot *__attribute__((noescape)) out,
                                                                     bool aggregate);
__attribute__((noinline)) ALLOC_HIDDEN int takeAsOverflowThread(void *pointer, uint64_t key, uint64_t h,
                                                                Slot *__attribute__((noescape)) out, bool aggregate);

// The thread's own nursery; true if the block was there. Reads the slot's words into
// registers: *out is only written for realloc (a free's caller discards it).
static inline __attribute__((always_inline)) bool takeFromOwnNursery(Nursery *own, void *pointer, uint64_t key,
                                                                     uint64_t h, Slot *out, bool aggregate) {
  Slot *e = &own->slots[nurseryIndex(h)];
  uint64_t w0 = __atomic_load_n(&e->w0, __ATOMIC_RELAXED);
  if ((w0 & ADDR_MASK) != key) return false;
  uint64_t w1 = e->w1;
  if (!aggregate) *out = (Slot){w0, w1, e->w2};
  // Only a second free of the same block could race with this store.
  __atomic_store_n(&e->w0, 0, __ATOMIC_RELAXED);
  countNurseryTake(own, w1, pointer, aggregate);
  return true;
}

// Removes `pointer` from wherever it is tracked (takeFromStripes' results); fills *out.
static inline __attribute__((always_inline)) int takeBlock(void *pointer, Slot *out, bool aggregate) {
  uint64_t key = (uint64_t)(uintptr_t)pointer >> 4;
  uint64_t h = hashAddress(key);
  Nursery *n = t_nursery;
  if (UNLIKELY(n == NULL) && atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed)) {
    n = claimNursery();
    if (n == NULL) return takeAsOverflowThread(pointer, key, h, out, aggregate);
  }
  // nurseryEnter reads the flag the drains turn off.
  if (LIKELY(n != NULL)) {
    if (nurseryEnter(n)) {
      int taken = takeFromOwnNursery(n, pointer, key, h, out, aggregate)
                      ? TAKE_TRACKED
                      : takeFromOthers(n, n, pointer, key, h, out, aggregate);
      nurseryLeave(n);
      return taken;
    }
  }
  return takeFromStripesAfterDrain(pointer, key, h, out, aggregate);
}

// Call while the block is still allocated: a Swift object's first word is its metadata.
static inline uint64_t categoryKey(void *pointer, const Slot *slot) {
  uint64_t size = slot->w1 & SIZE_MASK;
  if (!(slot->w1 & OBJECT_BIT)) return sizeKey(size);
  uint64_t metadata = *(uint64_t *)pointer;
  return (metadata == 0 || (metadata & 7)) ? sizeKey(size) : metadata;
}

static inline void aggregateFree(void *pointer, const Slot *slot, uint64_t key) {
  uint64_t size = slot->w1 & SIZE_MASK;
  uint64_t h = hashAddress((uint64_t)(uintptr_t)pointer >> 4);
  Stripe *s = stripeFor(h);
  CPerfSupport_spinLock(&s->lock);
  if (LIKELY(atomic_load_explicit(&g_recording, memory_order_relaxed))) {
    s->frees++;
    freedAdd(&s->freed, (uint64_t)(s - g_stripes), key, size);
  }
  CPerfSupport_spinUnlock(&s->lock);
}

// realloc failed: the old block is still valid, put it back unchanged.
static inline void putBack(void *pointer, const Slot *slot) {
  uint64_t key = (uint64_t)(uintptr_t)pointer >> 4;
  uint64_t h = hashAddress(key);
  Stripe *s = stripeFor(h);
  CPerfSupport_spinLock(&s->lock);
  if (atomic_load_explicit(&g_recording, memory_order_relaxed) && stripeReserve(s)) {
    uint64_t i = slotIndex(h, s->capacity);
    while ((s->slots[i].w0 & ADDR_MASK) > KEY_TOMBSTONE) i = (i + 1 == s->capacity) ? 0 : i + 1;
    if ((s->slots[i].w0 & ADDR_MASK) == KEY_EMPTY) s->used++;
    s->slots[i] = *slot;
    uint64_t size = slot->w1 & SIZE_MASK;
    if (slot->w1 & PREEXISTING_BIT) {
      s->preLive++;
      s->preLiveBytes += size;
    } else {
      s->live++;
      __atomic_store_n(&s->liveBytes, s->liveBytes + size, __ATOMIC_RELAXED);
    }
  }
  CPerfSupport_spinUnlock(&s->lock);
}

static inline void recordFree(void *pointer) {
  Slot slot;
  takeBlock(pointer, &slot, true);
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
