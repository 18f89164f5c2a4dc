// Nurseries: each thread's direct-mapped table of its newest blocks, which spares most
// mallocs and frees a stripe lock. Hot operations static inline here; nursery.c has the rest.
#ifndef CPERFALLOC_NURSERY_H
#define CPERFALLOC_NURSERY_H

#include "block_table.h"

// MARK: - Nurseries
//
// Most blocks die young, on the thread that made them. A stripe costs each malloc and
// free an atomic exchange on its lock and a probe of a table larger than the caches; a
// nursery is one thread's small direct-mapped table of its newest blocks, which its
// owner reads and writes with plain loads and stores. A block leaves it when freed,
// when a newer block needs its slot (it moves to the stripes), or when a drain moves
// every nursery's blocks to the stripes (marks, live listings, stop).
// Another thread frees a block in a nursery with a compare-and-swap on its key word. The
// owner evicts by putting the block into the stripes first and then taking it out of
// its slot with a compare-and-swap, so a concurrent free finds it in one place or the
// other (and if the free won, the owner takes its stripe copy back out).
// A drain stops all use of nurseries: it clears g_nurseriesOn, and membarrier makes that
// store and every thread's busy flag ordered (so the owner's side needs no fence); then
// it waits until no thread is inside a nursery operation. Frees that missed the stripes
// while a drain was moving blocks look again after it (g_drainSeq).

#define NURSERY_BITS  10
#define NURSERY_SLOTS (1u << NURSERY_BITS)
#define MAX_NURSERIES 256

typedef struct Nursery {
  _Atomic int32_t owner;  // tid; 0: free for another thread
  _Atomic int32_t busy;   // its thread is inside a nursery operation
  uint32_t index;         // numbers its freed table after the stripes'
  uint32_t unused;
  // Written by the thread (or by a drain, when no thread uses nurseries), summed by
  // others. Live blocks of all nurseries = allocations - frees - movedOut, summed.
  uint64_t allocations, allocatedBytes, frees, freedBytes, movedOut, movedOutBytes;
  FreedTable freed;
  FreedTable byStack;  // full stacks: its thread's allocations by stack (key stackId << 1)
  Slot slots[NURSERY_SLOTS];
} Nursery;

extern ALLOC_HIDDEN Nursery *g_nurseries[MAX_NURSERIES];
extern ALLOC_HIDDEN _Atomic uint32_t g_nurseryCount;
// Frees by threads that got no nursery (all MAX_NURSERIES taken) are counted here,
// under g_overflowLock; its slots stay empty.
extern ALLOC_HIDDEN Nursery g_overflow;  // index MAX_NURSERIES, set at start
extern ALLOC_HIDDEN CPerfSupport_SpinLock g_overflowLock;
extern ALLOC_HIDDEN _Atomic int32_t g_nurseriesOn;
// Types and counts with nurseries and no reserved addresses: malloc's hook skips the checks
// other sessions need (reserved addresses, zeroing, blocks from before the session, stacks).
extern ALLOC_HIDDEN _Atomic int32_t g_countsFast;
extern ALLOC_HIDDEN _Atomic uint64_t g_drainSeq;  // odd while a drain moves blocks
extern ALLOC_HIDDEN bool g_nurseriesUsable;       // this session uses them (membarrier is available)
extern ALLOC_HIDDEN TLS Nursery *t_nursery;

#define BUMP(field, by) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (by), __ATOMIC_RELAXED)

// The chunk's hashed base plus the position: a chunk's blocks never evict each other.
static inline uint32_t nurseryIndex(uint64_t h) {
  return (uint32_t)((h >> 20) + (h & POSITION_MASK)) & (NURSERY_SLOTS - 1);
}

__attribute__((noinline, cold)) ALLOC_HIDDEN Nursery *claimNursery(void);

static inline Nursery *nurseryForThread(void) {
  Nursery *n = t_nursery;
  return LIKELY(n != NULL) ? n : claimNursery();
}

