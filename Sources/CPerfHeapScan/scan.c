// See CPerfHeapScan.h. Linux x86_64 only (register layout of ucontext_t).
#include "CPerfHeapScan.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define PAGE_SHIFT 12
#define LARGE_PAGES 16  // blocks touching more pages than this go to the large list
#define POINTER_MASK 0x0000FFFFFFFFFFFFull

// ---------------------------------------------------------------- mmap'd buffers

static void *map_bytes(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static uint64_t round_page(uint64_t bytes) { return (bytes + 4095) & ~4095ull; }

typedef struct {
  void *data;
  uint64_t count, capacity, elementSize;
} Vec;

static int vec_push(Vec *v, const void *element) {
  if (v->count == v->capacity) {
    uint64_t newCap = v->capacity ? v->capacity * 2 : (65536 / v->elementSize);
    void *p;
    if (v->data) {
      p = mremap(v->data, round_page(v->capacity * v->elementSize), round_page(newCap * v->elementSize), MREMAP_MAYMOVE);
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

static void vec_free(Vec *v) {
  if (v->data) munmap(v->data, round_page(v->capacity * v->elementSize));
  v->data = NULL;
  v->count = v->capacity = 0;
}

// ---------------------------------------------------------------- block index

typedef struct {
  uint64_t page;  // page number + 1 (0: empty slot)
  uint32_t lo, hi;  // blocks overlapping the page: [lo, hi]
} PageEntry;

typedef struct {
  const CPerfHeapScan_Block *blocks;
  uint64_t count;
  uint64_t minStart, maxEnd;
  PageEntry *table;
  uint64_t mask;      // table capacity - 1
  uint64_t tableBytes;
  uint32_t *large;    // indices of large blocks, ascending
  uint64_t largeCount, largeBytes;
} Index;

static inline uint64_t block_end(const CPerfHeapScan_Block *b) { return b->start + (b->size ? b->size : 1); }

static inline uint64_t hash_page(uint64_t page) {
  page ^= page >> 29;
  page *= 0xbf58476d1ce4e5b9ull;
  page ^= page >> 32;
  return page;
}

static int index_build(Index *ix, const CPerfHeapScan_Block *blocks, uint64_t count) {
  memset(ix, 0, sizeof *ix);
  ix->blocks = blocks;
  ix->count = count;
  if (count == 0) return 0;
  ix->minStart = blocks[0].start;
  uint64_t pages = 0, lastPage = UINT64_MAX, largeCount = 0;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t end = block_end(&blocks[i]);
    if (end > ix->maxEnd) ix->maxEnd = end;
    uint64_t first = blocks[i].start >> PAGE_SHIFT, last = (end - 1) >> PAGE_SHIFT;
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
  for (uint64_t i = 0; i < count; i++) {
    uint64_t first = blocks[i].start >> PAGE_SHIFT, last = (block_end(&blocks[i]) - 1) >> PAGE_SHIFT;
    if (last - first + 1 > LARGE_PAGES) {
      ix->large[ix->largeCount++] = (uint32_t)i;
      continue;
    }
    for (uint64_t p = first; p <= last; p++) {
      uint64_t h = hash_page(p) & ix->mask;
      for (;;) {
        PageEntry *e = &ix->table[h];
        if (e->page == 0) {
          e->page = p + 1;
          e->lo = e->hi = (uint32_t)i;
          break;
        }
        if (e->page == p + 1) {
          e->hi = (uint32_t)i;
          break;
        }
        h = (h + 1) & ix->mask;
      }
    }
  }
  return 0;
}

static void index_free(Index *ix) {
  if (ix->table) munmap(ix->table, ix->tableBytes);
  if (ix->large) munmap(ix->large, ix->largeBytes);
}

/// The block containing `v` (already masked), or -1.
static inline int64_t index_find(const Index *ix, uint64_t v) {
  const CPerfHeapScan_Block *blocks = ix->blocks;
  uint64_t p = (v >> PAGE_SHIFT) + 1;
  uint64_t h = hash_page(p - 1) & ix->mask;
  for (;;) {
    const PageEntry *e = &ix->table[h];
    if (e->page == p) {
      // Last block in [lo, hi] with start <= v.
      int64_t lo = e->lo, hi = e->hi, found = -1;
      while (lo <= hi) {
        int64_t mid = (lo + hi) >> 1;
        if (blocks[mid].start <= v) {
          found = mid;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      if (found >= 0 && v < block_end(&blocks[found])) return found;
      break;
    }
    if (e->page == 0) break;
    h = (h + 1) & ix->mask;
  }
  if (ix->largeCount) {
    int64_t lo = 0, hi = (int64_t)ix->largeCount - 1, found = -1;
    while (lo <= hi) {
      int64_t mid = (lo + hi) >> 1;
      if (blocks[ix->large[mid]].start <= v) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (found >= 0 && v < block_end(&blocks[ix->large[found]])) return ix->large[found];
  }
  return -1;
}

// ---------------------------------------------------------------- maps

typedef struct {
  uint64_t start, end;
  uint32_t readable, writable;
  uint32_t anonymous;  // no file behind it ([heap], malloc arenas, stacks)
} Mapping;

/// Reads /proc/self/maps with raw syscalls into an mmap'd array (no malloc).
static int read_maps(Vec *out) {
  out->elementSize = sizeof(Mapping);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[8192];
  char line[512];
  size_t lineLen = 0;
  for (;;) {
    ssize_t n = syscall(SYS_read, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      char c = buf[i];
      if (c != '\n') {
        if (lineLen < sizeof line - 1) line[lineLen++] = c;
        continue;
      }
      line[lineLen] = 0;
      // "start-end perms ..."
      uint64_t start = 0, end = 0;
      const char *s = line;
      while (*s && *s != '-') {
        char d = *s++;
        start = start * 16 + (uint64_t)(d <= '9' ? d - '0' : (d | 32) - 'a' + 10);
      }
      if (*s == '-') s++;
      while (*s && *s != ' ') {
        char d = *s++;
        end = end * 16 + (uint64_t)(d <= '9' ? d - '0' : (d | 32) - 'a' + 10);
      }
      if (*s == ' ') s++;
      Mapping m = {start, end, s[0] == 'r', s[1] == 'w', 0};
      // "perms offset dev inode [path]": anonymous when the inode is 0 and the path is
      // empty or a bracketed name.
      const char *f = s;
      for (int field = 0; field < 3 && *f; field++) {
        while (*f && *f != ' ') f++;
        while (*f == ' ') f++;
      }
      if (f[0] == '0' && f[1] == ' ') {
        f++;
        while (*f == ' ') f++;
        m.anonymous = *f == 0 || *f == '[';
      }
      if (vec_push(out, &m) != 0) {
        syscall(SYS_close, fd);
        return -1;
      }
      lineLen = 0;
    }
  }
  syscall(SYS_close, fd);
  return 0;
}

static const Mapping *find_mapping(const Vec *maps, uint64_t address) {
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

// ---------------------------------------------------------------- writable segments

typedef struct {
  uint64_t start, end;
  /// Only words naming a block's first byte are references here (glibc's own data).
  int startsOnly;
} Range;

static int collect_segment(struct dl_phdr_info *info, size_t size, void *data) {
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
static uint64_t static_tls_bytes(void) {
  void (*info)(size_t *, size_t *) =
      (void (*)(size_t *, size_t *))dlvsym(RTLD_DEFAULT, "_dl_get_tls_static_info", "GLIBC_PRIVATE");
  size_t size = 0, align = 0;
  if (info) info(&size, &align);
  if (size > 0) return size;
  uint64_t bytes = 4096;
  dl_iterate_phdr(sum_tls, &bytes);
  return bytes;
}

// ---------------------------------------------------------------- thread parking

typedef struct {
  _Atomic int32_t tid;
  _Atomic int32_t state;  // 0 signalled, 1 parked, 2 resumed
  uint64_t rsp;
  uint64_t tp;  // thread pointer (%fs:0): the thread's TCB, static TLS just below it
  int32_t inSyscall;  // parked at a system call instruction (blocked in it, or about to restart it)
  uint64_t regs[NGREG];
} Slot;

static Slot *g_slots;
static _Atomic uint64_t g_slotCount;
static _Atomic int32_t g_release;
static _Atomic int32_t g_active;
static struct sigaction g_previous;

static void forward_signal(int sig, siginfo_t *info, void *context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    g_previous.sa_handler(sig);
  }
}

static void park_handler(int sig, siginfo_t *info, void *context) {
  int savedErrno = errno;
  if (!atomic_load(&g_active)) {
    forward_signal(sig, info, context);
    errno = savedErrno;
    return;
  }
  int32_t tid = (int32_t)syscall(SYS_gettid);
  uint64_t n = atomic_load(&g_slotCount);
  Slot *slot = NULL;
  for (uint64_t i = 0; i < n; i++) {
    if (atomic_load(&g_slots[i].tid) == tid) {
      slot = &g_slots[i];
      break;
    }
  }
  if (!slot || atomic_load(&slot->state) != 0) {
    forward_signal(sig, info, context);
    errno = savedErrno;
    return;
  }
  ucontext_t *uc = context;
  for (int r = 0; r < NGREG; r++) slot->regs[r] = (uint64_t)uc->uc_mcontext.gregs[r];
  slot->rsp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
  // A signal that interrupts a blocking system call leaves the PC right after the syscall
  // instruction (0f 05), or on it when the call will be restarted.
  const uint8_t *pc = (const uint8_t *)uc->uc_mcontext.gregs[REG_RIP];
  slot->inSyscall = (pc[0] == 0x0f && pc[1] == 0x05) ||
                    (((uint64_t)pc & 4095) >= 2 && pc[-2] == 0x0f && pc[-1] == 0x05);
  uint64_t tp;
  __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
  slot->tp = tp;
  atomic_store(&slot->state, 1);
  while (!atomic_load(&g_release)) {
    syscall(SYS_futex, &g_release, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  }
  atomic_store(&slot->state, 2);
  errno = savedErrno;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/// Thread ids of the process except the caller, into an mmap'd array.
static int list_threads(Vec *tids, int32_t self) {
  tids->elementSize = sizeof(int32_t);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long pos = 0; pos < n;) {
      struct dirent64 *d = (struct dirent64 *)(buf + pos);
      pos += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
      int32_t tid = (int32_t)strtol(d->d_name, NULL, 10);
      if (tid != self) vec_push(tids, &tid);
    }
  }
  syscall(SYS_close, fd);
  return 0;
}

/// The stack pointer of a thread blocked in a system call (from /proc/self/task/T/syscall),
/// or 0.
static uint64_t blocked_thread_sp(int32_t tid) {
  char path[64] = "/proc/self/task/";
  char digits[16];
  int len = 0;
  for (int32_t t = tid; t > 0; t /= 10) digits[len++] = (char)('0' + t % 10);
  size_t p = strlen(path);
  while (len > 0) path[p++] = digits[--len];
  memcpy(path + p, "/syscall", 9);
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[256];
  ssize_t n = syscall(SYS_read, fd, buf, sizeof buf - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  if (buf[0] < '0' || buf[0] > '9') return 0;  // "running"
  // "nr a1 a2 a3 a4 a5 a6 sp pc": the 8th field.
  char *s = buf;
  for (int field = 0; field < 7; field++) {
    while (*s && *s != ' ') s++;
    while (*s == ' ') s++;
  }
  if (s[0] != '0' || s[1] != 'x') return 0;
  return strtoull(s, NULL, 16);
}

// ---------------------------------------------------------------- scanning

typedef struct {
  const Index *ix;
  uint8_t *marks;
  uint64_t *rootSources;  // optional: the first root word that marked each block
  Vec edges;
  int failed;
  const CPerfHeapScan_Snapshot *snapshot;  // optional
  uint64_t snapshotCursor;                 // range of the last lookup
  uint64_t staleWords;
  const CPerfHeapScan_Layout *layouts;  // optional, sorted by metadata
  uint64_t layoutCount;
  const uint64_t *layoutBits;
  uint64_t layoutWords;
} Scanner;

/// The layout of a Swift object's type, if the caller gave one.
static inline const CPerfHeapScan_Layout *layout_of(const Scanner *sc, const CPerfHeapScan_Block *blk) {
  if (!sc->layoutCount || !(blk->flags & CPerfHeapScan_BlockSwiftObject) || blk->size < 16) return NULL;
  uint64_t metadata = *(const uint64_t *)blk->start;
  uint64_t lo = 0, hi = sc->layoutCount;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (sc->layouts[mid].metadata < metadata) lo = mid + 1;
    else hi = mid;
  }
  return lo < sc->layoutCount && sc->layouts[lo].metadata == metadata ? &sc->layouts[lo] : NULL;
}

/// Whether word `w` of an object with layout `layout` cannot hold a reference.
static inline int layout_excludes(const Scanner *sc, const CPerfHeapScan_Layout *layout, uint64_t w) {
  if (!layout || w >= layout->words) return 0;
  uint64_t bit = (uint64_t)layout->firstBit + w;
  return (int)((sc->layoutBits[bit >> 6] >> (bit & 63)) & 1);
}

/// Whether the word at `address` still holds `value`, the value it held when the
/// snapshot was taken (and not a pointer into a block live then: see CPerfHeapScan.h).
static inline int unchanged_since_snapshot(Scanner *sc, uint64_t address, uint64_t value) {
  const CPerfHeapScan_Snapshot *snap = sc->snapshot;
  if (!snap || snap->rangeCount == 0 || value == 0) return 0;
  const CPerfHeapScan_SnapshotRange *r = snap->ranges;
  uint64_t i = sc->snapshotCursor;
  if (i >= snap->rangeCount || address < r[i].start || address >= r[i].end) {
    int64_t lo = 0, hi = (int64_t)snap->rangeCount - 1, found = -1;
    while (lo <= hi) {
      int64_t mid = (lo + hi) >> 1;
      if (r[mid].start <= address) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    if (found < 0 || address >= r[found].end) return 0;
    i = (uint64_t)found;
    sc->snapshotCursor = i;
  }
  return snap->words[r[i].firstWord + (address - r[i].start) / 8] == value;
}

/// A root word naming a block allocated after the snapshot, unchanged since the
/// snapshot: written before that block existed, so it is a stale copy of an address
/// that was reused, not a reference.
static inline int stale_root_word(Scanner *sc, uint64_t address, uint64_t raw, int64_t target) {
  if (!sc->snapshot || (sc->ix->blocks[target].flags & CPerfHeapScan_BlockHolder)) return 0;
  if (!unchanged_since_snapshot(sc, address, raw)) return 0;
  sc->staleWords++;
  return 1;
}

static inline void scan_root_range(Scanner *sc, uint64_t start, uint64_t end, uint8_t mark, int startsOnly) {
  const Index *ix = sc->ix;
  start = (start + 7) & ~7ull;
  end &= ~7ull;
  for (uint64_t a = start; a < end; a += 8) {
    uint64_t v = *(const volatile uint64_t *)a & POINTER_MASK;
    if (v - ix->minStart >= ix->maxEnd - ix->minStart) continue;
    int64_t b = index_find(ix, v);
    if (b >= 0 && startsOnly && v != ix->blocks[b].start) continue;
    if (b >= 0 && !(sc->marks[b] & CPerfHeapScan_MarkFreed)) {
      if (sc->rootSources && !sc->rootSources[b]) sc->rootSources[b] = a;
      sc->marks[b] |= mark;
    }
  }
}

/// A reference to a Swift object names its start: on x86_64 a multi-payload enum keeps its
/// tag in the high spare bits (masked off here), never the low ones. Any other pointer into
/// one is no reference under ARC (bytes that only look like one, such as the rest of an old
/// pointer under a string copied over it), so heap words are not followed there. Roots
/// still are: a parked thread may hold only an interior pointer into an object its
/// caller's frame owns.
static inline int inside_swift_object(const CPerfHeapScan_Block *target, uint64_t v) {
  return (target->flags & CPerfHeapScan_BlockSwiftObject) && v != target->start;
}

/// `layout` (optional) is that of the object whose words start `first` words before `words`.
static void scan_words(Scanner *sc, const uint64_t *words, uint64_t n, uint8_t mark, int checkSnapshot,
                       const CPerfHeapScan_Layout *layout, uint64_t first) {
  const Index *ix = sc->ix;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t v = words[i] & POINTER_MASK;
    if (v - ix->minStart >= ix->maxEnd - ix->minStart) continue;
    int64_t b = index_find(ix, v);
    if (b >= 0 && !(sc->marks[b] & CPerfHeapScan_MarkFreed)) {
      if (layout_excludes(sc, layout, first + i)) {
        sc->layoutWords++;
        continue;
      }
      if (mark == CPerfHeapScan_MarkHeldByHolder && inside_swift_object(&ix->blocks[b], v)) continue;
      if (checkSnapshot && stale_root_word(sc, (uint64_t)&words[i], words[i], b)) continue;
      if (sc->rootSources && !sc->rootSources[b]) sc->rootSources[b] = (uint64_t)&words[i];
      sc->marks[b] |= mark;
    }
  }
}

/// The words of an array buffer that hold its header and live elements. Swift sizes the
/// capacity by malloc_usable_size, so elements may lie past the requested size `n` words
/// (but inside the chunk). `stride` is the element stride, 0 when unknown.
static uint64_t array_live_words(const uint64_t *words, uint64_t n, uint64_t stride) {
  uint64_t count = words[2], capacity = words[3] >> 1;
  if (capacity == 0 || count > capacity) return n;
  // glibc's chunk header: size | flags. The usable size is at most size - 8.
  uint64_t chunk = words[-1] & ~7ull;
  if (chunk < 48 || chunk < n * 8 || chunk > n * 8 + 8192) return n;  // not a plausible header
  uint64_t usableWords = (chunk - 8) / 8;
  // Without the stride, its upper bound: the capacity was computed from the usable size.
  if (stride == 0) stride = (chunk - 8 - 32) / capacity;
  uint64_t liveWords = (32 + count * stride + 7) / 8;
  return liveWords < usableWords ? liveWords : usableWords;
}

static void scan_blocks(Scanner *sc) {
  const Index *ix = sc->ix;
  const CPerfHeapScan_Block *blocks = ix->blocks;
  uint64_t lo = ix->minStart, span = ix->maxEnd - ix->minStart;
  for (uint64_t i = 0; i < ix->count; i++) {
    const CPerfHeapScan_Block *blk = &blocks[i];
    if ((blk->flags & CPerfHeapScan_BlockNoScan) ||
        (sc->marks[i] & (CPerfHeapScan_MarkSideTable | CPerfHeapScan_MarkUnreadable | CPerfHeapScan_MarkFreed)))
      continue;
    const uint64_t *words = (const uint64_t *)blk->start;
    uint64_t n = blk->size / 8;
    int swift = (blk->flags & CPerfHeapScan_BlockSwiftObject) != 0;
    if ((blk->flags & CPerfHeapScan_BlockArrayStorage) && n >= 4 && !(sc->marks[i] & CPerfHeapScan_MarkUnreadable))
      n = array_live_words(words, n, blk->flags >> CPerfHeapScan_BlockStrideShift);
    if (blk->flags & CPerfHeapScan_BlockHolder) {
      // Word 1 of an object is its refcount: never a pointer worth following here.
      // Only a Swift object's words are checked against the snapshot: its references are
      // counted, so a word naming freed memory is never a reference that will be rewritten
      // with the same address, only bytes that were copied in (padding, unused payload). A C
      // structure may keep a dangling pointer and later store a new block that got the
      // same address into it.
      if (swift && n >= 2) {
        const CPerfHeapScan_Layout *layout = layout_of(sc, blk);
        scan_words(sc, words, 1, CPerfHeapScan_MarkHeldByHolder, 1, NULL, 0);
        scan_words(sc, words + 2, n - 2, CPerfHeapScan_MarkHeldByHolder, 1, layout, 2);
      } else {
        scan_words(sc, words, n, CPerfHeapScan_MarkHeldByHolder, 0, NULL, 0);
      }
      continue;
    }
    const CPerfHeapScan_Layout *layout = swift ? layout_of(sc, blk) : NULL;
    for (uint64_t w = 0; w < n; w++) {
      if (swift && w == 1) {
        uint64_t rc = words[1];
        if ((rc >> 62) == 3) {
          int64_t st = index_find(ix, (rc & ~(3ull << 62)) << 3);
          if (st >= 0 && (sc->marks[st] & CPerfHeapScan_MarkSideTable)) {
            CPerfHeapScan_Edge e = {(uint32_t)i, (uint32_t)st, 8u | CPerfHeapScan_EdgeSideTable};
            if (vec_push(&sc->edges, &e) != 0) sc->failed = 1;
          }
        }
        continue;
      }
      uint64_t v = words[w] & POINTER_MASK;
      if (v - lo >= span) continue;
      int64_t b = index_find(ix, v);
      if (b < 0 || (sc->marks[b] & CPerfHeapScan_MarkFreed)) continue;
      if (layout_excludes(sc, layout, w)) {
        sc->layoutWords++;
        continue;
      }
      uint32_t flags = 0;
      if (v != blocks[b].start) {
        if ((uint64_t)b == i) continue;  // interior self-pointer (e.g. dictionary storage)
        if (inside_swift_object(&blocks[b], v)) continue;
        flags |= CPerfHeapScan_EdgeInterior;
      }
      if (sc->marks[b] & CPerfHeapScan_MarkSideTable) flags |= CPerfHeapScan_EdgeWeak;
      uint64_t off = w * 8;
      if (off > CPerfHeapScan_EdgeOffsetMask) off = CPerfHeapScan_EdgeOffsetMask;
      CPerfHeapScan_Edge e = {(uint32_t)i, (uint32_t)b, (uint32_t)off | flags};
      if (vec_push(&sc->edges, &e) != 0) sc->failed = 1;
    }
  }
}

/// Marks blocks outside readable mappings, and weak-reference side tables.
static void classify_blocks(Scanner *sc, const Vec *maps) {
  const Index *ix = sc->ix;
  const CPerfHeapScan_Block *blocks = ix->blocks;
  const Mapping *m = maps->data;
  uint64_t mi = 0;
  for (uint64_t i = 0; i < ix->count; i++) {
    uint64_t start = blocks[i].start, end = start + blocks[i].size;
    while (mi < maps->count && m[mi].end <= start) mi++;
    // Adjacent readable mappings may hold one block (e.g. a heap extended in place).
    uint64_t j = mi, covered = start;
    while (j < maps->count && m[j].start <= covered && m[j].readable && covered < end) covered = m[j++].end;
    if (covered < end && blocks[i].size > 0) sc->marks[i] |= CPerfHeapScan_MarkUnreadable;
  }
  for (uint64_t i = 0; i < ix->count; i++) {
    if (!(blocks[i].flags & CPerfHeapScan_BlockSwiftObject) || blocks[i].size < 16) continue;
    if (sc->marks[i] & CPerfHeapScan_MarkUnreadable) continue;
    uint64_t rc = ((const uint64_t *)blocks[i].start)[1];
    if ((rc >> 62) != 3) continue;
    uint64_t table = (rc & ~(3ull << 62)) << 3;
    int64_t st = index_find(ix, table);
    if (st < 0 || blocks[st].start != table || blocks[st].size < 8) continue;
    if (sc->marks[st] & CPerfHeapScan_MarkUnreadable) continue;
    if (*(const uint64_t *)table == blocks[i].start) sc->marks[st] |= CPerfHeapScan_MarkSideTable;
  }
}

static int32_t scan_impl(const CPerfHeapScan_Block *blocks, uint64_t count, const CPerfHeapScan_Options *options,
                         int32_t callerTid, uint64_t callerFramesTop, CPerfHeapScan_Result *result) {
  int skipCallerStack = options ? options->skipCallerStack : 0;
  int scanGlobals = options ? options->scanGlobals : 1;
  int scanThreads = options ? options->scanThreads : 1;
  int sig = options && options->signalNumber ? options->signalNumber : SIGPROF;
  int timeoutMs = options && options->parkTimeoutMs > 0 ? options->parkTimeoutMs : 500;

  Index ix;
  Scanner sc = {.ix = &ix, .snapshot = options ? options->snapshot : NULL};
  if (options && options->layouts && options->layoutBits) {
    sc.layouts = options->layouts;
    sc.layoutCount = options->layoutCount;
    sc.layoutBits = options->layoutBits;
  }
  sc.edges.elementSize = sizeof(CPerfHeapScan_Edge);
  Vec maps = {0}, segments = {.elementSize = sizeof(Range)}, tids = {0};
  int32_t status = 0;
  int installed = 0, restore = 1;
  uint64_t slotBytes = 0;

  result->blockCount = count;
  result->marks = map_bytes(round_page(count));
  if (!result->marks) {
    result->error = errno;
    result->call = "mmap";
    return result->error;
  }
  sc.marks = result->marks;
  if (options && options->recordRootSources) {
    result->rootSources = map_bytes(round_page(count * sizeof(uint64_t)));
    sc.rootSources = result->rootSources;
  }
  if (index_build(&ix, blocks, count) != 0) {
    status = errno;
    result->call = "mmap (block index)";
    goto done;
  }
  // Everything that may take a lock another thread could hold happens before the stop.
  if (scanGlobals) dl_iterate_phdr(collect_segment, &segments);
  // Below the thread pointer: every image's static TLS plus glibc's surplus (a few KiB);
  // above it, struct pthread (its pthread_setspecific slots). The main thread's lie in a
  // mapping of ld.so's, not on its stack. Not the whole mapping: neighbouring anonymous
  // mappings merge with it, and one may hold the scanner's own block list.
  uint64_t tlsBelow = scanThreads ? static_tls_bytes() : 0, tlsAbove = 4096;
  if (scanThreads) {
    if (list_threads(&tids, (int32_t)syscall(SYS_gettid)) != 0) {
      status = errno;
      result->call = "open /proc/self/task";
      goto done;
    }
    // Room for threads started while the others park (listed again below).
    uint64_t slotCapacity = tids.count * 2 + 64;
    slotBytes = round_page(slotCapacity * sizeof(Slot));
    g_slots = map_bytes(slotBytes);
    if (!g_slots) {
      status = errno;
      result->call = "mmap (thread slots)";
      goto done;
    }
    int32_t *tid = tids.data;
    for (uint64_t i = 0; i < tids.count; i++) atomic_store(&g_slots[i].tid, tid[i]);
    atomic_store(&g_slotCount, tids.count);
    atomic_store(&g_release, 0);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = park_handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&action.sa_mask);
    // A handler left installed by an earlier scan (a thread never parked) must not
    // become its own "previous" handler.
    struct sigaction current;
    sigaction(sig, NULL, &current);
    struct sigaction *keep = (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == park_handler
                                 ? &current : &g_previous;
    if (sigaction(sig, &action, keep) != 0) {
      status = errno;
      result->call = "sigaction";
      goto done;
    }
    installed = 1;
    atomic_store(&g_active, 1);
    pid_t pid = getpid();
    for (uint64_t i = 0; i < tids.count; i++) {
      if (syscall(SYS_tgkill, pid, tid[i], sig) != 0) atomic_store(&g_slots[i].state, 3);  // gone
    }
    uint64_t deadline = now_ns() + (uint64_t)timeoutMs * 1000000ull;
    for (int round = 0;; round++) {
      for (;;) {
        int waiting = 0;
        for (uint64_t i = 0; i < tids.count; i++)
          if (atomic_load(&g_slots[i].state) == 0) waiting = 1;
        if (!waiting || now_ns() > deadline) break;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
      }
      // A thread that another one started before it parked was in no list: neither parked
      // nor scanned, its stack and TLS (a Dispatch worker's cache of continuations) would
      // read as no root at all. List again until no new thread appears.
      if (round >= 8 || now_ns() > deadline) break;
      Vec again = {0};
      if (list_threads(&again, (int32_t)syscall(SYS_gettid)) != 0) break;
      uint64_t added = 0;
      for (uint64_t j = 0; j < again.count; j++) {
        int32_t t = ((int32_t *)again.data)[j];
        int known = 0;
        for (uint64_t i = 0; i < tids.count && !known; i++) known = ((int32_t *)tids.data)[i] == t;
        if (known || tids.count >= slotCapacity) continue;
        if (vec_push(&tids, &t) != 0) break;
        uint64_t i = tids.count - 1;
        atomic_store(&g_slots[i].tid, t);
        atomic_store(&g_slotCount, tids.count);
        if (syscall(SYS_tgkill, pid, t, sig) != 0) atomic_store(&g_slots[i].state, 3);
        added++;
      }
      vec_free(&again);
      if (added == 0) break;
    }
  }
  // The world is stopped (as far as it parks): no malloc from here to the release.
  if (read_maps(&maps) != 0) {
    status = errno ? errno : EIO;
    result->call = "read /proc/self/maps";
  }
  if (status == 0 && options && options->freedSinceListing) {
    const uint64_t *freed = NULL;
    uint64_t frees = 0, logged = options->freedSinceListing(&freed, &frees);
    for (uint64_t i = 0; freed && i < logged; i++) {
      if (freed[i] - ix.minStart >= ix.maxEnd - ix.minStart) continue;  // no block there
      int64_t b = index_find(&ix, freed[i]);
      if (b >= 0 && ix.blocks[b].start == freed[i] && !(sc.marks[b] & CPerfHeapScan_MarkFreed)) {
        sc.marks[b] |= CPerfHeapScan_MarkFreed;
        result->freedBlocks++;
      }
    }
    result->freesNotLogged = frees > logged ? frees - logged : 0;
  }
  if (status == 0) {
    classify_blocks(&sc, &maps);
    Range *seg = segments.data;
    for (uint64_t i = 0; i < segments.count; i++) {
      // Only what is readable now (a segment may be partly unmapped or PROT_NONE).
      for (uint64_t a = seg[i].start; a < seg[i].end;) {
        const Mapping *m = find_mapping(&maps, a);
        if (!m) {
          a = (a + 4096) & ~4095ull;
          continue;
        }
        uint64_t end = m->end < seg[i].end ? m->end : seg[i].end;
        if (m->readable) {
          scan_root_range(&sc, a, end, CPerfHeapScan_MarkGlobalRoot, seg[i].startsOnly);
          result->rootBytes += end - a;
        }
        a = end;
      }
    }
    if (scanThreads) {
      int32_t *tid = tids.data;
      for (uint64_t i = 0; i < tids.count; i++) {
        Slot *s = &g_slots[i];
        int32_t state = atomic_load(&s->state);
        if (state == 3) continue;
        uint64_t sp, stackPointer = 0;
        int skipStack = skipCallerStack && tid[i] == callerTid;
        if (skipStack) {
          if (state == 1) result->threadCount++;
        } else if (state == 1) {
          scan_words(&sc, s->regs, NGREG, CPerfHeapScan_MarkStackRoot, 0, NULL, 0);
          // The 128 bytes below the stack pointer (the red zone) hold a leaf function's
          // locals, but only while that function runs: a thread blocked in a system call
          // (an idle Dispatch worker, any waiting thread) has there whatever the frames it
          // returned from left, such as the last object a finished block allocated. Scanned,
          // such a word kept a leaked cycle made on a worker reachable in about 1 run of 10.
          stackPointer = s->rsp;
          sp = s->inSyscall ? s->rsp : s->rsp - 128;
          result->threadCount++;
        } else {
          // Did not park (signal blocked?): its stack is scanned from the stack pointer
          // of the system call it is blocked in, if any, else not at all.
          sp = stackPointer = blocked_thread_sp(tid[i]);
          if (sp == 0) {
            result->unscannedThreads++;
            continue;
          }
          result->blockedThreads++;  // in a system call: no live red zone (see above)
        }
        const Mapping *m = NULL;
        if (!skipStack) {
          m = find_mapping(&maps, stackPointer);
          if (!m || !m->readable) continue;
          if (sp < m->start) sp = m->start;
          scan_root_range(&sc, sp, m->end, CPerfHeapScan_MarkStackRoot, 0);
          result->rootBytes += m->end - sp;
        } else {
          m = find_mapping(&maps, s->tp);  // its TLS lies on its stack unless it is the main thread
          if (m && m->readable) {
            // A thread started on a stack of its own has its TCB at the very top of it, and
            // its first frames right below its TLS, closer than glibc's static TLS size
            // (measured: 8 KiB of it, and the frames began 7.9 KiB below the TCB). Those
            // frames are the caller's, skipped: a clean-stack thread says where they end.
            uint64_t from = s->tp - m->start > tlsBelow ? s->tp - tlsBelow : m->start;
            if (callerFramesTop > from && callerFramesTop <= s->tp) from = callerFramesTop;
            uint64_t to = m->end - s->tp > tlsAbove ? s->tp + tlsAbove : m->end;
            scan_root_range(&sc, from, to, CPerfHeapScan_MarkStackRoot, 0);
            result->rootBytes += to - from;
          }
          continue;
        }
        // The main thread's TCB and static TLS are not on its stack (ld.so allocates them):
        // its pthread_setspecific values and TLS variables are roots too.
        const Mapping *t = state == 1 ? find_mapping(&maps, s->tp) : NULL;
        if (t && t != m && t->readable) {
          uint64_t from = s->tp - t->start > tlsBelow ? s->tp - tlsBelow : t->start;
          uint64_t to = t->end - s->tp > tlsAbove ? s->tp + tlsAbove : t->end;
          scan_root_range(&sc, from, to, CPerfHeapScan_MarkStackRoot, 0);
          result->rootBytes += to - from;
        }
      }
    }
    scan_blocks(&sc);
    for (uint64_t i = 0; i < count; i++)
      if (!(sc.marks[i] & CPerfHeapScan_MarkUnreadable)) result->scannedBytes += blocks[i].size;
    if (sc.failed) {
      status = ENOMEM;
      result->call = "mremap (edges)";
    }
  }

done:
  if (installed) {
    atomic_store(&g_release, 1);
    syscall(SYS_futex, &g_release, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    // Wait until every parked thread has left the handler before unmapping its slot.
    for (uint64_t i = 0; i < tids.count; i++) {
      int32_t state = atomic_load(&g_slots[i].state);
      if (state == 0) restore = 0;  // may still arrive: keep the handler (it returns at once)
      while (state == 1) {
        sched_yield();
        state = atomic_load(&g_slots[i].state);
      }
    }
    atomic_store(&g_active, 0);
    atomic_store(&g_slotCount, 0);
    if (restore) sigaction(sig, &g_previous, NULL);
  }
  result->extraBytes = round_page(count) + ix.tableBytes + ix.largeBytes + slotBytes +
                       round_page(sc.edges.capacity * sizeof(CPerfHeapScan_Edge)) +
                       round_page(maps.capacity * sizeof(Mapping));
  if (g_slots && restore) {
    munmap(g_slots, slotBytes);
    g_slots = NULL;
  }
  vec_free(&maps);
  vec_free(&segments);
  vec_free(&tids);
  index_free(&ix);
  result->staleWords = sc.staleWords;
  result->layoutWords = sc.layoutWords;
  result->edges = sc.edges.data;
  result->edgeCount = sc.edges.count;
  result->edgeMappedBytes = sc.edges.data ? round_page(sc.edges.capacity * sizeof(CPerfHeapScan_Edge)) : 0;
  result->error = status;
  return status;
}

// ---------------------------------------------------------------- snapshot

static void sort_pairs(uint64_t *pairs, uint64_t n) {
  // Heapsort by address: no allocation (qsort may call malloc).
  for (uint64_t start = n / 2; start-- > 0;) {
    for (uint64_t root = start;;) {
      uint64_t child = 2 * root + 1;
      if (child >= n) break;
      if (child + 1 < n && pairs[2 * (child + 1)] > pairs[2 * child]) child++;
      if (pairs[2 * root] >= pairs[2 * child]) break;
      uint64_t a = pairs[2 * root], b = pairs[2 * root + 1];
      pairs[2 * root] = pairs[2 * child];
      pairs[2 * root + 1] = pairs[2 * child + 1];
      pairs[2 * child] = a;
      pairs[2 * child + 1] = b;
      root = child;
    }
  }
  for (uint64_t end = n; end-- > 1;) {
    uint64_t a = pairs[0], b = pairs[1];
    pairs[0] = pairs[2 * end];
    pairs[1] = pairs[2 * end + 1];
    pairs[2 * end] = a;
    pairs[2 * end + 1] = b;
    for (uint64_t root = 0;;) {
      uint64_t child = 2 * root + 1;
      if (child >= end) break;
      if (child + 1 < end && pairs[2 * (child + 1)] > pairs[2 * child]) child++;
      if (pairs[2 * root] >= pairs[2 * child]) break;
      a = pairs[2 * root];
      b = pairs[2 * root + 1];
      pairs[2 * root] = pairs[2 * child];
      pairs[2 * root + 1] = pairs[2 * child + 1];
      pairs[2 * child] = a;
      pairs[2 * child + 1] = b;
      root = child;
    }
  }
}

static void sort_words(uint64_t *a, uint64_t n) {
  // Heapsort: no allocation.
  for (uint64_t start = n / 2; start-- > 0;) {
    for (uint64_t root = start;;) {
      uint64_t child = 2 * root + 1;
      if (child >= n) break;
      if (child + 1 < n && a[child + 1] > a[child]) child++;
      if (a[root] >= a[child]) break;
      uint64_t t = a[root]; a[root] = a[child]; a[child] = t;
      root = child;
    }
  }
  for (uint64_t end = n; end-- > 1;) {
    uint64_t t = a[0]; a[0] = a[end]; a[end] = t;
    for (uint64_t root = 0;;) {
      uint64_t child = 2 * root + 1;
      if (child >= end) break;
      if (child + 1 < end && a[child + 1] > a[child]) child++;
      if (a[root] >= a[child]) break;
      t = a[root]; a[root] = a[child]; a[child] = t;
      root = child;
    }
  }
}

static int push_if_dangling(Vec *out, const Vec *maps, const Index *ix, uint64_t word) {
  uint64_t v = word & POINTER_MASK;
  if (v < 4096) return 0;
  const Mapping *m = find_mapping(maps, v);
  if (!m || !m->anonymous || !m->writable) return 0;
  if (v - ix->minStart < ix->maxEnd - ix->minStart && index_find(ix, v) >= 0) return 0;
  return vec_push(out, &v);
}

/// The values that named heap memory no live block held when the snapshot was taken:
/// dangling pointers of the blocks (their words, as snapshotted) and of the writable image
/// segments. Sorted, unique, into out->dangling.
static int32_t collect_dangling(const uint64_t *words, uint64_t wordCount, const Index *ix,
                                CPerfHeapScan_Snapshot *out) {
  Vec maps = {0}, segments = {.elementSize = sizeof(Range)}, values = {.elementSize = sizeof(uint64_t)};
  int32_t status = 0;
  if (read_maps(&maps) != 0) {
    status = errno ? errno : EIO;
    goto done;
  }
  for (uint64_t w = 0; w < wordCount && status == 0; w++) {
    if (words[w] && push_if_dangling(&values, &maps, ix, words[w]) != 0) status = ENOMEM;
  }
  dl_iterate_phdr(collect_segment, &segments);
  const Range *seg = segments.data;
  for (uint64_t i = 0; i < segments.count && status == 0; i++) {
    // malloc's bins and caches name free memory by design: not dangling references.
    if (seg[i].startsOnly) continue;
    for (uint64_t a = seg[i].start & ~7ull; a + 8 <= seg[i].end && status == 0;) {
      const Mapping *m = find_mapping(&maps, a);
      if (!m || !m->readable) {
        a = (a + 4096) & ~4095ull;
        continue;
      }
      uint64_t end = m->end < seg[i].end ? m->end : seg[i].end;
      for (; a + 8 <= end; a += 8) {
        uint64_t v = *(const volatile uint64_t *)a;
        if (v && push_if_dangling(&values, &maps, ix, v) != 0) {
          status = ENOMEM;
          break;
        }
      }
      a = end;
    }
  }
  if (status == 0 && values.count) {
    uint64_t *v = values.data, n = 0;
    sort_words(v, values.count);
    for (uint64_t i = 0; i < values.count; i++) {
      if (n == 0 || v[n - 1] != v[i]) v[n++] = v[i];
    }
    out->dangling = v;
    out->danglingCount = n;
    out->danglingBytes = round_page(values.capacity * sizeof(uint64_t));
    values.data = NULL;
  }
done:
  vec_free(&maps);
  vec_free(&segments);
  vec_free(&values);
  return status;
}

int32_t CPerfHeapScan_takeSnapshot(uint64_t (*liveBlocks)(uint64_t *pairs, uint64_t capacity),
                                   CPerfHeapScan_Snapshot *out) {
  memset(out, 0, sizeof *out);
  uint64_t *pairs = NULL, pairBytes = 0, n = 0;
  for (int attempt = 0; attempt < 4; attempt++) {
    uint64_t want = liveBlocks(NULL, 0);
    uint64_t capacity = want + want / 4 + 1024;
    pairBytes = round_page(capacity * 16);
    pairs = map_bytes(pairBytes);
    if (!pairs) return errno;
    n = liveBlocks(pairs, capacity);
    if (n <= capacity) break;
    munmap(pairs, pairBytes);
    pairs = NULL;
  }
  if (!pairs) return EAGAIN;
  sort_pairs(pairs, n);

  // The live blocks, for "did this word point into a block then?".
  uint64_t blockBytes = round_page((n ? n : 1) * sizeof(CPerfHeapScan_Block));
  CPerfHeapScan_Block *blocks = map_bytes(blockBytes);
  Vec ranges = {.elementSize = sizeof(CPerfHeapScan_SnapshotRange)};
  Index ix = {0};
  int32_t status = 0;
  if (!blocks) {
    status = errno;
    goto done;
  }
  uint64_t kept = 0, lastEnd = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t start = pairs[2 * i], size = pairs[2 * i + 1];
    if (start < lastEnd) continue;  // overlapping (should not happen): keep the first
    blocks[kept].start = start;
    blocks[kept].size = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
    blocks[kept].flags = 0;
    lastEnd = start + blocks[kept].size;
    kept++;
  }
  if (index_build(&ix, blocks, kept) != 0) {
    status = errno ? errno : ENOMEM;
    goto done;
  }
  // What is snapshotted: every live block.
  uint64_t totalWords = 0;
  for (uint64_t i = 0; i < kept; i++) {
    CPerfHeapScan_SnapshotRange r = {blocks[i].start, blocks[i].start + (blocks[i].size & ~7u), totalWords};
    if (r.end <= r.start) continue;
    if (vec_push(&ranges, &r) != 0) {
      status = ENOMEM;
      goto done;
    }
    totalWords += (r.end - r.start) / 8;
  }
  CPerfHeapScan_SnapshotRange *rs = ranges.data;  // sorted: the blocks are
  uint64_t wordBytes = round_page((totalWords ? totalWords : 1) * 8);
  uint64_t *words = map_bytes(wordBytes);
  if (!words) {
    status = errno;
    goto done;
  }
  // process_vm_readv: a block freed and unmapped meanwhile reads as a failure, not a fault.
  pid_t pid = getpid();
  for (uint64_t i = 0; i < ranges.count; i++) {
    uint64_t *dest = words + rs[i].firstWord;
    uint64_t bytes = rs[i].end - rs[i].start;
    struct iovec local = {dest, bytes}, remote = {(void *)(uintptr_t)rs[i].start, bytes};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0) got = 0;
    if ((uint64_t)got < bytes) memset((char *)dest + got, 0, bytes - (uint64_t)got);
    // A word that points into a live block may be a reference that is later rewritten
    // with the same address (the block freed, a new one allocated there): not trusted.
    for (uint64_t w = 0; w < bytes / 8; w++) {
      uint64_t v = dest[w] & POINTER_MASK;
      if (v - ix.minStart < ix.maxEnd - ix.minStart && index_find(&ix, v) >= 0) dest[w] = 0;
    }
  }
  status = collect_dangling(words, totalWords, &ix, out);
  if (status != 0) goto done;
  out->ranges = ranges.data;
  out->rangeCount = ranges.count;
  out->rangeBytes = round_page(ranges.capacity * sizeof(CPerfHeapScan_SnapshotRange));
  out->words = words;
  out->wordBytes = wordBytes;
  ranges.data = NULL;

done:
  index_free(&ix);
  vec_free(&ranges);
  if (blocks) munmap(blocks, blockBytes);
  munmap(pairs, pairBytes);
  return status;
}

void CPerfHeapScan_freeSnapshot(CPerfHeapScan_Snapshot *snapshot) {
  if (snapshot->ranges) munmap(snapshot->ranges, snapshot->rangeBytes);
  if (snapshot->words) munmap(snapshot->words, snapshot->wordBytes);
  if (snapshot->dangling) munmap(snapshot->dangling, snapshot->danglingBytes);
  memset(snapshot, 0, sizeof *snapshot);
}

__attribute__((noinline)) void CPerfHeapScan_scrubStack(uint32_t bytes) {
  if (bytes > 262144) bytes = 262144;
  volatile char *buf = __builtin_alloca(bytes);
  memset((char *)buf, 0, bytes);
  __asm__ volatile("" ::"r"(buf) : "memory");
}

typedef struct {
  const CPerfHeapScan_Block *blocks;
  uint64_t count;
  const CPerfHeapScan_Options *options;
  CPerfHeapScan_Result *result;
  int32_t callerTid;
  int32_t status;
  uint64_t callerFramesTop;  // the caller's first frame ends here (0: unknown)
} ScanJob;

// Set by a clean-stack thread (CPerfHeapScan_runOnCleanStack): where its frames begin.
static __thread uint64_t t_framesTop;

static void *scan_thread(void *argument) {
  ScanJob *job = argument;
  job->status = scan_impl(job->blocks, job->count, job->options, job->callerTid, job->callerFramesTop, job->result);
  return NULL;
}

int32_t CPerfHeapScan_scan(const CPerfHeapScan_Block *blocks, uint64_t count, const CPerfHeapScan_Options *options,
                           CPerfHeapScan_Result *result) {
  memset(result, 0, sizeof *result);
  // The calling thread is scanned like every other one (parked by the signal while it
  // waits for the scanner thread, or from its system call's stack pointer): its
  // callee-saved registers go to this frame first, and the stack below is scrubbed so
  // stale slots of functions that already returned do not look like roots.
  ucontext_t registers;
  memset(&registers, 0, sizeof registers);
  getcontext(&registers);
  CPerfHeapScan_scrubStack(32768);
  // The scan runs on its own thread, whose stack is not a root: nothing the scanner
  // computes can keep a block alive.
  ScanJob job = {blocks, count, options, result, (int32_t)syscall(SYS_gettid), 0, t_framesTop};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t thread;
  int error = pthread_create(&thread, &attr, scan_thread, &job);
  pthread_attr_destroy(&attr);
  if (error != 0) {
    result->error = error;
    result->call = "pthread_create";
    return error;
  }
  pthread_join(thread, NULL);
  __asm__ volatile("" ::"r"(&registers) : "memory");
  return job.status;
}

void CPerfHeapScan_freeResult(CPerfHeapScan_Result *result) {
  if (result->edges) munmap(result->edges, result->edgeMappedBytes);
  if (result->marks) munmap(result->marks, round_page(result->blockCount));
  if (result->rootSources) munmap(result->rootSources, round_page(result->blockCount * sizeof(uint64_t)));
  result->rootSources = NULL;
  result->edges = NULL;
  result->marks = NULL;
}

typedef struct {
  void (*body)(void *);
  void *context;
} CleanJob;

static void *clean_thread(void *argument) {
  CleanJob *job = argument;
  // This frame's CFA: above it only glibc's thread start, then the TLS.
  t_framesTop = (uint64_t)(uintptr_t)__builtin_frame_address(0) + 16;
  job->body(job->context);
  return NULL;
}

int32_t CPerfHeapScan_runOnCleanStack(void (*body)(void *), void *context, uint64_t stackBytes) {
  if (stackBytes < (1u << 20)) stackBytes = 1u << 20;
  stackBytes = round_page(stackBytes);
  // A fresh anonymous mapping is zero-filled (glibc's cached thread stacks are not).
  void *stack = map_bytes(stackBytes);
  if (!stack) return errno;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstack(&attr, stack, stackBytes);
  CleanJob job = {body, context};
  pthread_t thread;
  int error = pthread_create(&thread, &attr, clean_thread, &job);
  pthread_attr_destroy(&attr);
  if (error == 0) pthread_join(thread, NULL);
  munmap(stack, stackBytes);
  return error;
}
