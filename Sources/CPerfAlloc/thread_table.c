// Thread tables' out-of-line paths: claiming one for a thread and handing it on at the
// thread's end, the hold, the session reset.
#include "thread_table.h"

ALLOC_HIDDEN ThreadTable g_tables[MAX_TABLES];
ALLOC_HIDDEN _Atomic uint32_t g_tableCount;
static CPerfSupport_SpinLock g_tableLock;  // adding a table
ALLOC_HIDDEN ThreadTable g_overflow = {.index = MAX_TABLES};
ALLOC_HIDDEN CPerfSupport_SpinLock g_overflowLock;
ALLOC_HIDDEN _Atomic int32_t g_open;
ALLOC_HIDDEN bool g_fenceHooks;
ALLOC_HIDDEN _Atomic int32_t g_fastPath;
ALLOC_HIDDEN TLS ThreadTable *t_table;
static TLS int32_t t_noTable;  // none was left for this thread, or it is ending

__attribute__((noinline, cold)) ALLOC_HIDDEN ThreadTable *claimTable(void) {
  if (t_noTable) return NULL;
  int32_t tid = currentTid();
  uint32_t count = atomic_load_explicit(&g_tableCount, memory_order_acquire);
  for (uint32_t i = 0; i < count; i++) {
    int32_t none = 0;
    if (atomic_load_explicit(&g_tables[i].owner, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong(&g_tables[i].owner, &none, tid))
      return t_table = &g_tables[i];
  }
  ThreadTable *t = NULL;
  CPerfSupport_spinLock(&g_tableLock);
  count = atomic_load_explicit(&g_tableCount, memory_order_relaxed);
  if (count < MAX_TABLES) {
    t = &g_tables[count];
    atomic_store_explicit(&t->owner, tid, memory_order_relaxed);
    t->index = count;
    atomic_store_explicit(&g_tableCount, count + 1, memory_order_release);
  }
  CPerfSupport_spinUnlock(&g_tableLock);
  if (!t) t_noTable = 1;
  return t_table = t;
}

void CPerfAlloc_threadEnding(void) {
  ThreadTable *t = t_table;
  // Destructors that run after this one may still allocate: into g_overflow, not into a
  // table this thread would claim again.
  t_noTable = 1;
  if (!t) return;
  t_table = NULL;
  // Its counts stay: they are sums, and the next owner adds to them.
  atomic_store_explicit(&t->owner, 0, memory_order_release);
}

__attribute__((noinline, cold)) ALLOC_HIDDEN bool waitForOpen(void) {
  while (!atomic_load_explicit(&g_open, memory_order_acquire)) {
    if (!atomic_load_explicit(&g_recording, memory_order_acquire)) return false;
    sched_yield();
  }
  return atomic_load_explicit(&g_recording, memory_order_acquire) != 0;
}

ALLOC_HIDDEN void tablesHold(void) {
  int savedErrno = errno;
  atomic_store(&g_open, 0);
  if (!g_fenceHooks) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  uint32_t count = atomic_load(&g_tableCount);
  for (uint32_t i = 0; i < count; i++) {
    while (atomic_load(&g_tables[i].busy)) sched_yield();
  }
  CPerfSupport_spinLock(&g_overflowLock);
  errno = savedErrno;
}

ALLOC_HIDDEN void tablesRelease(bool reopen) {
  CPerfSupport_spinUnlock(&g_overflowLock);
  if (reopen) atomic_store(&g_open, 1);
}

ALLOC_HIDDEN void reclaimDeadTables(void) {
  int savedErrno = errno;
  pid_t pid = getpid();
  uint32_t count = atomic_load(&g_tableCount);
  for (uint32_t i = 0; i < count; i++) {
    int32_t owner = atomic_load(&g_tables[i].owner);
    if (owner && syscall(SYS_tgkill, pid, owner, 0) != 0 && errno == ESRCH) atomic_store(&g_tables[i].owner, 0);
  }
  errno = savedErrno;
}

// membarrier's private expedited command (Linux 4.14) spares every hook a fence;
// registering for it is the one process-wide effect, once.
static bool registerMembarrier(void) {
  static int registered;  // 0 unknown, 1 yes, -1 no
  if (!registered) registered = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
  return registered > 0;
}

static void resetTable(ThreadTable *t, bool all) {
  t->allocations = t->allocatedBytes = t->removed = t->removedBytes = t->frees = t->lost = 0;
  if (all) t->preLive = t->preLiveBytes = 0;
  if (t->freed.slots) munmap(t->freed.slots, FREED_TABLE_BYTES);
  t->freed = (FreedTable){0};
  if (t->byStack.slots) munmap(t->byStack.slots, FREED_TABLE_BYTES);
  t->byStack = (FreedTable){0};
}

ALLOC_HIDDEN void resetTables(bool all) {
  uint32_t count = atomic_load(&g_tableCount);
  for (uint32_t i = 0; i < count; i++) resetTable(&g_tables[i], all);
  resetTable(&g_overflow, all);
}

ALLOC_HIDDEN void openTables(void) {
  g_fenceHooks = !registerMembarrier();
  resetTables(true);
  atomic_store(&g_open, 1);
}
