// The recording paths' out-of-line half: blocks from before the session, a block's way into
// the shadow table with its stack, and the counts path's slow half.
#include "record.h"

#include "stack_table.h"
#include "stack_walk.h"

_Static_assert(STACK_SLOTS <= STACK_MASK, "a stack id fits its slot bits");

ALLOC_HIDDEN bool g_zeroNewBlocks;

// Before the session: the block's address, size, thread and object flag, nothing else.
// A block allocated while start() ends the phase becomes a session block without a stack.
__attribute__((noinline, cold)) static void recordPreexisting(uint64_t address, size_t size, bool object) {
  ThreadTable *t = tableAcquire();
  if (!t) return;
  bool before = atomic_load_explicit(&g_preexistingPhase, memory_order_relaxed) ||
                atomic_load_explicit(&g_paused, memory_order_relaxed);
  uint64_t bits = sessionBits(address, object);
  if (before) bits = (bits & ~(0xFFFFull << GENERATION_SHIFT)) | PREEXISTING_BIT;
  // A block shadowInsert cannot take is lost to the session's counts, not to the preexisting.
  if (!before || !(address & ~BLOCK_ADDRESS)) shadowInsert(t, address, size, bits);
  tableRelease(t);
}

// The timeline's turn, after the block is in (outside any busy section: it sums the tables).
static inline void sampleIfTicked(bool ticked, uint64_t micros) {
  if (UNLIKELY(ticked)) timelineMaybeSample(micros);
}

// With full stacks, or while blocks from before the session are listed.
__attribute__((noinline)) ALLOC_HIDDEN void recordAllocWithStack(void *pointer, size_t size, uintptr_t *frame,
                                                                 bool object, bool cacheMissed) {
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
    if (!cacheMissed) stackId = stackCacheLookUp(frame, &cached);
    if (!cached) depth = captureStack(frame, frames, g_maxDepth, reads, &readCount, &stackHash);
  }
  uint64_t micros = 0;
  bool ticked = tickClock(&micros);
  ThreadTable *t = tableAcquire();
  if (!t) return;
  // Interned inside the busy section, so a hold also finds the stack table quiescent.
  if (depth) {
    stackId = stackIntern(frames, depth, stackHash);
    stackCacheStore(frame, stackId, reads, readCount);
  }
  if (shadowInsert(t, address, size, sessionBits(address, object) | ((uint64_t)stackId << STACK_SHIFT)))
    countByStack(t, stackId, size);
  tableRelease(t);
  sampleIfTicked(ticked, micros);
}

// Types and counts, when malloc's frameless path could not take the block.
__attribute__((noinline)) ALLOC_HIDDEN void recordAllocCountsAt(void *pointer, size_t size, bool object) {
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  uint64_t micros = 0;
  bool ticked = tickClock(&micros);
  ThreadTable *t = tableAcquire();
  if (!t) return;
  shadowInsert(t, address, size, sessionBits(address, object));
  tableRelease(t);
  sampleIfTicked(ticked, micros);
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
