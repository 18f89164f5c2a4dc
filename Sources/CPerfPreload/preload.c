// The preloaded recorder's process hooks. The recording itself is Swift
// (PerfHarnessPreload), reached through the three cperf_preload_* functions it exports.
//
// Marks that do not come from the program's own call are made on one thread of ours, the
// marker, which waits on a pipe: a signal handler may only write a byte, and the periodic
// mark is the pipe's poll timing out.
//
// The marker and the crash reporter start only when they are needed. glibc's malloc runs
// lock-free until a process's first thread, and takes an arena lock on every refill from
// then on: an idle thread of ours made allocation-heavy single-threaded programs 1.14x
// slower (docs/measurements.md). They start at once when glibc is already multi-threaded
// (the Time Profiler's own threads) or with --mark-every, before the program's first
// pthread_create otherwise, and else from the signal that needs them: SIGUSR2, SIGINT,
// SIGTERM, a fatal signal, or _exit.
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
#include <link.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/single_threaded.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "CPerfAlloc.h"
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
// Records nothing, and has the harness exit 1 naming `reason`.
extern void cperf_preload_refuse(const char *reason);
// Fills `path` with the file that names why this process's report was lost; 0, or -1 when
// it does not fit in `capacity` bytes.
extern int32_t cperf_preload_loss_path(char *path, int32_t capacity);
// The partial report of a process that a fatal signal is ending, from the crash reporter.
extern void cperf_preload_crashed(int32_t sig, int32_t tid);
// 1 when the instruments run threads of their own (the Time Profiler's), after settings.
extern int32_t cperf_preload_runs_threads(void);

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

typedef int (*Create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
// libc's own pthread_create, resolved in the constructor: the helpers may start in a
// signal handler, which must not call dlsym.
static Create g_create;
// This library's code (the malloc hooks, the recorder, these handlers).
static uintptr_t g_textStart, g_textEnd;
// The interposed thread start, inside that text: at the bottom of every thread the program
// starts, so no sign that the thread stands inside the recorder.
static uintptr_t g_threadStartStart, g_threadStartEnd;
// The allocator's code (CPerfAlloc_Allocator's text): glibc's malloc entry points, or a
// jemalloc's or tcmalloc's whole library.
static uintptr_t g_mallocStart, g_mallocEnd;

enum { HELPERS_NONE, HELPERS_STARTING, HELPERS_RUNNING, HELPERS_CLOSED };
static atomic_int g_helpers;
// Which of them startHelpers (or armCrashReporter) started; read after g_helpers.
static bool g_markerStarted;
static bool g_reporterStarted;
// A signal that found its thread inside malloc or the recorder tries again from a
// one-shot timer (a kernel timer id; -1: none yet) aimed at that thread.
enum { RETRY_TAG = 0x70686172, RETRY_NS = 1000000 };
static int g_retryTimer = -1;
static pid_t g_retryThread;
static atomic_int g_retryArmed;
// The signals installIfDefault took over.
static sigset_t g_ours;

static void wake(char byte) {
  int saved = errno;
  // A full pipe already holds a wake-up.
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

static bool startHelpers(void);
static bool startHelpersFromSignal(void);

// A start the signal's thread could not make tries again in RETRY_NS, from a timer that
// sends the same signal, tagged, to this thread. Sent to the process, the tagged signal
// and a SIGUSR2 from `kill` are one signal while either is pending (the kernel keeps one
// of each standard signal per queue), and the mark was lost: under load, one run in 50 of
// five marks 100 ms apart, and 6 in 30 with the program on a core shared with three busy
// loops. A thread's own queue is apart from the process's.
static void retryLater(int sig) {
  if (atomic_exchange(&g_retryArmed, 1)) return;
  pid_t thread = (pid_t)syscall(SYS_gettid);
  if (g_retryTimer >= 0 && g_retryThread != thread) {
    syscall(SYS_timer_delete, g_retryTimer);
    g_retryTimer = -1;
  }
  if (g_retryTimer < 0) {
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = sig;
    event.sigev_value.sival_int = RETRY_TAG;
    event._sigev_un._tid = thread;
    int id = -1;
    // The system call itself: glibc's timer_create is not async-signal-safe.
    if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &event, &id) != 0) {
      atomic_store(&g_retryArmed, 0);
      return;
    }
    g_retryTimer = id;
    g_retryThread = thread;
  }
  struct itimerspec once = {.it_value = {0, RETRY_NS}};
  if (syscall(SYS_timer_settime, g_retryTimer, 0, &once, NULL) != 0) atomic_store(&g_retryArmed, 0);
}

