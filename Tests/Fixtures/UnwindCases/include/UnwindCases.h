#ifndef UNWIND_CASES_H
#define UNWIND_CASES_H
#include <stdint.h>

// Code the sampler's unwinder must handle as libunwind does, for the sampler's tests.

/// Spends `nanoseconds` of the thread's CPU time, about half of it in a leaf that has no
/// unwind information (no FDE), called from a C function with a frame pointer: the shape
/// of the Swift runtime's metadata accessor thunks (`$sSnMa`: two `lea`s and a `jmp`),
/// where libunwind guesses the caller from the frame-pointer chain. Returns a checksum.
uint64_t UnwindCases_spinInLeafWithoutUnwindInfo(uint64_t nanoseconds);

/// The same, in a leaf's epilogue after `pop %rbp`, where the CFI still says rbp is saved
/// at CFA - 16 (below sp by then), as LLVM leaves it before a `ret` or a tail jump.
uint64_t UnwindCases_spinAfterPopInEpilogue(uint64_t nanoseconds);

/// The same, in a loop of a few PCs in a leaf without an FDE (and without a frame).
uint64_t UnwindCases_spinInLoopWithoutUnwindInfo(uint64_t nanoseconds);

/// The same, in a leaf with unwind information called from a function without any that
/// sets up a frame (push rbp; mov rsp, rbp; 32 bytes of locals) before the call, as the
/// Swift runtime's `__swift_instantiateCanonicalPrespecializedGenericMetadata` does.
uint64_t UnwindCases_spinUnderFrameWithoutUnwindInfo(uint64_t nanoseconds);

/// The same, in a leaf with unwind information that saves rbp and fills it with values that
/// are no frame pointer: outside the stack, misaligned, and a chain of made-up frames.
uint64_t UnwindCases_spinWithRbpNotAFrame(uint64_t nanoseconds);

/// Runs once through a leaf of 1 MB of straight-line code with one CFI row (four times as
/// many 16-byte granules as the sampler's rule cache has entries): about 100 µs.
uint64_t UnwindCases_wideLeaf(uint64_t value);

/// Calls libc's getppid through this image's PLT; UnwindCases_callThroughPltCode is its code,
/// whose first direct call or jump goes to the PLT stub.
long UnwindCases_callThroughPlt(void);
const uint8_t *UnwindCases_callThroughPltCode(void);

#endif