// The thread's side of the drain's handshake: busy, then the flag, with only the
// compiler kept from reordering them (the drain's membarrier orders the CPUs).
static inline bool nurseryEnter(Nursery *n) {
  atomic_store_explicit(&n->busy, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst);
  if (LIKELY(atomic_load_explicit(&g_nurseriesOn, memory_order_relaxed))) return true;
  atomic_store_explicit(&n->busy, 0, memory_order_release);
  return false;
}

static inline void nurseryLeave(Nursery *n) { atomic_store_explicit(&n->busy, 0, memory_order_release); }

// In nursery.c: moves the block in slot e (key word `old`) to the stripes.
__attribute__((noinline)) ALLOC_HIDDEN void nurseryEvict(Nursery *n, Slot *e, uint64_t old, uint64_t newKey);

// Fills the empty slot e.
static inline void nurseryFill(Nursery *n, Slot *e, const Slot *slot, uint64_t size) {
  __atomic_store_n(&e->w1, slot->w1, __ATOMIC_RELAXED);
  __atomic_store_n(&e->w2, slot->w2, __ATOMIC_RELAXED);
  __atomic_store_n(&e->w0, slot->w0, __ATOMIC_RELEASE);  // last: others read it first
  BUMP(n->allocations, 1);
  BUMP(n->allocatedBytes, size);
}

static inline void nurseryInsert(Nursery *n, uint64_t h, const Slot *slot, uint64_t size) {
  Slot *e = &n->slots[nurseryIndex(h)];
  uint64_t old = __atomic_load_n(&e->w0, __ATOMIC_RELAXED);
  if (UNLIKELY(old & ADDR_MASK)) nurseryEvict(n, e, old, slot->w0 & ADDR_MASK);
  nurseryFill(n, e, slot, size);
}

// A block taken out of a nursery slot, counted on `counter` (the taking thread's): as a
// free by category, or (for realloc) as moved out, its free counted by the caller.
static inline __attribute__((always_inline)) void countNurseryTake(Nursery *counter, uint64_t w1, void *pointer,
                                                                   bool aggregate) {
  uint64_t size = w1 & SIZE_MASK;
  if (!aggregate) {
    BUMP(counter->movedOut, 1);
    BUMP(counter->movedOutBytes, size);
    return;
  }
  BUMP(counter->frees, 1);
  BUMP(counter->freedBytes, size);
  uint64_t metadata = (w1 & OBJECT_BIT) ? *(uint64_t *)pointer : 0;
  if (metadata != 0 && !(metadata & 7))
    freedAdd(&counter->freed, STRIPES + counter->index, metadata, size);
  else
    freedAddUntyped(&counter->freed, size);
}

// In nursery.c: never from a hook.
ALLOC_HIDDEN void drainNurseries(void);
ALLOC_HIDDEN bool registerMembarrier(void);
ALLOC_HIDDEN void resetNursery(Nursery *n);

static inline void reopenNurseries(void) {
  if (g_nurseriesUsable) atomic_store(&g_nurseriesOn, 1);
}

// The nurseries' live blocks and bytes (racy while they are in use: for the timeline).
static inline void nurseriesLive(int64_t *blocks, int64_t *bytes) {
  int64_t b = 0, n = 0;
  uint32_t count = atomic_load_explicit(&g_nurseryCount, memory_order_acquire);
  for (uint32_t i = 0; i <= count; i++) {
    Nursery *x = i < count ? g_nurseries[i] : &g_overflow;
    n += (int64_t)(__atomic_load_n(&x->allocations, __ATOMIC_RELAXED) - __atomic_load_n(&x->frees, __ATOMIC_RELAXED) -
                   __atomic_load_n(&x->movedOut, __ATOMIC_RELAXED));
    b += (int64_t)(__atomic_load_n(&x->allocatedBytes, __ATOMIC_RELAXED) -
                   __atomic_load_n(&x->freedBytes, __ATOMIC_RELAXED) -
                   __atomic_load_n(&x->movedOutBytes, __ATOMIC_RELAXED));
  }
  if (blocks) *blocks = n;
  if (bytes) *bytes = b;
}

#endif
