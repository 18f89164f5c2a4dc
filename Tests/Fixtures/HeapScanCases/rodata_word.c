// A word in a section named .rodata that is written at run time: the shape of Swift
// libraries' constants, which the linker puts in the writable segment. In a file of its own:
// the compiler marks the section writable for this word, and other constants of the same
// file would then conflict.
#include "HeapScanCases.h"

__attribute__((section(".rodata"))) static volatile uint64_t g_rodataWord;

void HeapScanCases_setRodataWord(uint64_t word) { g_rodataWord = word; }
