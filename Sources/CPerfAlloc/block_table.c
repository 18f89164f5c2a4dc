// The live-block tables' storage and out-of-line operations: mapping or growing a stripe,
// a freed table's first page and its probing, and stripePlace.
#include "block_table.h"

uint32_t CPerfAlloc_sizeClass(uint64_t size) { return sizeClassOf(size); }

ALLOC_HIDDEN Stripe g_stripes[STRIPES];
ALLOC_HIDDEN FreedTable g_stripeByStack[STRIPES];

ALLOC_HIDDEN Slot *g_growScratch;
ALLOC_HIDDEN uint64_t g_growScratchBytes;
static CPerfSupport_SpinLock g_growLock;  // the scratch; taken inside one stripe's lock only

static void reinsert(Slot *slots, uint64_t capacity, const Slot *entries, uint64_t count) {
  for (uint64_t n = 0; n < count; n++) {
    uint64_t j = slotIndex(hashAddress(entries[n].w0 & ADDR_MASK), capacity);
    while (slots[j].w0 != 0) j = (j + 1 == capacity) ? 0 : j + 1;
    slots[j] = entries[n];
  }
}

// Grows (or rehashes) a stripe's table in place: its live slots are copied out to a scratch
// buffer all stripes share, the mapping is extended with mremap (the pages it has are kept,
// not faulted again), cleared, and the slots put back. A new table per growth would fault
// three times the final table's pages over the growths, and unmap the old ones.
ALLOC_HIDDEN bool stripeMap(Stripe *s, uint64_t capacity) {
  size_t bytes = pageRound((size_t)capacity * sizeof(Slot));
  if (!s->slots) {
    Slot *slots = mapBytes(bytes);
    if (!slots) return false;
    populateBytes(slots, bytes);
    s->slots = slots;
    s->capacity = bytes / sizeof(Slot);
    s->mappedBytes = bytes;
    s->used = 0;
    return true;
  }
  size_t oldBytes = s->mappedBytes;
  if (bytes < oldBytes) bytes = oldBytes;
  CPerfSupport_spinLock(&g_growLock);
  // As large as the table being grown, which no count of its live slots can exceed.
  if (oldBytes > g_growScratchBytes) {
    size_t scratchBytes = oldBytes;
    Slot *scratch = mapBytes(scratchBytes);
    if (!scratch) {
      CPerfSupport_spinUnlock(&g_growLock);
      return false;
    }
    populateBytes(scratch, scratchBytes);
    if (g_growScratch) munmap(g_growScratch, g_growScratchBytes);
    g_growScratch = scratch;
    g_growScratchBytes = scratchBytes;
  }
  Slot *slots = s->slots;
  if (bytes > oldBytes) {
    void *grown = mremap(slots, oldBytes, bytes, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED) {
      CPerfSupport_spinUnlock(&g_growLock);
      return false;
    }
    slots = grown;
    populateBytes((char *)slots + oldBytes, bytes - oldBytes);
  }
  uint64_t count = 0;
  for (uint64_t i = 0; i < s->capacity; i++)
    if ((slots[i].w0 & ADDR_MASK) > KEY_TOMBSTONE) g_growScratch[count++] = slots[i];
  memset(slots, 0, oldBytes);  // the extension is zero-filled already
  uint64_t newCapacity = bytes / sizeof(Slot);
  reinsert(slots, newCapacity, g_growScratch, count);
  CPerfSupport_spinUnlock(&g_growLock);
  s->slots = slots;
  s->capacity = newCapacity;
  s->mappedBytes = bytes;
  s->used = count;
  return true;
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

// Puts a block's slot into its stripe's table as a live block, replacing a block at the
// same address that was never seen freed; false (counted as lost) without room. Called
// with the stripe locked. Allocation counters are the caller's.
ALLOC_HIDDEN bool stripePlace(Stripe *s, uint64_t h, const Slot *slot) {
  if (UNLIKELY(!stripeReserve(s))) {
    s->lostBlocks++;
    return false;
  }
  uint64_t key = slot->w0 & ADDR_MASK;
  uint64_t capacity = s->capacity;
  uint64_t i = slotIndex(h, capacity);
  uint64_t firstFree = UINT64_MAX;
  for (;;) {
    uint64_t k = s->slots[i].w0 & ADDR_MASK;
    if (k == KEY_EMPTY) break;
    if (k == KEY_TOMBSTONE) {
      if (firstFree == UINT64_MAX) firstFree = i;
    } else if (k == key) {
      // A block we never saw freed (freed by a path that bypasses free): replace it.
      if (s->slots[i].w1 & PREEXISTING_BIT) {
        s->preLive--;
        s->preLiveBytes -= s->slots[i].w1 & SIZE_MASK;
      } else {
        s->live--;
        __atomic_store_n(&s->liveBytes, s->liveBytes - (s->slots[i].w1 & SIZE_MASK), __ATOMIC_RELAXED);
      }
      s->slots[i].w0 = KEY_TOMBSTONE;
      if (firstFree == UINT64_MAX) firstFree = i;
      break;
    }
    i = (i + 1 == capacity) ? 0 : i + 1;
  }
  if (firstFree == UINT64_MAX) {
    firstFree = i;
    s->used++;
  }
  s->slots[firstFree] = *slot;
  s->live++;
  __atomic_store_n(&s->liveBytes, s->liveBytes + (slot->w1 & SIZE_MASK), __ATOMIC_RELAXED);
  return true;
}
