// The malloc family's interposers, each a flag check in front of the next allocator's entry
// point (next_allocator.h: glibc's, or the jemalloc or tcmalloc the program brings),
// and the fork handlers: the code every allocation of the process runs through.
#include "leak_support.h"
#include "next_allocator.h"
#include "thread_table.h"
#include "record.h"
#include "stack_walk.h"
#include "swift_objects.h"
#include "timeline.h"

#if CPERFALLOC_INTERPOSES
// MARK: - The hooks
//
// Each public function checks one relaxed flag and forwards; while recording it
// tail-calls (musttail) a recording variant with the same signature, so that variant's
// frame sits directly on the caller's and its return address is the allocation site.

#define RECORDING()  UNLIKELY(atomic_load_explicit(&g_recording, memory_order_relaxed))
#define HOOK_FRAME() ((uintptr_t *)__builtin_frame_address(0))

__attribute__((noinline)) static void *recordCountsSlow(void *p, size_t size, uintptr_t ret, uintptr_t callerFrame,
                                                        uintptr_t frame) {
  t_inHook = 1;
  if (p && !t_ignoringAllocations) recordAllocCountsAt(p, size, isObjectAt(ret, callerFrame, frame));
  t_inHook = 0;
  return p;
}

// The fast paths' way in: the empty slot of block p in its region's leaf, with the thread's
// table entered (*table); NULL, with nothing entered, for anything they leave to their slow
// paths (no table yet, a new leaf, a slot never freed, ignored allocations, the clock's
// turn, a big block).
static inline __attribute__((always_inline)) Slot *fastSlot(void *p, size_t size, ThreadTable **table) {
  ThreadTable *t = t_table;
  uint64_t address = (uint64_t)(uintptr_t)p;
  if (UNLIKELY(!p || !t || (address & ~BLOCK_ADDRESS) || t_ignoringAllocations || t_clockCountdown == 0 ||
               size >= SIZE_MASK || !tableEnter(t))) {
    return NULL;
  }
  Slot *leaf = leafFor(address);
  Slot *e = leaf ? slotIn(leaf, address) : NULL;
  if (UNLIKELY(!e || (e->w0 & LIVE_BIT))) {
    tableLeave(t);
    return NULL;
  }
  *table = t;
  return e;
}

// The fast paths' insert into the slot fastSlot found (the table stays entered).
static inline __attribute__((always_inline)) void fastInsert(ThreadTable *t, Slot *e, uint64_t bits, size_t size) {
  t_clockCountdown--;
  e->w0 = bits | size;
  BUMP(t->allocations, 1);
  BUMP(t->allocatedBytes, size);
}

// malloc's recording in a types-and-counts session, after the allocator's malloc (frame: the
// hook's, as its three words). A block fastSlot takes goes in without a call, so this needs
// no stack frame of its own; everything else goes to recordCountsSlow before anything has
// changed.
__attribute__((noinline)) static void *recordCounts(void *p, size_t size, uintptr_t ret, uintptr_t callerFrame,
                                                    uintptr_t frame) {
  // The clock's turn and a big block take the slow path too: whatever calls out would cost
  // this function its frameless path.
  ThreadTable *t;
  Slot *e = fastSlot(p, size, &t);
  if (UNLIKELY(!e)) __attribute__((musttail)) return recordCountsSlow(p, size, ret, callerFrame, frame);
  fastInsert(t, e, sessionBits((uint64_t)(uintptr_t)p, isObjectAt(ret, callerFrame, frame)), size);
  tableLeave(t);
  return p;
}

// mallocStacked's way out: recordAllocWithStack, as mallocRecordingAll takes it.
__attribute__((noinline)) static void recordStackedSlow(void *p, size_t size, uintptr_t *frame, bool cacheMissed) {
  t_inHook = 1;
  if (p && !t_ignoringAllocations) recordAllocWithStack(p, size, frame, isObjectAllocation(frame), cacheMissed);
  t_inHook = 0;
}

