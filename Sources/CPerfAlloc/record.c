// The recording paths' out-of-line half: blocks from before the session, a block's way
// into the stripes (with its stack), and the slower ways to find a freed block.
#include "record.h"

#include "stack_walk.h"

ALLOC_HIDDEN bool g_zeroNewBlocks;

// Before the session: the block's address, size, thread and object flag, nothing else.
// A block allocated while start() ends the phase becomes a session block without a stack.
__attribute__((noinline, cold)) static void recordPreexisting(uint64_t address, size_t size, bool object) {
  uint64_t key = address >> 4;
  uint64_t h = hashAddress(key);
  Stripe *s = stripeFor(h);
  CPerfSupport_spinLock(&s->lock);
  if (UNLIKELY(!atomic_load_explicit(&g_recording, memory_order_relaxed))) {
    CPerfSupport_spinUnlock(&s->lock);
    return;
  }
  bool before = atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed) ||
                atomic_load_explicit(&g_paused, memory_order_relaxed);
  if (UNLIKELY((address & 15) || key > ADDR_MASK || !stripeReserve(s))) {
    if (!before) s->lostBlocks++;
    CPerfSupport_spinUnlock(&s->lock);
    return;
  }
  uint64_t generation = before ? 0 : atomic_load_explicit(&g_generation, memory_order_relaxed);
  if (generation > 0xFFFF) generation = 0xFFFF;
  uint64_t size40 = size > SIZE_MASK ? SIZE_MASK : size;
  uint64_t micros = before ? 0 : atomic_load_explicit(&g_nowMicros, memory_order_relaxed);
  Slot slot = {
      .w0 = key | (generation << ADDR_BITS),
      .w1 = size40 | (((uint64_t)currentTid() & TID_MASK) << 40) | (object ? OBJECT_BIT : 0) |
            (before ? PREEXISTING_BIT : 0),
      .w2 = micros << 32,
  };
  uint64_t capacity = s->capacity;
  uint64_t i = slotIndex(h, capacity);
  for (;;) {
    uint64_t k = s->slots[i].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) break;
    if (k == key) {
      // Never seen freed: forget the old one.
      uint64_t oldSize = s->slots[i].w1 & SIZE_MASK;
      if (s->slots[i].w1 & PREEXISTING_BIT) {
        s->preLive--;
        s->preLiveBytes -= oldSize;
      } else {
        s->live--;
        __atomic_store_n(&s->liveBytes, s->liveBytes - oldSize, __ATOMIC_RELAXED);
      }
      s->used--;
      break;
    }
    i = (i + 1 == capacity) ? 0 : i + 1;
  }
  s->used++;
  s->slots[i] = slot;
  if (before) {
    s->preLive++;
    s->preLiveBytes += size;
  } else {
    s->live++;
    __atomic_store_n(&s->liveBytes, s->liveBytes + size, __ATOMIC_RELAXED);
    s->allocations++;
    s->allocatedBytes += size;
  }
  CPerfSupport_spinUnlock(&s->lock);
}

// Into the stripes: for blocks that cannot go to a nursery, or while nurseries are off.
__attribute__((noinline)) static void recordAllocInStripes(uint64_t h, Slot slot, size_t size, bool fits,
                                                           const uint64_t *frames, uint32_t depth, uint64_t stackHash,
                                                           uintptr_t *frame, uintptr_t (*reads)[2], uint32_t readCount,
                                                           bool clockRead) {
  Stripe *s = stripeFor(h);
  CPerfSupport_spinLock(&s->lock);
  if (UNLIKELY(!atomic_load_explicit(&g_recording, memory_order_relaxed))) {
    CPerfSupport_spinUnlock(&s->lock);
    return;
  }
  if (UNLIKELY(!fits)) {
    s->lostBlocks++;
    CPerfSupport_spinUnlock(&s->lock);
    return;
  }
  if (depth) {
    uint32_t stackId = stackIntern(frames, depth, stackHash);
    stackCacheStore(frame, stackId, reads, readCount);
    slot.w2 |= stackId;
  }
  if (stripePlace(s, h, &slot)) {
    s->allocations++;
    s->allocatedBytes += size;
    countByStack(&g_stripeByStack[s - g_stripes], (uint64_t)(s - g_stripes), slot.w2, size);
  }
  if (UNLIKELY(clockRead)) timelineMaybeSample(slot.w2 >> 32);
  CPerfSupport_spinUnlock(&s->lock);
}

