#include "UnwindCases.h"

#include <time.h>
#include <unistd.h>

// No .cfi directives: the assembler emits no FDE for it. Thousands of distinct PCs, so
// most samples that land here meet a PC the sampler has not learned yet (and defer).
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type unwind_cases_leaf_without_fde,@function\n"
    "unwind_cases_leaf_without_fde:\n"
    "  movq %rdi, %rax\n"
    ".rept 16384\n"
    "  addq $1, %rax\n"
    ".endr\n"
    "  ret\n"
    ".size unwind_cases_leaf_without_fde, .-unwind_cases_leaf_without_fde\n");

// 16384 additions to rax in a loop of three PCs.
#define SPIN              \
  "  movl $16384, %ecx\n" \
  "1:\n"                  \
  "  addq $1, %rax\n"     \
  "  decl %ecx\n"         \
  "  jnz 1b\n"

// The same, then the return.
#define SPIN_AND_RETURN SPIN "  ret\n"

// An epilogue whose CFI, after `pop %rbp`, still names the slot rbp was popped from
// (now below sp), as LLVM emits it, with a loop of a few PCs before the `ret`: samples
// keep landing on PCs the sampler has seen, so they show whether it learned a rule.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type unwind_cases_after_pop,@function\n"
    "unwind_cases_after_pop:\n"
    "  .cfi_startproc\n"
    "  pushq %rbp\n"
    "  .cfi_def_cfa_offset 16\n"
    "  .cfi_offset %rbp, -16\n"
    "  movq %rsp, %rbp\n"
    "  .cfi_def_cfa_register %rbp\n"
    "  movq %rdi, %rax\n"
    "  popq %rbp\n"
    "  .cfi_def_cfa %rsp, 8\n" SPIN_AND_RETURN
    "  .cfi_endproc\n"
    ".size unwind_cases_after_pop, .-unwind_cases_after_pop\n");

// A loop of a few PCs in a leaf without an FDE or a frame, as libswiftCore's functions
// without one are before their `push %rbp`: samples keep landing on PCs the sampler has
// seen, so they show what it does where no rule shape fits libunwind's step.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type unwind_cases_loop_without_fde,@function\n"
    "unwind_cases_loop_without_fde:\n"
    "  movq %rdi, %rax\n" SPIN_AND_RETURN ".size unwind_cases_loop_without_fde, .-unwind_cases_loop_without_fde\n");

// A function without an FDE that sets up a frame and calls a leaf with CFI, as the Swift
// runtime's metadata accessor thunks call into the runtime: samples in the leaf have it
// as a caller frame, which libunwind steps along the frame-pointer chain with a made-up
// sp. The 32 bytes of locals keep that sp from being the caller's.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type unwind_cases_spin_leaf,@function\n"
    "unwind_cases_spin_leaf:\n"
    "  .cfi_startproc\n"
    "  movq %rdi, %rax\n" SPIN_AND_RETURN
    "  .cfi_endproc\n"
    ".size unwind_cases_spin_leaf, .-unwind_cases_spin_leaf\n"
    ".p2align 4\n"
    ".type unwind_cases_frame_without_fde,@function\n"
    "unwind_cases_frame_without_fde:\n"
    "  pushq %rbp\n"
    "  movq %rsp, %rbp\n"
    "  subq $32, %rsp\n"
    "  call unwind_cases_spin_leaf\n"
    "  addq $32, %rsp\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size unwind_cases_frame_without_fde, .-unwind_cases_frame_without_fde\n");

