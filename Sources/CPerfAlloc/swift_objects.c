// Finds the return addresses of swift_slowAlloc's calls in the runtime's object allocators,
// which swift_objects.h tests each malloc's frame against.
#include "swift_objects.h"

ALLOC_HIDDEN uintptr_t g_slowAllocStart, g_slowAllocLength;
ALLOC_HIDDEN uintptr_t g_objectSites[MAX_OBJECT_SITES + 1];
ALLOC_HIDDEN uint32_t g_objectSiteCount;
static bool g_sitesLookedUp;

static size_t symbolSize(void *address, size_t fallback) {
  Dl_info info;
  const ElfW(Sym) *symbol = NULL;
  if (dladdr1(address, &info, (void **)&symbol, RTLD_DL_SYMENT) && symbol && info.dli_saddr == address &&
      symbol->st_size > 0) {
    return symbol->st_size;
  }
  return fallback;
}

// Records the return addresses of `call swift_slowAlloc` inside `function`: a
// malloc from swift_slowAlloc whose caller returns to one of these is an object.
static void scanForObjectSites(const uint8_t *function, size_t length) {
  if (!function) return;
  for (size_t i = 0; i + 5 <= length; i++) {
    if (function[i] != 0xE8) continue;
    int32_t rel;
    memcpy(&rel, function + i + 1, 4);
    uintptr_t target = (uintptr_t)(function + i + 5) + (intptr_t)rel;
    if (target != g_slowAllocStart) continue;
    uintptr_t site = (uintptr_t)(function + i + 5);
    bool known = false;
    for (uint32_t k = 0; k < g_objectSiteCount; k++) known |= g_objectSites[k] == site;
    if (!known && g_objectSiteCount < MAX_OBJECT_SITES) g_objectSites[g_objectSiteCount++] = site;
  }
}

ALLOC_HIDDEN void lookUpObjectSites(void) {
  if (g_sitesLookedUp) return;
  g_sitesLookedUp = true;
  void *slowAlloc = dlsym(RTLD_DEFAULT, "swift_slowAlloc");
  if (!slowAlloc) return;
  g_slowAllocStart = (uintptr_t)slowAlloc;
  g_slowAllocLength = symbolSize(slowAlloc, 128);
  static const char *const names[] = {"swift_allocObject", "swift_bufferAllocate", "swift_allocBox"};
  for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
    void *function = dlsym(RTLD_DEFAULT, names[n]);
    if (function) scanForObjectSites(function, symbolSize(function, 256));
  }
  // The hook pointer's initial value is the runtime's own (local) implementation.
  void **hookPointer = dlsym(RTLD_DEFAULT, "_swift_allocObject");
  if (hookPointer && *hookPointer) scanForObjectSites(*hookPointer, 256);
}
