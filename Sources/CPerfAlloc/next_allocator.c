// Finding the next allocator, on the first call of any hook: blocks must come from the one
// the program's other calls reach from the first, so no later switch is possible.
#include "next_allocator.h"

#include <gnu/libc-version.h>

static void *firstMalloc(size_t size);
static void firstFree(void *pointer);
static void *firstCalloc(size_t count, size_t size);
static void *firstRealloc(void *pointer, size_t size);
static void *firstMemalign(size_t alignment, size_t size);
static size_t firstUsableSize(void *pointer);

ALLOC_HIDDEN NextAllocator g_next = {firstMalloc, firstFree, firstCalloc, firstRealloc, firstMemalign, firstUsableSize};

// dlsym allocates nothing when it finds the name; if a glibc did, its calls would come back
// here meanwhile and take glibc's own entry points.
static TLS int t_resolving;
static _Atomic int g_resolved;

// The named definition after this image, else glibc's own.
static void *nextDefinition(const char *name, void *glibcs) {
  void *found = dlsym(RTLD_NEXT, name);
  return found ? found : glibcs;
}

static size_t noUsableSize(void *pointer);

static void resolve(void) {
  if (atomic_load_explicit(&g_resolved, memory_order_acquire) || t_resolving) return;
  t_resolving = 1;
  // Every thread that gets here stores the same values.
  void *entries[] = {
      nextDefinition("malloc", (void *)__libc_malloc),     nextDefinition("free", (void *)__libc_free),
      nextDefinition("calloc", (void *)__libc_calloc),     nextDefinition("realloc", (void *)__libc_realloc),
      nextDefinition("memalign", (void *)__libc_memalign), nextDefinition("malloc_usable_size", NULL),
  };
  atomic_store_explicit(&g_next.malloc, (void *(*)(size_t))entries[0], memory_order_relaxed);
  atomic_store_explicit(&g_next.free, (void (*)(void *))entries[1], memory_order_relaxed);
  atomic_store_explicit(&g_next.calloc, (void *(*)(size_t, size_t))entries[2], memory_order_relaxed);
  atomic_store_explicit(&g_next.realloc, (void *(*)(void *, size_t))entries[3], memory_order_relaxed);
  atomic_store_explicit(&g_next.memalign, (void *(*)(size_t, size_t))entries[4], memory_order_relaxed);
  atomic_store_explicit(&g_next.usableSize, entries[5] ? (size_t(*)(void *))entries[5] : noUsableSize,
                        memory_order_relaxed);
  atomic_store_explicit(&g_resolved, 1, memory_order_release);
  t_resolving = 0;
}

// When no later image defines malloc_usable_size (glibc always does).
static size_t noUsableSize(void *pointer) {
  (void)pointer;
  return 0;
}

static void *firstMalloc(size_t size) {
  resolve();
  return t_resolving ? __libc_malloc(size) : NEXT(malloc)(size);
}

static void firstFree(void *pointer) {
  resolve();
  if (t_resolving)
    __libc_free(pointer);
  else
    NEXT(free)(pointer);
}

static void *firstCalloc(size_t count, size_t size) {
  resolve();
  return t_resolving ? __libc_calloc(count, size) : NEXT(calloc)(count, size);
}

static void *firstRealloc(void *pointer, size_t size) {
  resolve();
  return t_resolving ? __libc_realloc(pointer, size) : NEXT(realloc)(pointer, size);
}

static void *firstMemalign(size_t alignment, size_t size) {
  resolve();
  return t_resolving ? __libc_memalign(alignment, size) : NEXT(memalign)(alignment, size);
}

static size_t firstUsableSize(void *pointer) {
  resolve();
  return t_resolving ? 0 : NEXT(usableSize)(pointer);
}

// The object that defines `function`, and its executable segment holding it.
typedef struct Defining {
  uintptr_t address;
  uintptr_t start, end;
} Defining;

static int findSegment(struct dl_phdr_info *info, size_t size, void *context) {
  (void)size;
  Defining *d = context;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *header = &info->dlpi_phdr[i];
    if (header->p_type != PT_LOAD || !(header->p_flags & PF_X)) continue;
    uintptr_t start = info->dlpi_addr + header->p_vaddr;
    if (d->address >= start && d->address < start + header->p_memsz) {
      d->start = start;
      d->end = start + header->p_memsz;
      return 1;
    }
  }
  return 0;
}

static const void *objectOf(void *function) {
  Dl_info info;
  return function && dladdr(function, &info) ? info.dli_fbase : NULL;
}

// glibc's malloc entry points, from the first one's start to the end of the last one
// (their ELF symbol sizes): they sit together in its malloc.c, with the static helpers that
// memalign jumps to between them, and the rest (_int_malloc, _int_free) runs under one of
// their frames. A span wider than malloc.c could be (another glibc's layout) is none.
static void glibcSpan(CPerfAlloc_Allocator *out) {
  void *entries[] = {(void *)NEXT(malloc),       (void *)NEXT(free),     (void *)NEXT(calloc),
                     (void *)NEXT(realloc),      (void *)NEXT(memalign), dlsym(RTLD_NEXT, "valloc"),
                     dlsym(RTLD_NEXT, "pvalloc")};
  uintptr_t start = UINTPTR_MAX, end = 0;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    Dl_info info;
    const ElfW(Sym) *symbol = NULL;
    if (!dladdr1(entries[i], &info, (void **)&symbol, RTLD_DL_SYMENT) || !symbol || !info.dli_saddr) continue;
    if (info.dli_fbase != out->object) continue;
    uintptr_t from = (uintptr_t)info.dli_saddr, to = from + symbol->st_size;
    if (from < start) start = from;
    if (to > end) end = to;
  }
  enum { MALLOC_SPAN_MAX = 64 << 10 };
  if (end > start && end - start <= MALLOC_SPAN_MAX) {
    out->textStart = start;
    out->textEnd = end;
  }
}

void CPerfAlloc_nextAllocator(CPerfAlloc_Allocator *out) {
  memset(out, 0, sizeof *out);
  resolve();
  void *entry = (void *)NEXT(malloc);
  Dl_info info;
  if (!dladdr(entry, &info)) return;
  out->object = info.dli_fbase;
  out->path = info.dli_fname;
  out->isGlibc = objectOf((void *)gnu_get_libc_version) == info.dli_fbase;
  const char *names[] = {"free", "calloc", "realloc", "memalign", "malloc_usable_size"};
  void *entries[] = {(void *)NEXT(free), (void *)NEXT(calloc), (void *)NEXT(realloc), (void *)NEXT(memalign),
                     (void *)NEXT(usableSize)};
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    if (objectOf(entries[i]) != out->object) {
      out->missing = names[i];
      break;
    }
  }
  if (out->isGlibc) {
    glibcSpan(out);
    return;
  }
  // Another allocator's library is its allocator throughout.
  Defining d = {.address = (uintptr_t)entry};
  if (dl_iterate_phdr(findSegment, &d)) {
    out->textStart = d.start;
    out->textEnd = d.end;
  }
}
