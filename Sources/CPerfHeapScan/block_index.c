// A page-hashed index of the blocks (sorted by address): which block holds an address.
#include "heap_scan_internal.h"

#include <string.h>

int index_build(Index *ix, const CPerfHeapScan_Block *blocks, uint64_t count) {
  memset(ix, 0, sizeof *ix);
  ix->blocks = blocks;
  ix->count = count;
  if (count == 0) return 0;
  ix->minStart = block_start(&blocks[0]);
  uint64_t pages = 0, lastPage = UINT64_MAX, largeCount = 0;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t end = block_end(&blocks[i]);
    if (end > ix->maxEnd) ix->maxEnd = end;
    uint64_t first = block_start(&blocks[i]) >> PAGE_SHIFT, last = (end - 1) >> PAGE_SHIFT;
    if (last - first + 1 > LARGE_PAGES) {
      largeCount++;
      continue;
    }
    for (uint64_t p = first; p <= last; p++) {
      if (p != lastPage) pages++;
      lastPage = p;
    }
  }
  uint64_t cap = 1024;
  while (cap < pages * 2) cap <<= 1;
  ix->mask = cap - 1;
  ix->tableBytes = round_page(cap * sizeof(PageEntry));
  ix->table = map_bytes(ix->tableBytes);
  if (!ix->table) return -1;
  ix->largeBytes = round_page(largeCount * sizeof(uint32_t));
  ix->large = map_bytes(ix->largeBytes);
  if (!ix->large) return -1;
  // Blocks come in address order, tens of them to a page: the page entry the last block
  // ended in is extended without a probe (a probe per block was most of the build).
  PageEntry *current = NULL;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t first = block_start(&blocks[i]) >> PAGE_SHIFT, last = (block_end(&blocks[i]) - 1) >> PAGE_SHIFT;
    if (last - first + 1 > LARGE_PAGES) {
      ix->large[ix->largeCount++] = (uint32_t)i;
      continue;
    }
    for (uint64_t p = first; p <= last; p++) {
      if (current && current->page == p + 1) {
        current->hi = (uint32_t)i;
        continue;
      }
      uint64_t h = hash_page(p) & ix->mask;
      for (;;) {
        PageEntry *e = &ix->table[h];
        if (e->page == 0) {
          e->page = p + 1;
          e->lo = e->hi = (uint32_t)i;
          current = e;
          break;
        }
        if (e->page == p + 1) {
          e->hi = (uint32_t)i;
          current = e;
          break;
        }
        h = (h + 1) & ix->mask;
      }
    }
  }
  return 0;
}

void index_free(Index *ix) {
  if (ix->table) munmap(ix->table, ix->tableBytes);
  if (ix->large) munmap(ix->large, ix->largeBytes);
}
