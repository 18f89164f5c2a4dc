// One reader of /proc/self/maps for every recorder (see CPerfSupport.h): raw system
// calls and a buffer on the caller's stack, because its callers include the malloc hooks
// (which must not re-enter malloc) and threads parked by the leak scan (which may hold
// stdio's or malloc's locks).
#include "CPerfSupport.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

bool CPerfSupport_mapsOpen(CPerfSupport_MapsReader *reader) {
  reader->start = reader->end = 0;
  reader->skipping = false;
  reader->fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  return reader->fd >= 0;
}

void CPerfSupport_mapsClose(CPerfSupport_MapsReader *reader) {
  if (reader->fd >= 0) syscall(SYS_close, reader->fd);
  reader->fd = -1;
}

static uint64_t parseHex(const char **cursor) {
  const char *p = *cursor;
  uint64_t value = 0;
  for (;; p++) {
    char c = *p;
    if (c >= '0' && c <= '9')
      value = value * 16 + (uint64_t)(c - '0');
    else if ((c | 32) >= 'a' && (c | 32) <= 'f')
      value = value * 16 + (uint64_t)((c | 32) - 'a' + 10);
    else
      break;
  }
  *cursor = p;
  return value;
}

static const char *skipField(const char *p) {
  while (*p && *p != ' ') p++;
  while (*p == ' ') p++;
  return p;
}

// "start-end perms offset dev inode   path"
static void parseLine(const char *line, CPerfSupport_Mapping *m) {
  const char *p = line;
  m->start = parseHex(&p);
  if (*p == '-') p++;
  m->end = parseHex(&p);
  while (*p == ' ') p++;
  m->readable = p[0] == 'r';
  m->writable = p[0] && p[1] == 'w';
  m->executable = p[0] && p[1] && p[2] == 'x';
  p = skipField(p);
  m->offset = parseHex(&p);
  while (*p == ' ') p++;
  p = skipField(p);  // dev
  uint64_t inode = 0;
  while (*p >= '0' && *p <= '9') inode = inode * 10 + (uint64_t)(*p++ - '0');
  m->inode = inode;
  while (*p == ' ') p++;
  m->path = p;
}

// Moves the unread bytes to the front and reads more after them; false at the end.
static bool refill(CPerfSupport_MapsReader *r) {
  if (r->start > 0) {
    memmove(r->buffer, r->buffer + r->start, r->end - r->start);
    r->end -= r->start;
    r->start = 0;
  }
  for (;;) {
    long got = syscall(SYS_read, r->fd, r->buffer + r->end, sizeof r->buffer - 1 - r->end);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    r->end += (uint32_t)got;
    return true;
  }
}

bool CPerfSupport_mapsNext(CPerfSupport_MapsReader *r, CPerfSupport_Mapping *mapping) {
  if (r->fd < 0) return false;
  for (;;) {
    char *line = r->buffer + r->start;
    char *newline = memchr(line, '\n', r->end - r->start);
    if (newline) {
      *newline = 0;
      r->start = (uint32_t)(newline - r->buffer) + 1;
      if (r->skipping) {
        r->skipping = false;
        continue;
      }
      parseLine(line, mapping);
      return true;
    }
    if (r->start == 0 && r->end >= sizeof r->buffer - 1) {
      // A line longer than the buffer: report its start once, drop the rest of it.
      r->buffer[r->end] = 0;
      bool reported = r->skipping;
      r->start = r->end = 0;
      r->skipping = true;
      if (reported) continue;
      parseLine(r->buffer, mapping);
      return true;
    }
    if (!refill(r)) {
      if (r->end > r->start && !r->skipping) {  // a last line without a newline
        r->buffer[r->end] = 0;
        line = r->buffer + r->start;
        r->start = r->end;
        parseLine(line, mapping);
        return true;
      }
      return false;
    }
  }
}

bool CPerfSupport_isInDynamicLinker(uintptr_t address) {
  uintptr_t base = (uintptr_t)getauxval(AT_BASE);
  Dl_info info;
  return base != 0 && dladdr((const void *)address, &info) != 0 && (uintptr_t)info.dli_fbase == base;
}
