// Roots outside the threads' stacks: the images' writable segments, and how much static
// TLS lies below a thread pointer.
#include "heap_scan_internal.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

enum { RODATA_MAX = 8, SECTIONS_MAX = 4096, SECTION_NAMES_MAX = 1 << 20 };

// An image's sections named .rodata or .rodata.*, as address ranges. They hold constants,
// but the linker puts them in the writable segment when they carry load-time relocations:
// Swift's do (libswiftCore's and Foundation's are about 1 MB each, Unicode tables and
// metadata). Nothing stores a heap address there at run time; read as roots, their words
// (a Unicode table, a conformance descriptor's relative offsets) held leaked blocks
// reachable by coincidence: closure-retain-cycles reported 319 of its 321 in 1 run of 50,
// the two it missed held from such words. From the image's file (the section headers are
// not mapped); 0 when it cannot be read, and then the segment is scanned whole.
static int rodata_sections(const struct dl_phdr_info *info, Range *out) {
  const char *path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "/proc/self/exe";
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int found = 0;
  ElfW(Ehdr) header;
  ElfW(Shdr) *sections = NULL;
  char *names = NULL;
  uint64_t sectionBytes = 0, nameBytes = 0;
  if (pread(fd, &header, sizeof header, 0) != (ssize_t)sizeof header || memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(ElfW(Shdr)) || header.e_shnum == 0 ||
      header.e_shnum > SECTIONS_MAX || header.e_shstrndx >= header.e_shnum)
    goto done;
  sectionBytes = round_page((uint64_t)header.e_shnum * sizeof(ElfW(Shdr)));
  sections = map_bytes(sectionBytes);
  if (!sections) goto done;
  ssize_t want = (ssize_t)(header.e_shnum * sizeof(ElfW(Shdr)));
  if (pread(fd, sections, (size_t)want, (off_t)header.e_shoff) != want) goto done;
  const ElfW(Shdr) *nameTable = &sections[header.e_shstrndx];
  if (nameTable->sh_size == 0 || nameTable->sh_size > SECTION_NAMES_MAX) goto done;
  nameBytes = round_page(nameTable->sh_size + 1);
  names = map_bytes(nameBytes);
  if (!names || pread(fd, names, nameTable->sh_size, (off_t)nameTable->sh_offset) != (ssize_t)nameTable->sh_size)
    goto done;
  for (int i = 0; i < header.e_shnum && found < RODATA_MAX; i++) {
    const ElfW(Shdr) *section = &sections[i];
    if (!(section->sh_flags & SHF_ALLOC) || section->sh_size == 0 || section->sh_name >= nameTable->sh_size) continue;
    const char *name = names + section->sh_name;
    if (strcmp(name, ".rodata") != 0 && strncmp(name, ".rodata.", 8) != 0) continue;
    out[found].start = info->dlpi_addr + section->sh_addr;
    out[found].end = out[found].start + section->sh_size;
    found++;
  }
done:
  if (sections) munmap(sections, sectionBytes);
  if (names) munmap(names, nameBytes);
  close(fd);
  return found;
}

// Pushes [start, end) less the constant ranges, in pieces.
static void push_without(Vec *ranges, uint64_t start, uint64_t end, int isLibc, const Range *constants, int count) {
  while (start < end) {
    // The first constant range overlapping what is left cuts it.
    const Range *cut = NULL;
    for (int i = 0; i < count; i++) {
      if (constants[i].end > start && constants[i].start < end && (!cut || constants[i].start < cut->start))
        cut = &constants[i];
    }
    if (!cut) {
      Range r = {start, end, isLibc};
      vec_push(ranges, &r);
      return;
    }
    if (cut->start > start) {
      Range r = {start, cut->start, isLibc};
      vec_push(ranges, &r);
    }
    start = cut->end;
  }
}

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
  Range constants[RODATA_MAX];
  int constantCount = -1;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
    if (constantCount < 0) constantCount = rodata_sections(info, constants);
    uint64_t start = info->dlpi_addr + ph->p_vaddr;
    push_without(ranges, start, start + ph->p_memsz, isLibc, constants, constantCount);
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
