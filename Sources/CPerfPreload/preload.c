// The preloaded recorder's process hooks. The recording itself is Swift
// (PerfHarnessPreload), reached through the three cperf_preload_* functions it exports.
//
// Marks that do not come from the program's own call are made on one thread of ours, the
// marker, which waits on a pipe: a signal handler may only write a byte, and the periodic
// mark is the pipe's poll timing out.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "CPerfCrash.h"
#include "CPerfPreload.h"
#include "CPerfSampler.h"

// Implemented in Swift (PerfHarnessPreload). settings reads the harness's settings and
// returns the mark period in seconds (0: none), or a negative value when this process is
// not recorded; start starts the instruments (0, or -1 when they could not start).
extern double cperf_preload_settings(void);
extern int32_t cperf_preload_start(void);
extern void cperf_preload_mark(const char *label);
extern void cperf_preload_finish(int endingSignal);
// The partial report of a process that a fatal signal is ending, from the crash reporter.
extern void cperf_preload_crashed(int32_t sig, int32_t tid);

// How long a thread that took a fatal signal waits for the partial report.
enum { CRASH_REPORT_WAIT_MS = 10000 };
// How long _exit waits for the marker thread to write the report (a leak scan and
// symbolization of a large program take seconds).
enum { EXIT_REPORT_WAIT_MS = 30000 };

enum { MARK_SIGNAL = 'U', STOP = 'Q', FINISH = 'F' };

static atomic_int g_stopping;
// Set by the marker once it has written the report _exit asked for (or found none to write).
static atomic_int g_finished;
static struct timespec g_start;

