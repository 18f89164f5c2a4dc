// Primitives other C targets have their own copies of (see sampler_support.h).
#include "sampler_support.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

char *read_self_maps(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (!buf) break;
    if (len == cap) {
      char *grown = realloc(buf, cap * 2 + 1);
      if (!grown) { free(buf); buf = NULL; break; }
      buf = grown;
      cap *= 2;
    }
    ssize_t got = read(fd, buf + len, cap - len);
    if (got <= 0) break;
    len += (size_t)got;
  }
  close(fd);
  if (!buf) return NULL;
  buf[len] = 0;
  return buf;
}