// malloc in a full-stacks session: recordCounts' path, for a block whose stack the thread's
// stack cache holds (the walk from this function's frame, which sits on the caller's as
// mallocRecordingAll's does, would read the words the cache kept). A miss, and whatever
// fastSlot leaves, goes to recordAllocWithStack before anything has changed. No tail calls:
// the walk reads this frame.
__attribute__((noinline, disable_tail_calls)) static void *mallocStacked(size_t size) {
  uintptr_t *frame = HOOK_FRAME();
  void *p = NEXT(malloc)(size);
  ThreadTable *t;
  Slot *e = fastSlot(p, size, &t);
  if (UNLIKELY(!e)) {
    recordStackedSlow(p, size, frame, false);
    return p;
  }
  bool found;
  uint32_t stackId = stackCacheLookUp(frame, &found);
  if (UNLIKELY(!found)) {
    tableLeave(t);
    recordStackedSlow(p, size, frame, true);
    return p;
  }
  uint64_t bits = sessionBits((uint64_t)(uintptr_t)p, isObjectAllocation(frame)) | ((uint64_t)stackId << STACK_SHIFT);
  fastInsert(t, e, bits, size);
  countByStack(t, stackId, size);
  tableLeave(t);
  return p;
}

// Sessions without a fast path (and reentry).
__attribute__((noinline)) static void *mallocRecordingAll(size_t size) {
  if (t_inHook) return NEXT(malloc)(size);
  t_inHook = 1;
  void *p = NEXT(malloc)(size);
  AVOID_RESERVED(p, size, NEXT(malloc)(size));
  if (p) {
    zeroIfTrackingAll(p, 0, size);
    recordAlloc(p, size, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

__attribute__((noinline)) static void *mallocRecording(size_t size) {
  int32_t fast = atomic_load_explicit(&g_fastPath, memory_order_relaxed);
  if (UNLIKELY(t_inHook || fast == FAST_NONE)) {
    __attribute__((musttail)) return mallocRecordingAll(size);
  }
  if (fast == FAST_STACKS) __attribute__((musttail)) return mallocStacked(size);
  // No reentry guard around the allocator's malloc, which calls no malloc.
  uintptr_t *frame = HOOK_FRAME();
  void *p = NEXT(malloc)(size);
  return recordCounts(p, size, frame[1], frame[0], (uintptr_t)frame);
}

void *malloc(size_t size) {
  if (RECORDING()) __attribute__((musttail)) return mallocRecording(size);
  return NEXT(malloc)(size);
}

__attribute__((noinline)) static void freeRecordingSlow(void *pointer) {
  if (WATCHING()) noteFree(pointer);
  if (t_inHook) {
    NEXT(free)(pointer);
    return;
  }
  t_inHook = 1;
  recordFree(pointer);
  t_inHook = 0;
  // A tail call; the allocator's free allocates nothing, and a malloc it made would be recorded
  // like any other.
  NEXT(free)(pointer);
}

// The common free: a session block in the shadow table, of a category its thread's freed
// table has met. It checks all of that before it changes anything, so on any miss the slow
// path takes the whole free; it calls nothing else, which spares it a stack frame and the
// reentry guard.
__attribute__((noinline)) static void freeRecording(void *pointer) {
  ThreadTable *t = t_table;
  uint64_t address = (uint64_t)(uintptr_t)pointer;
  if (UNLIKELY(WATCHING() || t_inHook || !t || (address & ~BLOCK_ADDRESS) || !tableEnter(t))) {
    __attribute__((musttail)) return freeRecordingSlow(pointer);
  }
  Slot *leaf = leafFor(address);
  Slot *e = leaf ? slotIn(leaf, address) : NULL;
  uint64_t w0 = e ? e->w0 : 0;
  FreedSlot *table = t->freed.slots;
  if (UNLIKELY((w0 & (LIVE_BIT | HALF_BIT | PREEXISTING_BIT | BIG_BIT)) != (LIVE_BIT | halfBit(address)) || !table)) {
    tableLeave(t);
    __attribute__((musttail)) return freeRecordingSlow(pointer);
  }
  uint64_t size = w0 & SIZE_MASK;
  uint64_t metadata = (w0 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
  FreedSlot *f;
  if (metadata != 0 && !(metadata & 7)) {
    f = &table[freedHome(t->index, metadata)];
    if (UNLIKELY(f->key != metadata)) f = NULL;
  } else {
    f = &table[FREED_SLOTS + sizeClassOf(size)];
  }
  if (UNLIKELY(!f || f->count == 0)) {
    tableLeave(t);
    __attribute__((musttail)) return freeRecordingSlow(pointer);
  }
  e->w0 = 0;
  BUMP(t->removed, 1);
  BUMP(t->removedBytes, size);
  BUMP(t->frees, 1);
  f->count++;
  f->bytes += size;
  tableLeave(t);
  __attribute__((musttail)) return NEXT(free)(pointer);
}

void free(void *pointer) {
  if (RECORDING() && pointer) {
    __attribute__((musttail)) return freeRecording(pointer);
  }
  if (WATCHING() && pointer) noteFree(pointer);
  NEXT(free)(pointer);
}

__attribute__((noinline)) static void *callocRecording(size_t count, size_t size) {
  if (t_inHook) return NEXT(calloc)(count, size);
  t_inHook = 1;
  void *p = NEXT(calloc)(count, size);
  AVOID_RESERVED(p, count * size, NEXT(calloc)(count, size));
  if (p) recordAlloc(p, count * size, HOOK_FRAME());  // no overflow: calloc succeeded
  t_inHook = 0;
  return p;
}

void *calloc(size_t count, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return callocRecording(count, size);
  return NEXT(calloc)(count, size);
}

__attribute__((noinline)) static void *reallocRecording(void *pointer, size_t size) {
  if (WATCHING() && pointer) noteFree(pointer);
  if (t_inHook) return NEXT(realloc)(pointer, size);
  t_inHook = 1;
  // Take the old block out before the allocator can hand its address to another thread.
  Taken old;
  int taken = pointer ? takeBlock(pointer, &old, false) : TAKE_UNTRACKED;
  bool tracked = taken == TAKE_TRACKED;
  uint64_t oldKey = tracked ? categoryKey(pointer, &old) : 0;
  // What the block held before: the rest is uninitialized, i.e. stale words of freed
  // blocks, which a leak scan would read as pointers to whatever now lives at those
  // addresses (realloc(NULL, n) included: it is a malloc). The block's usable size, not
  // its request: a program may use every usable byte (Swift sizes its buffers' capacity
  // with malloc_usable_size) and realloc keeps them all.
  size_t oldSize = pointer && g_zeroNewBlocks ? NEXT(usableSize)(pointer) : 0;
  void *p = NEXT(realloc)(pointer, size);
  if (!p && size != 0 && pointer) {
    if (taken != TAKE_UNTRACKED) putBack(pointer, &old);  // failed: the old block is untouched
  } else {
    if (tracked) aggregateFree(&old, oldKey);
    if (UNLIKELY(coversReserved(p, size))) {
      // Moved elsewhere by hand; the block the allocator chose is held aside.
      void *q = NEXT(malloc)(size);
      AVOID_RESERVED(q, size, NEXT(malloc)(size));
      if (q) {
        memcpy(q, p, size);
        if (holdAside(p, size))
          p = q;
        else
          NEXT(free)(q);
      }
    }
    if (p) {
      if (size > oldSize) zeroIfTrackingAll(p, oldSize, size);
      recordAlloc(p, size, HOOK_FRAME());
    }
  }
  t_inHook = 0;
  return p;
}

void *realloc(void *pointer, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return reallocRecording(pointer, size);
  // Logged moved or not: a block resized in place is not the listed block either.
  if (WATCHING() && pointer) noteFree(pointer);
  return NEXT(realloc)(pointer, size);
}

void *reallocarray(void *pointer, size_t count, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(pointer, bytes);
}

__attribute__((noinline)) static void *memalignRecording(size_t alignment, size_t size) {
  if (t_inHook) return NEXT(memalign)(alignment, size);
  t_inHook = 1;
  void *p = NEXT(memalign)(alignment, size);
  AVOID_RESERVED(p, size, NEXT(memalign)(alignment, size));
  if (p) {
    zeroIfTrackingAll(p, 0, size);
    recordAlloc(p, size, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

void *memalign(size_t alignment, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return memalignRecording(alignment, size);
  return NEXT(memalign)(alignment, size);
}

static bool isPowerOfTwo(size_t x) { return x && !(x & (x - 1)); }

__attribute__((noinline)) static int posixMemalignRecording(void **out, size_t alignment, size_t size) {
  if (!isPowerOfTwo(alignment) || alignment % sizeof(void *)) return EINVAL;
  int savedErrno = errno;
  void *p;
  if (t_inHook) {
    p = NEXT(memalign)(alignment, size);
  } else {
    t_inHook = 1;
    p = NEXT(memalign)(alignment, size);
    AVOID_RESERVED(p, size, NEXT(memalign)(alignment, size));
    if (p) {
      zeroIfTrackingAll(p, 0, size);
      recordAlloc(p, size, HOOK_FRAME());
    }
    t_inHook = 0;
  }
  errno = savedErrno;  // posix_memalign reports through its result, never errno
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

int posix_memalign(void **out, size_t alignment, size_t size) {
  if (RECORDING()) __attribute__((musttail)) return posixMemalignRecording(out, alignment, size);
  if (!isPowerOfTwo(alignment) || alignment % sizeof(void *)) return EINVAL;
  int savedErrno = errno;
  void *p = NEXT(memalign)(alignment, size);
  errno = savedErrno;
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
  if (!isPowerOfTwo(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  if (RECORDING()) __attribute__((musttail)) return memalignRecording(alignment, size);
  return NEXT(memalign)(alignment, size);
}

static size_t pageSize(void) {
  static _Atomic size_t cached;
  size_t page = atomic_load_explicit(&cached, memory_order_relaxed);
  if (!page) {
    page = (size_t)sysconf(_SC_PAGESIZE);
    atomic_store_explicit(&cached, page, memory_order_relaxed);
  }
  return page;
}

__attribute__((noinline)) static void *vallocRecording(size_t size) {
  if (t_inHook) return NEXT(memalign)(pageSize(), size);
  t_inHook = 1;
  void *p = NEXT(memalign)(pageSize(), size);
  AVOID_RESERVED(p, size, NEXT(memalign)(pageSize(), size));
  if (p) {
    zeroIfTrackingAll(p, 0, size);
    recordAlloc(p, size, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

void *valloc(size_t size) {
  if (RECORDING()) __attribute__((musttail)) return vallocRecording(size);
  return NEXT(memalign)(pageSize(), size);
}

// Whole pages; 0 becomes one page. NULL with ENOMEM when rounding overflows.
static size_t pageRoundedOrZero(size_t size) {
  size_t page = pageSize();
  size_t rounded;
  if (__builtin_add_overflow(size, page - 1, &rounded)) return 0;
  rounded &= ~(page - 1);
  return rounded ? rounded : page;
}

__attribute__((noinline)) static void *pvallocRecording(size_t size) {
  size_t rounded = pageRoundedOrZero(size);
  if (!rounded) {
    errno = ENOMEM;
    return NULL;
  }
  if (t_inHook) return NEXT(memalign)(pageSize(), rounded);
  t_inHook = 1;
  void *p = NEXT(memalign)(pageSize(), rounded);
  AVOID_RESERVED(p, rounded, NEXT(memalign)(pageSize(), rounded));
  if (p) {
    zeroIfTrackingAll(p, 0, rounded);
    recordAlloc(p, rounded, HOOK_FRAME());
  }
  t_inHook = 0;
  return p;
}

void *pvalloc(size_t size) {
  if (RECORDING()) __attribute__((musttail)) return pvallocRecording(size);
  size_t rounded = pageRoundedOrZero(size);
  if (!rounded) {
    errno = ENOMEM;
    return NULL;
  }
  return NEXT(memalign)(pageSize(), rounded);
}

size_t malloc_usable_size(void *pointer) { return NEXT(usableSize)(pointer); }

#endif  // CPERFALLOC_INTERPOSES

// MARK: - Fork

// The child must never see a table mid-update: the forking thread holds the tables across
// fork(). The child keeps the recorded data but records nothing more.
static bool g_openBeforeFork;

ALLOC_HIDDEN void forkPrepare(void) {
  if (atomic_load_explicit(&g_state, memory_order_acquire) == STATE_IDLE) return;
  CPerfSupport_spinLock(&g_markLock);
  g_openBeforeFork = atomic_load(&g_open);
  tablesHold();
}

ALLOC_HIDDEN void forkParent(void) {
  if (atomic_load_explicit(&g_state, memory_order_acquire) == STATE_IDLE) return;
  tablesRelease(g_openBeforeFork);
  CPerfSupport_spinUnlock(&g_markLock);
}

ALLOC_HIDDEN void forkChild(void) {
  t_tid = 0;
  if (atomic_load_explicit(&g_state, memory_order_acquire) == STATE_IDLE) return;
  atomic_store_explicit(&g_recording, 0, memory_order_relaxed);
  tablesRelease(false);
  CPerfSupport_spinUnlock(&g_markLock);
}