static double secondsSince(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static atomic_int g_recording;
static pid_t g_pid;
static int g_pipe[2] = {-1, -1};
static pthread_t g_marker;
static atomic_int g_markerTid;
static pthread_t g_reporter;
static atomic_int g_reporterTid;
static int g_crashArmed;
// The SIGINT or SIGTERM that ended the program through our handler, for its report.
static atomic_int g_endingSignal;
static double g_markEverySeconds;

static void wake(char byte) {
  int saved = errno;
  // A full pipe already holds a wake-up.
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

static void onMarkSignal(int sig) {
  (void)sig;
  wake(MARK_SIGNAL);
}

// A program stopped with Ctrl-C or kill would die without running its destructors, and
// its recording with it: ended through exit() instead, on the marker thread.
static void onEndSignal(int sig) { wake((char)sig); }

// Installs `handler` for `sig` only where the program left the default action: a program
// that handles or ignores the signal keeps it.
static void installIfDefault(int sig, void (*handler)(int)) {
  struct sigaction current;
  if (sigaction(sig, NULL, &current) != 0 || current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) return;
  struct sigaction ours;
  memset(&ours, 0, sizeof ours);
  ours.sa_handler = handler;
  ours.sa_flags = SA_RESTART;
  sigemptyset(&ours.sa_mask);
  sigaction(sig, &ours, NULL);
}

static void writeReport(int endingSignal);

static void *markerMain(void *unused) {
  (void)unused;
  prctl(PR_SET_NAME, "perfharness-mark", 0, 0, 0);
  atomic_store(&g_markerTid, (int)syscall(SYS_gettid));
  int timeout = g_markEverySeconds > 0 ? (int)(g_markEverySeconds * 1000) : -1;
  struct pollfd fd = {.fd = g_pipe[0], .events = POLLIN};
  for (;;) {
    int ready = poll(&fd, 1, timeout);
    if (ready < 0) {
      // The leak scan parks this thread with a signal too.
      if (errno == EINTR) continue;
      return NULL;
    }
    if (atomic_load(&g_stopping)) return NULL;
    if (!atomic_load(&g_recording)) continue;
    if (ready == 0) {
      char label[48];
      snprintf(label, sizeof label, "at %.1f s", secondsSince(&g_start));
      cperf_preload_mark(label);
      continue;
    }
    char byte;
    if (read(g_pipe[0], &byte, 1) != 1) continue;
    if (byte == FINISH) {
      if (atomic_exchange(&g_recording, 0)) writeReport(0);
      atomic_store(&g_finished, 1);
      return NULL;
    }
    if (byte == MARK_SIGNAL) {
      cperf_preload_mark("SIGUSR2");
    } else if (byte == SIGINT || byte == SIGTERM) {
      atomic_store(&g_endingSignal, byte);
      exit(128 + byte);
    }
  }
}

// A forked child without exec holds a copy of the parent's recording, which is not its
// own: it writes no report. One that execs loads the recorder afresh.
static void forkedChild(void) { atomic_store(&g_recording, 0); }

typedef int (*Create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

// Starts one of the harness's threads: through libc's own pthread_create (not the
// sampler's interposer, which would arm it at birth), with every signal blocked (no
// process-directed signal of the program's lands on it), and known to the sampler, as
// ignored, before the recording starts. Its first act stores its tid in *tid.
static int startHarnessThread(pthread_t *thread, void *(*body)(void *), atomic_int *tid) {
  Create create = (Create)dlsym(RTLD_NEXT, "pthread_create");
  if (!create) return -1;
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  int rc = create(thread, NULL, body, NULL);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  if (rc != 0) return -1;
  while (atomic_load(tid) == 0) sched_yield();
  CPerfSampler_ignoreThread(atomic_load(tid));
  return 0;
}

static void stopMarker(void) {
  atomic_store(&g_stopping, 1);
  wake(STOP);
  pthread_join(g_marker, NULL);
}

static void *reporterMain(void *unused) {
  (void)unused;
  atomic_store(&g_reporterTid, (int)syscall(SYS_gettid));
  int32_t tid = 0;
  int32_t sig = CPerfCrash_waitForSignal(&tid);
  if (sig == 0) return NULL;
  cperf_preload_crashed(sig, tid);
  CPerfCrash_reportDone();
  return NULL;
}

// A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT) parks the thread that
// took it until the reporter has written the partial report; the signal then goes on to
// its previous owner (the Swift runtime's backtracer, or the default action).
static void armCrashReporter(void) {
  if (CPerfCrash_arm(0, CRASH_REPORT_WAIT_MS, 0) != 0) return;
  if (startHarnessThread(&g_reporter, reporterMain, &g_reporterTid) != 0) {
    CPerfCrash_disarm();
    CPerfCrash_release();
    return;
  }
  g_crashArmed = 1;
}

static void disarmCrashReporter(void) {
  if (!g_crashArmed) return;
  g_crashArmed = 0;
  int signalled = CPerfCrash_disarm();
  pthread_join(g_reporter, NULL);
  if (!signalled) CPerfCrash_release();
}

__attribute__((constructor)) static void startRecording(void) {
  if (!getenv("PERFHARNESS_RECORD")) return;
  double markEvery = cperf_preload_settings();
  if (markEvery < 0) return;
  g_markEverySeconds = markEvery;
  // Non-blocking: a handler never waits on a full pipe, and the marker blocks in poll.
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0 || startHarnessThread(&g_marker, markerMain, &g_markerTid) != 0) {
    fprintf(stderr, "perfharness: cannot start the recorder's marker thread: %s\n", strerror(errno));
    return;
  }
  clock_gettime(CLOCK_MONOTONIC, &g_start);
  g_pid = getpid();
  if (cperf_preload_start() != 0) {
    stopMarker();
    return;
  }
  atomic_store(&g_recording, 1);
  armCrashReporter();
  pthread_atfork(NULL, NULL, forkedChild);
  installIfDefault(SIGUSR2, onMarkSignal);
  installIfDefault(SIGINT, onEndSignal);
  installIfDefault(SIGTERM, onEndSignal);
}

// Stops the marker (unless this is it) and the crash reporter, then writes the report.
static void writeReport(int endingSignal) {
  if (!pthread_equal(pthread_self(), g_marker)) stopMarker();
  disarmCrashReporter();
  cperf_preload_finish(endingSignal);
}

__attribute__((destructor)) static void finishRecording(void) {
  if (!atomic_exchange(&g_recording, 0) || getpid() != g_pid) return;
  writeReport(atomic_load(&g_endingSignal));
}

// A program that ends with _exit() (dash does, and a server's fast shutdown may) skips the
// destructor. _exit is async-signal-safe and programs call it from signal handlers, where
// building the report here could wait forever on a lock the interrupted code holds (malloc's):
// the marker thread writes it instead while this waits, with async-signal-safe calls only and
// for at most EXIT_REPORT_WAIT_MS. glibc's exit() reaches the kernel through its own alias,
// not this symbol, after the destructor has run.
void _exit(int status) {
  if (atomic_load(&g_recording) && getpid() == g_pid && !pthread_equal(pthread_self(), g_marker)) {
    wake(FINISH);
    struct timespec pause = {0, 1000000};
    for (int waited = 0; waited < EXIT_REPORT_WAIT_MS && !atomic_load(&g_finished); waited++) {
      nanosleep(&pause, NULL);
    }
  }
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

void perfharness_mark(const char *label) {
  if (atomic_load(&g_recording) && getpid() == g_pid) cperf_preload_mark(label);
}
