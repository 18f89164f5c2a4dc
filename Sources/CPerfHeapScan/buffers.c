// Growable mmap'd arrays and the scan's view of /proc/self/maps.
#include "heap_scan_internal.h"

#include <errno.h>
#include <string.h>

#include "CPerfSupport.h"

int vec_push(Vec *v, const void *element) {
  if (v->count == v->capacity) {
    uint64_t newCap = v->capacity ? v->capacity * 2 : (65536 / v->elementSize);
    void *p;
    if (v->data) {
      p = mremap(v->data, round_page(v->capacity * v->elementSize), round_page(newCap * v->elementSize),
                 MREMAP_MAYMOVE);
      if (p == MAP_FAILED) return -1;
    } else {
      p = map_bytes(round_page(newCap * v->elementSize));
      if (!p) return -1;
    }
    v->data = p;
    v->capacity = newCap;
  }
  memcpy((char *)v->data + v->count * v->elementSize, element, v->elementSize);
  v->count++;
  return 0;
}

void vec_free(Vec *v) {
  if (v->data) munmap(v->data, round_page(v->capacity * v->elementSize));
  v->data = NULL;
  v->count = v->capacity = 0;
}

int read_maps(Vec *out) {
  out->elementSize = sizeof(Mapping);
  CPerfSupport_MapsReader reader;
  if (!CPerfSupport_mapsOpen(&reader)) return -1;
  CPerfSupport_Mapping line;
  while (CPerfSupport_mapsNext(&reader, &line)) {
    // Anonymous: no inode, and no path or a bracketed name.
    Mapping m = {line.start, line.end, line.readable, line.writable,
                 line.inode == 0 && (line.path[0] == 0 || line.path[0] == '[')};
    if (vec_push(out, &m) != 0) {
      CPerfSupport_mapsClose(&reader);
      return -1;
    }
  }
  CPerfSupport_mapsClose(&reader);
  return 0;
}

const Mapping *find_mapping(const Vec *maps, uint64_t address) {
  const Mapping *m = maps->data;
  int64_t lo = 0, hi = (int64_t)maps->count - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) >> 1;
    if (m[mid].end <= address) {
      lo = mid + 1;
    } else if (m[mid].start > address) {
      hi = mid - 1;
    } else {
      return &m[mid];
    }
  }
  return NULL;
}
