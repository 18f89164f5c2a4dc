// Symbolization of addresses in the current process through elfutils libdwfl.
//
// Only the libdw/libdwfl access that is awkward from Swift lives here (session setup,
// compile-unit lookup, inline-scope walking). Names are returned raw; demangling,
// caching and frame assembly happen in Swift (PerfHarness/Symbols).
//
// Not thread-safe: one session must be used by one thread at a time. Never call any of
// this from a signal handler or an allocation hook: libdw allocates and takes locks.
//
// Every string returned points into memory owned by the session (libdw's ELF/DWARF data
// or the module name) and stays valid until CPerfSymbols_refresh or CPerfSymbols_close.
// Copy it before either call.

#ifndef CPERFSYMBOLS_H
#define CPERFSYMBOLS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// An opaque libdwfl session over the current process's mappings.
typedef struct CPerfSymbols_Session CPerfSymbols_Session;

/// Reports every image mapped in the current process. Returns NULL on failure;
/// CPerfSymbols_lastError() then says why.
CPerfSymbols_Session *_Nullable CPerfSymbols_open(void);

/// Re-reads /proc/self/maps (after dlopen/dlclose). Returns 0 on success, -1 on failure.
/// Invalidates every string previously returned by this session.
int CPerfSymbols_refresh(CPerfSymbols_Session *_Nonnull session);

void CPerfSymbols_close(CPerfSymbols_Session *_Nullable session);

/// The last libdwfl error message of this thread (never NULL).
const char *_Nonnull CPerfSymbols_lastError(void);

/// What is known about one address. Pointers are NULL when unknown.
typedef struct CPerfSymbols_Location {
  /// 1 when the address lies in a reported image; all other fields are then meaningful.
  int32_t hasModule;
  /// 1 when the image's DWARF has a compile unit covering the address.
  int32_t hasDebugInfo;
  /// 1 when the image has DWARF at all (a compile unit somewhere, not necessarily here).
  int32_t moduleHasDebugInfo;
  int32_t reserved;
  /// Module name as reported from /proc/self/maps: the image's path, or e.g. "[vdso]".
  const char *_Nullable modulePath;
  /// Lowest address of the image's mapping.
  uint64_t moduleStart;
  /// Symbol-table name covering the address (.symtab when present, else .dynsym).
  const char *_Nullable symbolName;
  /// address - symbol start.
  uint64_t symbolOffset;
  /// Line-table location of the address: for inlined code this is inside the innermost
  /// inlined function.
  const char *_Nullable sourceFile;
  int32_t line;
  int32_t column;
} CPerfSymbols_Location;

/// Fills *out for the address (a PC, not a return address: the caller subtracts 1).
/// Returns 0 when the address is in a known image, -1 otherwise (out->hasModule == 0).
int CPerfSymbols_lookup(CPerfSymbols_Session *_Nonnull session, uint64_t address, CPerfSymbols_Location *_Nonnull out);

/// One DW_TAG_inlined_subroutine scope containing an address.
typedef struct CPerfSymbols_InlineFrame {
  /// The inlined function (from its abstract origin). Either may be NULL; C functions have
  /// no linkage name.
  const char *_Nullable linkageName;
  const char *_Nullable name;
  /// Where the inlined body was called from, in the enclosing (outer) function.
  const char *_Nullable callFile;
  int32_t callLine;
  int32_t callColumn;
} CPerfSymbols_InlineFrame;

/// Writes the inlined-subroutine scopes containing the address, innermost first, into
/// out[0..<capacity]. Returns how many scopes exist (may exceed capacity; 0 when the
/// address is not inside inlined code or has no debug info), or -1 on error.
int CPerfSymbols_inlineFrames(CPerfSymbols_Session *_Nonnull session, uint64_t address,
                              CPerfSymbols_InlineFrame *_Nullable out, int capacity);

/// swift_demangle from libswiftCore (bound weakly so this target also links without it).
/// Returns a malloc'd string to free(), or NULL when the name is not a Swift symbol.
char *_Nullable CPerfSymbols_swiftDemangle(const char *_Nonnull mangled, size_t length);

/// __cxa_demangle from libstdc++ (bound weakly). Returns a malloc'd string to free(), or
/// NULL when the name is not an Itanium C++ name or libstdc++ is not loaded.
char *_Nullable CPerfSymbols_cxxDemangle(const char *_Nonnull mangled);

/// Test support: a return address inside the always_inline C function
/// "CPerfSymbols_inlinedProbe", inlined into CPerfSymbols_selfTestInlinedReturnAddress.
uint64_t CPerfSymbols_selfTestInlinedReturnAddress(void);

/// The symbol-table entry of any type (a global variable as well as a function) covering
/// `address`, or NULL; *modulePath receives the image's path (NULL when the address lies in
/// no image). A linear scan of the image's symbol table: for a few addresses (the
/// globals a heap scan names), never per sample.
const char *_Nullable CPerfSymbols_dataSymbol(CPerfSymbols_Session *_Nonnull session, uint64_t address,
                                              const char *_Nullable *_Nullable modulePath);

#ifdef __cplusplus
}
#endif

#endif