// With full stacks, or while blocks from before the session are listed.
__attribute__((noinline)) ALLOC_HIDDEN void recordAllocWithStack(void *pointer, size_t size, uintptr_t *frame,
                                                                 bool object) {
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  if (UNLIKELY(atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed))) {
    recordPreexisting(address, size, object);
    return;
  }
  uint64_t frames[CPerfAlloc_MaxDepth];
  uintptr_t reads[STACK_CACHE_FRAMES][2];
  uint32_t depth = 0, readCount = 0, stackId = 0;
  uint64_t stackHash = 0;
  bool cached = false;
  if (g_mode == CPerfAlloc_ModeFullStacks) {
    stackId = stackCacheLookUp(frame, &cached);
    if (!cached) depth = captureStack(frame, frames, g_maxDepth, reads, &readCount, &stackHash);
  }
  bool clockRead = false;
  uint64_t key = address >> 4;
  uint64_t h = hashAddress(key);
  Slot slot = newSlot(key, size, object, &clockRead);
  slot.w2 |= stackId;
  bool fits = !(address & 15) && key <= ADDR_MASK;
  if (LIKELY(fits && atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed))) {
    Nursery *n = nurseryForThread();
    if (n && nurseryEnter(n)) {
      if (depth) {
        stackId = stackIntern(frames, depth, stackHash);
        stackCacheStore(frame, stackId, reads, readCount);
        slot.w2 |= stackId;
      }
      countByStack(&n->byStack, STRIPES + n->index, slot.w2, size);
      nurseryInsert(n, h, &slot, size);
      if (UNLIKELY(clockRead)) timelineMaybeSample(slot.w2 >> 32);
      nurseryLeave(n);
      return;
    }
  }
  recordAllocInStripes(h, slot, size, fits, frames, depth, stackHash, frame, reads, readCount, clockRead);
}

// recordAllocCounts' way to the stripes, with the slot in registers (a slot passed by value
// would be spilled to the stack on the common path too).
__attribute__((noinline)) ALLOC_HIDDEN void recordCountsInStripes(uint64_t h, uint64_t w0, uint64_t w1, uint64_t w2,
                                                                  size_t size, uint32_t flags) {
  recordAllocInStripes(h, (Slot){w0, w1, w2}, size, flags & 1, NULL, 0, 0, NULL, NULL, 0, flags & 2);
}

// Set-up work the scenario does not want measured: a leak scan still needs to know the
// block (it may hold the only reference to a session block), as one from before the
// session. Out of line, so the hooks' frames stay as they were: a leak scan reads stale
// words where they fall.
__attribute__((noinline, cold)) ALLOC_HIDDEN void recordPaused(void *pointer, size_t size, uintptr_t *frame) {
  if (g_tracksPreexisting && !t_ignoringAllocations) {
    recordPreexisting((uint64_t)(uintptr_t)pointer, size, isObjectAllocation(frame));
  }
}

