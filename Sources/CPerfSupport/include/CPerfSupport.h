#ifndef CPERFSUPPORT_H
#define CPERFSUPPORT_H

// The floor every recorder stands on: one clock, one error type, one reader of
// /proc/self/maps, one way to hand a signal on to the handler installed before ours, and one
// way to start a helper thread no signal reaches. All but the thread start are
// async-signal-safe and allocate nothing, because the sampler's handler, the malloc hooks
// and the leak scan's parked threads call them.
// Hot helpers (a monotonic clock read, a spinlock) are inline in CPerfSupportInline.h.
// (Swift imports only what it can of them; they are meant for C.)

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// MARK: - Clock (clock.c)

/// Whether the TSC runs at a constant rate in every power state (CPUID 0x80000007, EDX
/// bit 8).
bool CPerfSupport_tscIsInvariant(void);

/// Calibrates the TSC against CLOCK_MONOTONIC over two milliseconds (it spins that long):
/// CLOCK_MONOTONIC nanoseconds per TSC tick in 32.32 fixed point, and one moment on both
/// clocks. Returns false if the TSC did not advance.
bool CPerfSupport_calibrate(uint64_t *nsPerTsc32, uint64_t *baseNs, uint64_t *baseTsc);

// MARK: - Errors

/// How a C session reports a failure to Swift: which call failed and with what errno.
typedef struct CPerfSupport_Error {
  int32_t code;      // the module's own error code enum
  int32_t sysErrno;  // errno of the failing call, 0 if none
  const char *call;  // static string: the failing call or the bad parameter
} CPerfSupport_Error;

// MARK: - Memory mappings (maps.c)

/// One line of /proc/self/maps.
typedef struct CPerfSupport_Mapping {
  uint64_t start, end;
  uint64_t offset;
  uint64_t inode;
  bool readable, writable, executable;
  /// The path or bracketed name ("[stack]"), "" when none; NUL-terminated, valid until
  /// the next call to CPerfSupport_mapsNext.
  const char *path;
} CPerfSupport_Mapping;

/// Reads /proc/self/maps line by line with raw system calls: no malloc, no stdio, no
/// locks, so a signal handler or a malloc hook may use it. Lives on the caller's stack.
typedef struct CPerfSupport_MapsReader {
  int fd;
  uint32_t start, end;  // the unread bytes of `buffer`
  bool skipping;        // inside a line longer than the buffer: its tail is dropped
  char buffer[4096];
} CPerfSupport_MapsReader;

/// Opens /proc/self/maps; false (errno set) if it cannot.
bool CPerfSupport_mapsOpen(CPerfSupport_MapsReader *reader);
/// The next mapping, false at the end. A line longer than the buffer keeps its
/// addresses and permissions; its path is cut.
bool CPerfSupport_mapsNext(CPerfSupport_MapsReader *reader, CPerfSupport_Mapping *mapping);
void CPerfSupport_mapsClose(CPerfSupport_MapsReader *reader);

/// Whether `address` lies in the dynamic linker's image (ld.so, loaded at the auxiliary
/// vector's AT_BASE); false in a process without one. Not for a signal handler.
bool CPerfSupport_isInDynamicLinker(uintptr_t address);

// MARK: - Signal chaining (signals.c)

/// Runs the handler `previous` described for a signal that is not ours: its
/// sa_sigaction or sa_handler. SIG_DFL and SIG_IGN are not run (a signal meant for a
/// handler we replaced must not kill the process through its default action).
void CPerfSupport_forwardSignal(const struct sigaction *previous, int sig, siginfo_t *info, void *context);

/// Starts a short-lived helper thread of the harness's with every signal blocked (none of the
/// program's handlers, nor the sampler's or the scan's, runs on it), through `create` (NULL:
/// pthread_create). Returns true if it started. Not for a signal handler: a thread start
/// allocates.
bool CPerfSupport_startQuietThread(int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
                                   pthread_t *thread, void *(*start)(void *), void *argument);

#ifdef __cplusplus
}
#endif

#include "CPerfSupportInline.h"

#endif