// A leaf with CFI that keeps the caller's rbp on its stack and uses the register for
// other values, as code built without frame pointers may: an address below the stack,
// one past its top, a misaligned one, and a chain of two made-up frames in its locals
// (the first's return address 1, the second pointing at itself).
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type unwind_cases_rbp_not_a_frame,@function\n"
    "unwind_cases_rbp_not_a_frame:\n"
    "  .cfi_startproc\n"
    "  pushq %rbp\n"
    "  .cfi_def_cfa_offset 16\n"
    "  .cfi_offset %rbp, -16\n"
    "  subq $32, %rsp\n"
    "  .cfi_def_cfa_offset 48\n"
    "  movq %rdi, %rax\n"
    "  leaq 16(%rsp), %rdx\n"
    "  movq %rdx, (%rsp)\n"
    "  movq $1, 8(%rsp)\n"
    "  movq %rdx, 16(%rsp)\n"
    "  movq $-1, 24(%rsp)\n"
    "  movq $4096, %rbp\n" SPIN "  movq $-16, %rbp\n" SPIN "  leaq 1(%rsp), %rbp\n" SPIN "  movq %rsp, %rbp\n" SPIN
    "  addq $32, %rsp\n"
    "  .cfi_def_cfa_offset 16\n"
    "  popq %rbp\n"
    "  .cfi_def_cfa_offset 8\n"
    "  ret\n"
    "  .cfi_endproc\n"
    ".size unwind_cases_rbp_not_a_frame, .-unwind_cases_rbp_not_a_frame\n");

// A leaf of 1 MB of straight-line code in one CFI row: 64 K granules of 16 bytes, four
// times as many as the sampler's rule cache has entries. Samples keep landing on addresses
// no rule covers, and each rule learned there gives its row's rule to up to 4 KB around it.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".type unwind_cases_wide_leaf,@function\n"
    "unwind_cases_wide_leaf:\n"
    "  .cfi_startproc\n"
    "  movq %rdi, %rax\n"
    ".rept 262144\n"
    "  addq $1, %rax\n"
    ".endr\n"
    "  ret\n"
    "  .cfi_endproc\n"
    ".size unwind_cases_wide_leaf, .-unwind_cases_wide_leaf\n");

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t unwind_cases_leaf_without_fde(uint64_t value);
uint64_t unwind_cases_after_pop(uint64_t value);
uint64_t unwind_cases_loop_without_fde(uint64_t value);
uint64_t unwind_cases_frame_without_fde(uint64_t value);
uint64_t unwind_cases_rbp_not_a_frame(uint64_t value);
uint64_t unwind_cases_wide_leaf(uint64_t value);

__attribute__((noinline)) static uint64_t spin_in(uint64_t (*leaf)(uint64_t), uint64_t nanoseconds) {
  uint64_t start = thread_cpu_ns(), total = 0;
  while (thread_cpu_ns() - start < nanoseconds) {
    for (int i = 0; i < 64; i++) total = leaf(total);
    // About as long in this frame (with unwind information), so the thread's last walk
    // holds the callers when a sample lands in the leaf.
    volatile uint64_t x = total;
    for (int i = 0; i < 64 * 16384 / 4; i++) x = x * 6364136223846793005u + 1;
    total += x;
  }
  return total;
}

__attribute__((noinline)) uint64_t UnwindCases_spinInLeafWithoutUnwindInfo(uint64_t nanoseconds) {
  return spin_in(unwind_cases_leaf_without_fde, nanoseconds);
}

__attribute__((noinline)) uint64_t UnwindCases_spinAfterPopInEpilogue(uint64_t nanoseconds) {
  return spin_in(unwind_cases_after_pop, nanoseconds);
}

__attribute__((noinline)) uint64_t UnwindCases_spinInLoopWithoutUnwindInfo(uint64_t nanoseconds) {
  return spin_in(unwind_cases_loop_without_fde, nanoseconds);
}

__attribute__((noinline)) uint64_t UnwindCases_spinUnderFrameWithoutUnwindInfo(uint64_t nanoseconds) {
  return spin_in(unwind_cases_frame_without_fde, nanoseconds);
}

__attribute__((noinline)) uint64_t UnwindCases_spinWithRbpNotAFrame(uint64_t nanoseconds) {
  return spin_in(unwind_cases_rbp_not_a_frame, nanoseconds);
}

__attribute__((noinline)) uint64_t UnwindCases_wideLeaf(uint64_t value) {
  return unwind_cases_wide_leaf(value) + 1;  // not a tail call: this frame stays on the stack
}

// A call through the PLT (getppid is libc's): the call instruction's target is the stub.
__attribute__((noinline)) long UnwindCases_callThroughPlt(void) { return (long)getppid() + 1; }

const uint8_t *UnwindCases_callThroughPltCode(void) { return (const uint8_t *)&UnwindCases_callThroughPlt; }
