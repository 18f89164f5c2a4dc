// Nurseries' out-of-line paths: claiming one for a thread, evicting a block to the
// stripes, the drain that moves every nursery's blocks to the stripes, the session reset.
#include "nursery.h"

ALLOC_HIDDEN Nursery *g_nurseries[MAX_NURSERIES];
ALLOC_HIDDEN _Atomic uint32_t g_nurseryCount;
static CPerfSupport_SpinLock g_nurseryLock;  // adding a nursery
ALLOC_HIDDEN Nursery g_overflow;
ALLOC_HIDDEN CPerfSupport_SpinLock g_overflowLock;
ALLOC_HIDDEN _Atomic int32_t g_nurseriesOn;
ALLOC_HIDDEN _Atomic int32_t g_countsFast;
ALLOC_HIDDEN _Atomic uint64_t g_drainSeq;
ALLOC_HIDDEN bool g_nurseriesUsable;
ALLOC_HIDDEN TLS Nursery *t_nursery;
static TLS int32_t t_noNursery;  // none was left for this thread

__attribute__((noinline, cold)) ALLOC_HIDDEN Nursery *claimNursery(void) {
  if (t_noNursery) return NULL;
  int32_t tid = currentTid();
  uint32_t count = atomic_load_explicit(&g_nurseryCount, memory_order_acquire);
  for (uint32_t i = 0; i < count; i++) {
    int32_t none = 0;
    if (atomic_load_explicit(&g_nurseries[i]->owner, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong(&g_nurseries[i]->owner, &none, tid))
      return t_nursery = g_nurseries[i];
  }
  Nursery *n = NULL;
  CPerfSupport_spinLock(&g_nurseryLock);
  count = atomic_load_explicit(&g_nurseryCount, memory_order_relaxed);
  if (count < MAX_NURSERIES && (n = mapBytes(sizeof(Nursery)))) {
    atomic_store_explicit(&n->owner, tid, memory_order_relaxed);
    n->index = count;
    g_nurseries[count] = n;
    atomic_store_explicit(&g_nurseryCount, count + 1, memory_order_release);
  }
  CPerfSupport_spinUnlock(&g_nurseryLock);
  if (!n) t_noNursery = 1;
  return t_nursery = n;
}

void CPerfAlloc_threadEnding(void) {
  Nursery *n = t_nursery;
  // Destructors that run after this one may still allocate: not into a nursery it would
  // claim again and hold until a mark.
  t_noNursery = 1;
  if (!n) return;
  t_nursery = NULL;
  // Its blocks stay in the slots: the next owner evicts them to the stripes as it needs the
  // slots, and a free finds them there as it finds any block in another thread's nursery.
  atomic_store_explicit(&n->owner, 0, memory_order_release);
}

// Moves the block in slot e (key word `old`) to the stripes, to make room for newKey.
__attribute__((noinline)) ALLOC_HIDDEN void nurseryEvict(Nursery *n, Slot *e, uint64_t old, uint64_t newKey) {
  Slot moving = {old, __atomic_load_n(&e->w1, __ATOMIC_RELAXED), __atomic_load_n(&e->w2, __ATOMIC_RELAXED)};
  uint64_t size = moving.w1 & SIZE_MASK;
  uint64_t key = old & ADDR_MASK;
  if (key == newKey) {
    // Its address is handed out again, so it was freed where no hook saw it: forget it.
    if (__atomic_compare_exchange_n(&e->w0, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      BUMP(n->movedOut, 1);
      BUMP(n->movedOutBytes, size);
    }
    return;
  }
  uint64_t h = hashAddress(key);
  Stripe *s = stripeFor(h);
  CPerfSupport_spinLock(&s->lock);
  bool placed = stripePlace(s, h, &moving);
  CPerfSupport_spinUnlock(&s->lock);
  if (__atomic_compare_exchange_n(&e->w0, &old, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
    BUMP(n->movedOut, 1);
    BUMP(n->movedOutBytes, size);
  } else if (placed) {
    // Another thread freed it from the slot meanwhile (and counted the free).
    CPerfSupport_spinLock(&s->lock);
    stripeRemoveExact(s, h, &moving);
    CPerfSupport_spinUnlock(&s->lock);
  }
}

// Moves every nursery's blocks to the stripes and leaves nurseries off (reopenNurseries
// turns them on again). Never from a hook.
ALLOC_HIDDEN void drainNurseries(void) {
  if (!g_nurseriesUsable) return;
  int savedErrno = errno;
  atomic_fetch_add(&g_drainSeq, 1);
  atomic_store(&g_nurseriesOn, 0);
  // Cannot fail once registered (registerMembarrier), which made nurseries usable.
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  uint32_t count = atomic_load(&g_nurseryCount);
  for (uint32_t i = 0; i < count; i++) {
    while (atomic_load(&g_nurseries[i]->busy)) sched_yield();
  }
  CPerfSupport_spinLock(&g_overflowLock);
  pid_t pid = getpid();
  for (uint32_t i = 0; i < count; i++) {
    Nursery *n = g_nurseries[i];
    for (uint32_t j = 0; j < NURSERY_SLOTS; j++) {
      Slot moving = n->slots[j];
      uint64_t key = moving.w0 & ADDR_MASK;
      if (!key) continue;
      uint64_t h = hashAddress(key);
      Stripe *s = stripeFor(h);
      CPerfSupport_spinLock(&s->lock);
      stripePlace(s, h, &moving);
      CPerfSupport_spinUnlock(&s->lock);
      n->slots[j].w0 = 0;
      BUMP(n->movedOut, 1);
      BUMP(n->movedOutBytes, moving.w1 & SIZE_MASK);
    }
    // A thread that has exited leaves its nursery to the next new thread.
    int32_t owner = atomic_load(&n->owner);
    if (owner && syscall(SYS_tgkill, pid, owner, 0) != 0 && errno == ESRCH) atomic_store(&n->owner, 0);
  }
  CPerfSupport_spinUnlock(&g_overflowLock);
  atomic_fetch_add(&g_drainSeq, 1);
  errno = savedErrno;
}

// Nurseries need membarrier's private expedited command (Linux 4.14); registering for it
// is the one process-wide effect, once.
ALLOC_HIDDEN bool registerMembarrier(void) {
  static int registered;  // 0 unknown, 1 yes, -1 no
  if (!registered) registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
  return registered > 0;
}

ALLOC_HIDDEN void resetNursery(Nursery *n) {
  n->allocations = n->allocatedBytes = n->frees = n->freedBytes = n->movedOut = n->movedOutBytes = 0;
  if (n->freed.slots) munmap(n->freed.slots, FREED_TABLE_BYTES);
  n->freed = (FreedTable){0};
  if (n->byStack.slots) munmap(n->byStack.slots, FREED_TABLE_BYTES);
  n->byStack = (FreedTable){0};
}
