// CPerfCrash: keeps a dying scenario process alive long enough to write its partial report.
//
// The scenario child arms it around the scenario's body (the preloaded recorder of
// `perfharness record`, around the whole program):
//   CPerfCrash_arm -> a reporter thread blocks in CPerfCrash_waitForSignal -> a fatal
//   signal (or the harness's stop signal) parks the signalled thread in the handler and
//   wakes the reporter -> the reporter writes what was recorded -> CPerfCrash_reportDone
//   -> the handler hands the signal back to its previous owner (the Swift runtime's
//   backtracer prints the stack) and the process dies as it would have.
// Or, when the body returns: CPerfCrash_disarm wakes the reporter with 0 and the
// previous handlers are restored.
#ifndef CPERFCRASH_H
#define CPERFCRASH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Installs the handlers for SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT, SIGINT and
/// SIGTERM (unless ignored) and `stopSignal` (the signal the harness sends on --timeout). A signalled thread waits at
/// most `handlerWaitMs` for the report. Returns 0, or errno of the failing sigaction
/// (nothing is left installed then). One arming at a time per process. The calling
/// thread (the main thread) gets those signals unblocked until CPerfCrash_release.
/// With `interrupts` 0, SIGINT and SIGTERM are left alone (the preloaded recorder ends a
/// program through exit() on those, with a whole report).
int32_t CPerfCrash_arm(int32_t stopSignal, int64_t handlerWaitMs, int32_t interrupts);

/// For the reporter thread: blocks until a handled signal arrives (returns it, and the
/// thread that took it in *tid) or CPerfCrash_disarm is called (returns 0). The calling
/// thread is recorded as the reporter (and named crash-reporter): a signal it takes
/// itself is not waited for.
int32_t CPerfCrash_waitForSignal(int32_t *tid);

/// For a reporter started only when needed (the preloaded recorder's, while the program
/// has no thread of its own): the handler calls `start` with the signal and the signalled
/// thread before it waits, unless a reporter is waiting already. `start` returns 0 when a
/// reporter thread is (or is being) started, 1 when it wrote the report itself, -1 when
/// there is none; the handler waits only on 0. NULL: the reporter is always started before
/// the signal.
void CPerfCrash_setReporterStarter(int32_t (*start)(int32_t sig, int32_t tid));

/// For the reporter: stops the main thread in the handler (it sends `stopSignal` to it
/// unless the main thread took the signal itself) and waits at most `timeoutMs` for it.
/// Returns 1 when the main thread is parked.
int32_t CPerfCrash_parkMainThread(int64_t timeoutMs);

/// For the reporter: the report is written (or given up); signalled threads go on.
void CPerfCrash_reportDone(void);

/// Ends the arming: wakes the reporter with 0 unless a signal already woke it. Returns 1
/// if a signal had arrived first (the process is dying; the reporter is writing).
int32_t CPerfCrash_disarm(void);

/// After the reporter thread has returned from a disarm, on the thread that armed:
/// restores the previous handlers and that thread's signal mask.
/// Does nothing while a signal is being reported.
void CPerfCrash_release(void);

/// Sends `signal` to the main thread of process `pid` (tgkill with tid == pid): a
/// process-directed kill could land on any thread.
int32_t CPerfCrash_signalMainThread(int32_t pid, int32_t signal);

/// For the harness: catches SIGINT and SIGTERM, unless they are ignored when called (a
/// shell that starts a job in the background wants them ignored). The first one received
/// is kept for CPerfCrash_interruption; each one is passed on at once to the process
/// group set with CPerfCrash_setChildGroup. Returns 0 or errno of the failing sigaction.
int32_t CPerfCrash_catchInterrupts(void);

/// The first SIGINT or SIGTERM caught since CPerfCrash_catchInterrupts, or 0.
int32_t CPerfCrash_interruption(void);

/// The process group an interruption is passed on to (0: none).
void CPerfCrash_setChildGroup(int32_t pgid);

/// For the harness: orphans of the processes it starts become its children
/// (PR_SET_CHILD_SUBREAPER), so that it can end what a scenario left running. Returns 0
/// or errno.
int32_t CPerfCrash_becomeSubreaper(void);

/// For the scenario child: SIGKILL when the thread that started it ends
/// (PR_SET_PDEATHSIG). Returns 1 when `parent` is already gone (the signal was set too
/// late to come), 0 when set, or -errno.
int32_t CPerfCrash_dieWithParent(int32_t parent);

#ifdef __cplusplus
}
#endif

#endif
