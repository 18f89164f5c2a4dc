// CPerfPreload: what `perfharness record -- CMD` loads into an unmodified program
// (LD_PRELOAD), around the same recorder as a scenario's: a constructor that starts it
// before the program's main, a destructor that writes the report after the program's exit
// handlers, and the ways to mark a generation without changing the program's code.
//
// A program may mark generations itself, and run unchanged without the harness, by
// declaring the function weak:
//   extern void perfharness_mark(const char *label) __attribute__((weak));
//   if (perfharness_mark) perfharness_mark("after warm-up");
// (Swift: dlsym(RTLD_DEFAULT, "perfharness_mark").)
#ifndef CPERFPRELOAD_H
#define CPERFPRELOAD_H

#ifdef __cplusplus
extern "C" {
#endif

/// Marks a generation labelled `label` (NULL: "mark N"). Does nothing outside a recording.
void perfharness_mark(const char *label);

#ifdef __cplusplus
}
#endif

#endif
