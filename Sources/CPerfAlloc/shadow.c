// The shadow table's storage: the region pointers, a leaf's mapping, the walk a listing
// makes over the leaves; and a freed table's first page and its probing.
#include "shadow.h"

uint32_t CPerfAlloc_sizeClass(uint64_t size) { return sizeClassOf(size); }

ALLOC_HIDDEN Slot *_Atomic *g_top;
ALLOC_HIDDEN uint32_t *g_leafRegions;
ALLOC_HIDDEN _Atomic uint32_t g_leafCount;
ALLOC_HIDDEN _Atomic uint64_t g_lostLeaves;
static CPerfSupport_SpinLock g_leafLock;

ALLOC_HIDDEN bool shadowMapTop(void) {
  if (g_top) return true;
  // Virtual only: a page of pointers is backed when a region in its 2 GiB gets a leaf.
  g_top = mapBytes(TOP_ENTRIES * sizeof(Slot *));
  g_leafRegions = mapBytes(MAX_LEAVES * sizeof(uint32_t));
  if (g_top && g_leafRegions) return true;
  if (g_top) munmap((void *)g_top, TOP_ENTRIES * sizeof(Slot *));
  if (g_leafRegions) munmap(g_leafRegions, MAX_LEAVES * sizeof(uint32_t));
  g_top = NULL;
  g_leafRegions = NULL;
  return false;
}

// Under the lock, so a region gets one leaf and the list has every leaf once. Called by a
// hook inside its table's busy section, so a hold never sees a leaf half made.
__attribute__((noinline, cold)) ALLOC_HIDDEN Slot *leafCreate(uint64_t address) {
  uint64_t region = address >> REGION_BITS;
  CPerfSupport_spinLock(&g_leafLock);
  Slot *leaf = atomic_load_explicit(&g_top[region], memory_order_relaxed);
  uint32_t count = atomic_load_explicit(&g_leafCount, memory_order_relaxed);
  if (!leaf && count < MAX_LEAVES && (leaf = mapBytes(LEAF_BYTES))) {
    g_leafRegions[count] = (uint32_t)region;
    atomic_store_explicit(&g_leafCount, count + 1, memory_order_release);
    atomic_store_explicit(&g_top[region], leaf, memory_order_release);
  }
  CPerfSupport_spinUnlock(&g_leafLock);
  if (!leaf) atomic_fetch_add_explicit(&g_lostLeaves, 1, memory_order_relaxed);
  return leaf;
}

// Shell sort (no malloc, as qsort may; a few hundred leaves per GiB of heap).
ALLOC_HIDDEN void shadowSortLeaves(void) {
  uint32_t n = atomic_load(&g_leafCount);
  for (uint32_t gap = n / 2; gap > 0; gap /= 2) {
    for (uint32_t i = gap; i < n; i++) {
      uint32_t v = g_leafRegions[i];
      uint32_t j = i;
      for (; j >= gap && g_leafRegions[j - gap] > v; j -= gap) g_leafRegions[j] = g_leafRegions[j - gap];
      g_leafRegions[j] = v;
    }
  }
}

ALLOC_HIDDEN uint64_t shadowVisitLeaf(uint32_t i, void (*visit)(const Slot *, uint64_t, void *), void *context) {
  uint32_t region = g_leafRegions[i];
  const Slot *leaf = atomic_load_explicit(&g_top[region], memory_order_acquire);
  if (!leaf) return 0;
  size_t page = (size_t)CPerfSupport_pageRound(1);
  size_t pages = LEAF_BYTES / page;
  unsigned char resident[LEAF_BYTES / 4096 + 1];
  if (pages > sizeof(resident) || mincore((void *)leaf, LEAF_BYTES, resident) != 0) {
    // Cannot tell: read every page (the unbacked ones read as the zero page).
    pages = 1;
    page = LEAF_BYTES;
    resident[0] = 1;
  }
  uint64_t slotsPerPage = page / sizeof(Slot);
  uint64_t residentBytes = 0;
  for (size_t p = 0; p < pages; p++) {
    if (!(resident[p] & 1)) continue;
    residentBytes += page;
    const Slot *slots = leaf + p * slotsPerPage;
    for (uint64_t j = 0; j < slotsPerPage; j++) {
      uint64_t w0 = slots[j].w0;
      if (!(w0 & LIVE_BIT)) continue;
      visit(&slots[j], slotAddress(region, p * slotsPerPage + j, w0), context);
    }
  }
  return residentBytes;
}

