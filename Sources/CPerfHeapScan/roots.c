// Roots outside the threads' stacks: the images' writable segments, and how much static
// TLS lies below a thread pointer.
#include "heap_scan_internal.h"

#include <dlfcn.h>
#include <string.h>

int collect_segment(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  Vec *ranges = data;
  // glibc's own data holds malloc's state: its bins point at free chunk headers, and a
  // chunk header lies inside the block before it (its last 8 bytes hold the header's
  // first word), so such words would read as references to whatever block precedes a free
  // chunk. It also holds what libc keeps alive for the program (stdio's buffers, named by
  // their first byte): only words naming a block's start count there.
  const char *name = info->dlpi_name;
  size_t length = name ? strlen(name) : 0;
  int isLibc = length >= 10 && strcmp(name + length - 10, "/libc.so.6") == 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
    Range r = {info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz, isLibc};
    vec_push(ranges, &r);
  }
  return 0;
}

/// Sums the static TLS blocks of the loaded images (x86_64: they lie below the thread
/// pointer, after glibc's surplus).
static int sum_tls(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  uint64_t *total = data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_TLS) continue;
    uint64_t align = ph->p_align ? ph->p_align : 1;
    *total += (ph->p_memsz + align - 1) / align * align;
  }
  return 0;
}

/// How far below the thread pointer TLS reaches: glibc's static TLS block (the initially
/// loaded images' TLS, its surplus and the TCB), as glibc reports it to sanitizers. A
/// thread's first frames lie right below it, so an overestimate reads them as roots: the
/// 16 KiB margin this replaced made a skipped caller's live frames roots again (in the test
/// process, once libraries with TLS had been loaded), and the leak its frames named looked
/// held. Fallback: the images' TLS plus a surplus like glibc's.
uint64_t static_tls_bytes(void) {
  void (*info)(size_t *, size_t *) =
      (void (*)(size_t *, size_t *))dlvsym(RTLD_DEFAULT, "_dl_get_tls_static_info", "GLIBC_PRIVATE");
  size_t size = 0, align = 0;
  if (info) info(&size, &align);
  if (size > 0) return size;
  uint64_t bytes = 4096;
  dl_iterate_phdr(sum_tls, &bytes);
  return bytes;
}
