// The allocator the hooks forward to: for each name of the malloc family, the definition
// the program would have reached without the interposer, the next one after this image in
// the dynamic linker's order. That is glibc's, or a jemalloc or tcmalloc the program links
// or preloads: jemalloc defines no __libc_* aliases, so forwarding to glibc's by those names
// gave it blocks of two allocators, and its malloc_usable_size of a glibc block crashed.
#ifndef CPERFALLOC_NEXT_ALLOCATOR_H
#define CPERFALLOC_NEXT_ALLOCATOR_H

#include "alloc_internal.h"

typedef struct NextAllocator {
  void *(*_Atomic malloc)(size_t);
  void (*_Atomic free)(void *);
  void *(*_Atomic calloc)(size_t, size_t);
  void *(*_Atomic realloc)(void *, size_t);
  // The aligned family (posix_memalign, aligned_alloc, valloc, pvalloc) goes through it.
  void *(*_Atomic memalign)(size_t, size_t);
  size_t (*_Atomic usableSize)(void *);
} NextAllocator;

// Until the first call resolves them, each entry is a stub that resolves them all.
extern ALLOC_HIDDEN NextAllocator g_next;

#define NEXT(entry) atomic_load_explicit(&g_next.entry, memory_order_relaxed)

#endif