ALLOC_HIDDEN void shadowUnmapLeaf(uint32_t i) {
  uint32_t region = g_leafRegions[i];
  Slot *leaf = atomic_exchange(&g_top[region], NULL);
  if (leaf) munmap(leaf, LEAF_BYTES);
}

// Gives a quiesced leaf's pages back, keeping the mapping: it reads as empty from then on.
ALLOC_HIDDEN void shadowReleaseLeaf(uint32_t i) {
  Slot *leaf = atomic_load(&g_top[g_leafRegions[i]]);
  if (leaf) (void)madvise(leaf, LEAF_BYTES, MADV_DONTNEED);
}

ALLOC_HIDDEN void shadowUnmapAll(void) {
  uint32_t n = atomic_load(&g_leafCount);
  for (uint32_t i = 0; i < n; i++) shadowUnmapLeaf(i);
  atomic_store(&g_leafCount, 0);
  atomic_store(&g_lostLeaves, 0);
  bigUnmap();
}

// MARK: - Big blocks

#define BIG_SLOTS 65536  // 256 GiB of blocks of 4 MiB

typedef struct BigEntry {
  uint64_t address, size;  // address 0: empty
} BigEntry;

static BigEntry *g_big;
static CPerfSupport_SpinLock g_bigLock;

static inline uint64_t bigHome(uint64_t address) { return ((address >> 12) * 0x9E3779B97F4A7C15ull) >> 48; }

ALLOC_HIDDEN bool bigPut(uint64_t address, uint64_t size) {
  bool put = false;
  CPerfSupport_spinLock(&g_bigLock);
  if (!g_big) g_big = mapBytes(BIG_SLOTS * sizeof(BigEntry));
  for (uint64_t i = bigHome(address), probes = 0; g_big && probes < BIG_SLOTS; probes++, i = (i + 1) % BIG_SLOTS) {
    if (g_big[i].address == 0 || g_big[i].address == address) {
      g_big[i] = (BigEntry){address, size};
      put = true;
      break;
    }
  }
  CPerfSupport_spinUnlock(&g_bigLock);
  return put;
}

ALLOC_HIDDEN uint64_t bigSize(uint64_t address, bool remove) {
  uint64_t size = SIZE_MASK;
  CPerfSupport_spinLock(&g_bigLock);
  uint64_t i = bigHome(address);
  for (uint64_t probes = 0; g_big && g_big[i].address && probes < BIG_SLOTS; probes++, i = (i + 1) % BIG_SLOTS) {
    if (g_big[i].address != address) continue;
    size = g_big[i].size;
    if (!remove) break;
    // Backward-shift deletion: later entries of the run move into the hole unless their
    // home lies cyclically in (hole, j].
    uint64_t hole = i;
    for (uint64_t j = (i + 1) % BIG_SLOTS; g_big[j].address; j = (j + 1) % BIG_SLOTS) {
      uint64_t home = bigHome(g_big[j].address);
      bool stays = (hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j);
      if (stays) continue;
      g_big[hole] = g_big[j];
      hole = j;
    }
    g_big[hole].address = 0;
    break;
  }
  CPerfSupport_spinUnlock(&g_bigLock);
  return size;
}

ALLOC_HIDDEN void bigUnmap(void) {
  if (g_big) munmap(g_big, BIG_SLOTS * sizeof(BigEntry));
  g_big = NULL;
}

__attribute__((noinline, cold)) ALLOC_HIDDEN bool freedMap(FreedTable *t) {
  t->slots = mapBytes(FREED_TABLE_BYTES);
  if (!t->slots) t->lost++;
  return t->slots != NULL;
}

ALLOC_HIDDEN void freedProbe(FreedTable *t, uint64_t i, uint64_t key, uint64_t size) {
  for (uint64_t probes = 0; probes < FREED_SLOTS; probes++) {
    FreedSlot *f = &t->slots[i];
    if (f->key == key || f->count == 0) {
      if (f->count == 0) {
        f->key = key;
        t->used++;
      }
      f->count++;
      f->bytes += size;
      return;
    }
    i = (i + 1) & (FREED_SLOTS - 1);
  }
  t->lost++;
}
