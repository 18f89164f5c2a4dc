// The stack bounds behind the stack walk, from CPerfSupport's maps reader.
#include "alloc_support.h"

// The mapping that holds `sp`, read from /proc/self/maps with raw syscalls: no malloc,
// no stdio lock, no pthread lock (pthread_getattr_np takes the thread's lock and
// reallocs, so it could deadlock if the hooked malloc came from inside it).
ALLOC_HIDDEN void lookUpStackBounds(uintptr_t sp) {
  t_stackHi = 1;
  CPerfSupport_MapsReader reader;
  if (!CPerfSupport_mapsOpen(&reader)) return;
  CPerfSupport_Mapping mapping;
  while (CPerfSupport_mapsNext(&reader, &mapping)) {
    if (sp < mapping.start || sp >= mapping.end) continue;
    // The main thread's [stack] grows down: allow up to 1 GiB below its top.
    bool mainStack = strcmp(mapping.path, "[stack]") == 0;
    t_stackLo = mainStack ? (mapping.end > (1ull << 30) ? mapping.end - (1ull << 30) : 0) : mapping.start;
    t_stackHi = mapping.end;
    break;
  }
  CPerfSupport_mapsClose(&reader);
}