// SIGUSR2 marks a generation. A program stopped with Ctrl-C or kill would die without
// running its destructors, and its recording with it: SIGINT and SIGTERM end it through
// exit() instead, on the marker thread.
static void onSignal(int sig, siginfo_t *info, void *context) {
  (void)context;
  int saved = errno;
  if (info->si_code == SI_TIMER && info->si_value.sival_int == RETRY_TAG) {
    atomic_store(&g_retryArmed, 0);
  } else {
    wake(sig == SIGUSR2 ? MARK_SIGNAL : (char)sig);
  }
  if (!startHelpersFromSignal()) {
    retryLater(sig);
  } else if (sig != SIGUSR2 && atomic_load(&g_helpers) == HELPERS_RUNNING && !g_markerStarted) {
    // No marker to end the program: the signal ends it as it would have (startHelpers
    // put the default action back), once this handler returns.
    syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
  }
  errno = saved;
}

// Installs our handler for `sig` only where the program left the default action: a
// program that handles or ignores the signal keeps it.
static void installIfDefault(int sig) {
  struct sigaction current;
  if (sigaction(sig, NULL, &current) != 0 || current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) return;
  struct sigaction ours;
  memset(&ours, 0, sizeof ours);
  ours.sa_sigaction = onSignal;
  ours.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&ours.sa_mask);
  if (sigaction(sig, &ours, NULL) == 0) sigaddset(&g_ours, sig);
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
      syscall(SYS_futex, &g_finished, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
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
// own: it writes no report, and its signals act as they would have (its marks and ends
// would otherwise go down the parent's pipe). One that execs loads the recorder afresh.
static void forkedChild(void) {
  atomic_store(&g_recording, 0);
  const int signals[] = {SIGUSR2, SIGINT, SIGTERM};
  for (int i = 0; i < 3; i++) {
    if (sigismember(&g_ours, signals[i]) == 1) signal(signals[i], SIG_DFL);
  }
}

// Starts one of the harness's threads: through libc's own pthread_create (not the
// sampler's interposer, which would arm it at birth), with every signal blocked (no
// process-directed signal of the program's lands on it), and known to the sampler as
// ignored (with the Time Profiler on, they start before it). Its first act stores its tid
// in *tid.
static int startHarnessThread(pthread_t *thread, void *(*body)(void *), atomic_int *tid) {
  if (!g_create) return -1;
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  // What pthread_create allocates (the thread's TLS vector) is the recorder's, not the
  // program's, now that the helpers may start while it records.
  int32_t ignoring = CPerfAlloc_setIgnoringAllocations(1);
  int rc = g_create(thread, NULL, body, NULL);
  CPerfAlloc_setIgnoringAllocations(ignoring);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  if (rc != 0) return -1;
  while (atomic_load(tid) == 0) sched_yield();
  CPerfSampler_ignoreThread(atomic_load(tid));
  return 0;
}

static void stopMarker(void) {
  if (!g_markerStarted) return;
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

static void say(const char *message) {
  ssize_t ignored = write(STDERR_FILENO, message, strlen(message));
  (void)ignored;
}

// Where reportLost writes, filled in the constructor: a signal handler may need it.
static char g_lossPath[4096];

// Names why this process ends without its report: on stderr, and in the file the harness
// reads into the report it writes in its place. Async-signal-safe.
static void reportLost(const char *reason) {
  say("perfharness: no report: ");
  say(reason);
  say("\n");
  if (!g_lossPath[0]) return;
  int fd = open(g_lossPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t ignored = write(fd, reason, strlen(reason));
  (void)ignored;
  close(fd);
}

static void startReporter(void) {
  g_reporterStarted = startHarnessThread(&g_reporter, reporterMain, &g_reporterTid) == 0;
  if (!g_reporterStarted) say("perfharness: cannot start the crash reporter thread: a crash ends without a report\n");
}

// Starts the marker and, when armed, the crash reporter, once. Returns false when this
// call found them closed (the report is being written) or could not start the marker.
static bool startHelpers(void) {
  int state = HELPERS_NONE;
  if (!atomic_compare_exchange_strong(&g_helpers, &state, HELPERS_STARTING)) return state != HELPERS_CLOSED;
  g_markerStarted = startHarnessThread(&g_marker, markerMain, &g_markerTid) == 0;
  if (!g_markerStarted) {
    say("perfharness: cannot start the recorder's marker thread: no marks from SIGUSR2 or --mark-every, and SIGINT, "
        "SIGTERM and _exit end the program without its report\n");
    // The program's signals end it as they would have.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
  }
  if (g_crashArmed) startReporter();
  atomic_store(&g_helpers, HELPERS_RUNNING);
  return g_markerStarted;
}

// After this no helper starts; a start under way on another thread is waited out.
static void closeHelpers(void) {
  for (;;) {
    int state = atomic_load(&g_helpers);
    if (state == HELPERS_STARTING) {
      sched_yield();
      continue;
    }
    if (state != HELPERS_NONE || atomic_compare_exchange_strong(&g_helpers, &state, HELPERS_CLOSED)) return;
  }
}

// Whether the calling thread's stack, past the frames of this library it runs now (a
// handler's, _exit's) and the signal frame, goes through this library again or through
// the allocator: it was interrupted inside malloc or inside the recorder. Every
// allocation passes the hooks here, but the common free tail-calls the allocator's, so its
// frame is the allocator's alone. A thread start allocates (pthread_create's TLS), and
// glibc's malloc of a single-threaded process takes no lock, so it would run inside the
// interrupted malloc; and the interrupted malloc, having found the process single-threaded,
// would go on without its lock beside the new thread (another allocator's locks, taken
// always, would deadlock). Where libunwind cannot step further the stack counts as
// outside: only the program's own code lacks unwind information, never the allocator's or
// ours.
// libunwind's local steps are async-signal-safe; the sampler's handler takes them too.
static bool interruptedInsideUs(void) {
  unw_context_t context;
  unw_cursor_t cursor;
  if (unw_getcontext(&context) != 0 || unw_init_local(&cursor, &context) != 0) return false;
  bool ownTop = true;
  for (int depth = 0; depth < 4096; depth++) {
    unw_word_t ip = 0;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0) return false;
    // exit() from a thread the program started saw the thread start below the program's
    // frames and counted it: the report was lost as if exit had interrupted malloc.
    bool ours = ip >= g_textStart && ip < g_textEnd && !(ip >= g_threadStartStart && ip < g_threadStartEnd);
    if (ours && !ownTop) return true;
    if (ip >= g_mallocStart && ip < g_mallocEnd) return true;
    if (!ours) ownTop = false;
    if (unw_step(&cursor) <= 0) return false;
  }
  return false;
}

// In a handler or _exit: whether the helpers run (or are starting) after this call. False
// when the calling thread stands inside malloc or the recorder (start them later).
static bool startHelpersFromSignal(void) {
  if (atomic_load(&g_helpers) != HELPERS_NONE) return true;
  if (interruptedInsideUs()) return false;
  startHelpers();
  return true;
}

// Before the program's first thread of its own (the sampler's pthread_create interposer).
static void beforeProgramThread(void) {
  if (atomic_load(&g_helpers) == HELPERS_NONE) startHelpers();
}

// Before the program has a thread, the partial report comes from a copy of the process: a
// fork without atfork handlers, made in the handler. The signalled thread may stand inside
// malloc, and a thread started here would allocate there; the copy takes that state with
// it, and if it cannot finish (a lock the crash left held) only the copy waits, for at
// most CRASH_REPORT_WAIT_MS, and is killed.
static int32_t g_copySignal, g_copyTid;

static void reportInCopy(void) { cperf_preload_crashed(g_copySignal, g_copyTid); }

static int32_t reportFromCopy(int32_t sig, int32_t tid) {
  g_copySignal = sig;
  g_copyTid = tid;
  // No exit signal: the program's SIGCHLD handler never hears of the copy.
  long child = syscall(SYS_clone, 0L, NULL, NULL, NULL, NULL);
  if (child < 0) return -1;
  if (child == 0) {
    // On a stack of its own: the handler may run on the alternate signal stack, tens of
    // kilobytes, which building the report overran.
    enum { COPY_STACK_BYTES = 8 << 20 };
    void *stack = mmap(NULL, COPY_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ucontext_t here, report;
    if (stack != MAP_FAILED && getcontext(&report) == 0) {
      report.uc_stack.ss_sp = stack;
      report.uc_stack.ss_size = COPY_STACK_BYTES;
      report.uc_link = &here;
      makecontext(&report, reportInCopy, 0);
      swapcontext(&here, &report);
    }
    syscall(SYS_exit_group, 0);
  }
  struct timespec pause = {0, 1000000};
  for (int waited = 0; waited < CRASH_REPORT_WAIT_MS; waited++) {
    int status;
    long reaped = waitpid((pid_t)child, &status, __WCLONE | WNOHANG);
    if (reaped == child || (reaped < 0 && errno != EINTR)) return 1;
    nanosleep(&pause, NULL);
  }
  say("perfharness: the crashed program's partial report did not finish in time\n");
  kill((pid_t)child, SIGKILL);
  waitpid((pid_t)child, NULL, __WCLONE);
  return 1;
}

// CPerfCrash's handler, on the thread a fatal signal stopped, when no reporter waits yet.
static int32_t startReporterAfterCrash(int32_t sig, int32_t tid) {
  int state = atomic_load(&g_helpers);
  if (state == HELPERS_STARTING) return 0;
  if (state == HELPERS_RUNNING) return g_reporterStarted ? 0 : -1;
  if (state == HELPERS_CLOSED) return -1;
  return reportFromCopy(sig, tid);
}

// A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT) parks the thread that
// took it until the reporter has written the partial report; the signal then goes on to
// its previous owner (the Swift runtime's backtracer, or the default action).
static void armCrashReporter(void) {
  if (CPerfCrash_arm(0, CRASH_REPORT_WAIT_MS, 0) != 0) return;
  CPerfCrash_setReporterStarter(startReporterAfterCrash);
  g_crashArmed = 1;
  // Started early (before the instruments, whose start the arming follows): the reporter too.
  if (atomic_load(&g_helpers) == HELPERS_RUNNING) startReporter();
}

static void disarmCrashReporter(void) {
  if (!g_crashArmed) return;
  g_crashArmed = 0;
  int signalled = CPerfCrash_disarm();
  if (g_reporterStarted) pthread_join(g_reporter, NULL);
  if (!signalled) CPerfCrash_release();
}

// This library's executable segment, from the program headers of the object holding this
// function.
static int findOwnText(struct dl_phdr_info *info, size_t size, void *unused) {
  (void)size;
  (void)unused;
  uintptr_t self = (uintptr_t)&findOwnText;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *header = &info->dlpi_phdr[i];
    if (header->p_type != PT_LOAD || !(header->p_flags & PF_X)) continue;
    uintptr_t start = info->dlpi_addr + header->p_vaddr;
    if (self >= start && self < start + header->p_memsz) {
      g_textStart = start;
      g_textEnd = start + header->p_memsz;
      return 1;
    }
  }
  return 0;
}

// The program `perfharness record` started dies with the harness (even of SIGKILL), as a
// scenario's child does: nothing would be left to stop it or read its report. Only that
// process: what it starts has another parent and is its to manage.
static void dieWithHarness(void) {
  const char *value = getenv("PERFHARNESS_RECORD_HARNESS");
  pid_t harness = value ? (pid_t)strtol(value, NULL, 10) : 0;
  if (harness <= 0 || getppid() != harness) return;
  if (CPerfCrash_dieWithParent(harness) == 1) raise(SIGKILL);
}

__attribute__((constructor)) static void startRecording(void) {
  if (!getenv("PERFHARNESS_RECORD")) return;
  dieWithHarness();
  double markEvery = cperf_preload_settings();
  if (markEvery < 0) return;
  g_markEverySeconds = markEvery;
  g_create = (Create)dlsym(RTLD_NEXT, "pthread_create");
  dl_iterate_phdr(findOwnText, NULL);
  unw_proc_info_t threadStart;
  if (unw_get_proc_info_by_ip(unw_local_addr_space, (unw_word_t)CPerfSampler_threadStartFunction(), &threadStart,
                              NULL) == 0) {
    g_threadStartStart = threadStart.start_ip;
    g_threadStartEnd = threadStart.end_ip;
  }
  CPerfAlloc_Allocator allocator;
  CPerfAlloc_nextAllocator(&allocator);
  if (allocator.missing) {
    // Its blocks would reach another allocator's free or malloc_usable_size (the recorder's
    // own Swift code calls it).
    char reason[512];
    snprintf(reason, sizeof reason,
             "cannot record with the allocator in %s: it defines malloc but not %s, which comes from another "
             "library, so blocks would pass between two allocators",
             allocator.path ? allocator.path : "an unknown library", allocator.missing);
    cperf_preload_refuse(reason);
    return;
  }
  g_mallocStart = allocator.textStart;
  g_mallocEnd = allocator.textEnd;
  // Non-blocking: a handler never waits on a full pipe, and the marker blocks in poll.
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    fprintf(stderr, "perfharness: cannot make the recorder's mark pipe: %s\n", strerror(errno));
    return;
  }
  clock_gettime(CLOCK_MONOTONIC, &g_start);
  g_pid = getpid();
  if (cperf_preload_loss_path(g_lossPath, sizeof g_lossPath) != 0) g_lossPath[0] = 0;
  // Threads from the start where the process will have one anyway (the helpers are then
  // known to the sampler before it looks for threads), or where this library's code or
  // glibc's malloc could not be told from the program's.
  bool eager =
      markEvery > 0 || cperf_preload_runs_threads() || !__libc_single_threaded || g_textEnd == 0 || g_mallocEnd == 0;
  if (eager && !startHelpers()) return;
  if (cperf_preload_start() != 0) {
    closeHelpers();
    stopMarker();
    return;
  }
  atomic_store(&g_recording, 1);
  armCrashReporter();
  if (!eager) CPerfSampler_setThreadCreationHook(beforeProgramThread);
  pthread_atfork(NULL, NULL, forkedChild);
  installIfDefault(SIGUSR2);
  installIfDefault(SIGINT);
  installIfDefault(SIGTERM);
}

// Stops the marker (unless this is it) and the crash reporter, then writes the report.
static void writeReport(int endingSignal) {
  closeHelpers();
  if (!pthread_equal(pthread_self(), g_marker)) stopMarker();
  disarmCrashReporter();
  cperf_preload_finish(endingSignal);
}

// A thread of the program that a signal interrupted inside malloc or the recorder holds what
// the report needs (the allocator's lock, its own table of the recorder), and a handler that
// ends the process never returns there to give it back.
#define INTERRUPTED_INSIDE                                                                                          \
  " was called from a signal handler that interrupted malloc or the recorder on the same thread, which holds what " \
  "building the report needs (the allocator's lock or the recorder's table) and never returns to give it back"

__attribute__((destructor)) static void finishRecording(void) {
  if (!atomic_exchange(&g_recording, 0) || getpid() != g_pid) return;
  // The marker ends the program through exit() too, outside any malloc.
  if (!pthread_equal(pthread_self(), g_marker) && interruptedInsideUs()) {
    // Writing the report here would wait on this thread itself, for ever.
    closeHelpers();
    reportLost("exit()" INTERRUPTED_INSIDE);
    return;
  }
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
    if (interruptedInsideUs()) {
      // The marker would wait on this thread until EXIT_REPORT_WAIT_MS, which made every
      // such run of a program looping on malloc 30 s long.
      reportLost("_exit()" INTERRUPTED_INSIDE);
    } else {
      startHelpersFromSignal();
      // Started on another thread: not on this one, which stands outside the recorder.
      while (atomic_load(&g_helpers) == HELPERS_STARTING) sched_yield();
      if (atomic_load(&g_helpers) == HELPERS_RUNNING && g_markerStarted) {
        wake(FINISH);
        // In one system call throughout: the leak scan parks this thread, and reads the 128
        // bytes below the stack pointer (a leaf's red zone) of a thread it interrupted outside
        // a system call. Waiting in a nanosleep loop, a loaded debug build counted one of the
        // program's leaked blocks reachable in 1 run in 12; waiting here, in none of 24.
        struct timespec start, now;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
          clock_gettime(CLOCK_MONOTONIC, &now);
          int64_t left =
              EXIT_REPORT_WAIT_MS - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
          if (atomic_load(&g_finished) || left <= 0) break;
          struct timespec wait = {left / 1000, (left % 1000) * 1000000};
          syscall(SYS_futex, &g_finished, FUTEX_WAIT_PRIVATE, 0, &wait, NULL, 0);
        }
        if (!atomic_load(&g_finished))
          reportLost(
              "_exit() waited 30 s for the report, and its writer had not finished (it may wait on a lock "
              "that the code _exit interrupted holds)");
      }
    }
  }
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

void perfharness_mark(const char *label) {
  if (atomic_load(&g_recording) && getpid() == g_pid) cperf_preload_mark(label);
}