// Removes `pointer` from its stripe's table; fills *out. Returns TAKE_TRACKED for a block
// of the session, TAKE_PREEXISTING for one allocated before it (never counted or
// aggregated). With `aggregate`, also counts the free under its category in the same
// critical section.
static int takeFromStripes(void *pointer, uint64_t key, uint64_t h, Slot *out, bool aggregate) {
  Stripe *s = stripeFor(h);
  CPerfSupport_spinLock(&s->lock);
  if (UNLIKELY(!atomic_load_explicit(&g_recording, memory_order_relaxed) || !s->slots)) {
    CPerfSupport_spinUnlock(&s->lock);
    return TAKE_UNTRACKED;
  }
  uint64_t capacity = s->capacity;
  uint64_t i = slotIndex(h, capacity);
  for (;;) {
    uint64_t k = s->slots[i].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) {
      // Allocated before recording started (or untracked): ignore.
      CPerfSupport_spinUnlock(&s->lock);
      return TAKE_UNTRACKED;
    }
    if (k == key) break;
    i = (i + 1 == capacity) ? 0 : i + 1;
  }
  Slot slot = s->slots[i];
  *out = slot;
  stripeErase(s, i);
  uint64_t size = slot.w1 & SIZE_MASK;
  if (slot.w1 & PREEXISTING_BIT) {
    s->preLive--;
    s->preLiveBytes -= size;
    CPerfSupport_spinUnlock(&s->lock);
    return TAKE_PREEXISTING;
  }
  s->live--;
  __atomic_store_n(&s->liveBytes, s->liveBytes - size, __ATOMIC_RELAXED);
  if (aggregate) {
    // categoryKey's cases, with the untyped one needing no lookup. The block is still
    // allocated: a Swift object's first word is its metadata.
    s->frees++;
    uint64_t metadata = (slot.w1 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
    if (metadata != 0 && !(metadata & 7))
      freedAdd(&s->freed, (uint64_t)(s - g_stripes), metadata, size);
    else
      freedAddUntyped(&s->freed, size);
  }
  CPerfSupport_spinUnlock(&s->lock);
  return TAKE_TRACKED;
}

// While nurseries are on, after the thread's own (own: NULL for an overflow thread): the
// stripes, then the other nurseries.
__attribute__((noinline)) ALLOC_HIDDEN int takeFromOthers(Nursery *own, Nursery *counter, void *pointer, uint64_t key,
                                                          uint64_t h, Slot *out, bool aggregate) {
  uint32_t index = nurseryIndex(h);
  int taken = takeFromStripes(pointer, key, h, out, aggregate);
  if (taken != TAKE_UNTRACKED) return taken;
  uint32_t count = atomic_load_explicit(&g_nurseryCount, memory_order_acquire);
  for (uint32_t i = 0; i < count; i++) {
    Nursery *n = g_nurseries[i];
    if (n == own) continue;
    Slot *e = &n->slots[index];
    uint64_t w0 = __atomic_load_n(&e->w0, __ATOMIC_ACQUIRE);
    if ((w0 & ADDR_MASK) != key) continue;
    Slot slot = {w0, __atomic_load_n(&e->w1, __ATOMIC_RELAXED), __atomic_load_n(&e->w2, __ATOMIC_RELAXED)};
    if (__atomic_compare_exchange_n(&e->w0, &w0, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      *out = slot;
      countNurseryTake(counter, slot.w1, pointer, aggregate);
      return TAKE_TRACKED;
    }
    // Its owner moved it to the stripes meanwhile.
    taken = takeFromStripes(pointer, key, h, out, aggregate);
    if (taken != TAKE_UNTRACKED) return taken;
  }
  return TAKE_UNTRACKED;
}

// Nurseries off, or a drain under way: the stripes.
__attribute__((noinline)) ALLOC_HIDDEN int takeFromStripesAfterDrain(void *pointer, uint64_t key, uint64_t h, Slot *out,
                                                                     bool aggregate) {
  uint64_t seq = atomic_load_explicit(&g_drainSeq, memory_order_acquire);
  int taken = takeFromStripes(pointer, key, h, out, aggregate);
  if (UNLIKELY(taken == TAKE_UNTRACKED &&
               ((seq & 1) || atomic_load_explicit(&g_drainSeq, memory_order_acquire) != seq))) {
    // A drain was moving nursery blocks to the stripes: look again once it is done.
    while (atomic_load_explicit(&g_drainSeq, memory_order_acquire) & 1) sched_yield();
    taken = takeFromStripes(pointer, key, h, out, aggregate);
  }
  return taken;
}

__attribute__((noinline)) ALLOC_HIDDEN int takeAsOverflowThread(void *pointer, uint64_t key, uint64_t h, Slot *out,
                                                                bool aggregate) {
  CPerfSupport_spinLock(&g_overflowLock);
  if (atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed)) {
    int taken = takeFromOthers(NULL, &g_overflow, pointer, key, h, out, aggregate);
    CPerfSupport_spinUnlock(&g_overflowLock);
    return taken;
  }
  CPerfSupport_spinUnlock(&g_overflowLock);
  return takeFromStripesAfterDrain(pointer, key, h, out, aggregate);
}
