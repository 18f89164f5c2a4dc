// The CPerfHeapScan target's internal globals under its own prefix (cperf_heapscan_): hidden from the
// dynamic symbol table, they are still global in a static link, where a plain name
// ("walk", "g_state") would clash with a user's own C code. Included first by every file
// of the target (through heap_scan_internal.h); scripts/check-c-symbols.sh, run by make test,
// fails on a global this list misses.
#ifndef HEAP_SCAN_NAMESPACE_H
#define HEAP_SCAN_NAMESPACE_H

#define blocked_thread_sp cperf_heapscan_blocked_thread_sp
#define classify_blocks   cperf_heapscan_classify_blocks
#define collect_segment   cperf_heapscan_collect_segment
#define find_mapping      cperf_heapscan_find_mapping
#define g_active          cperf_heapscan_g_active
#define g_previous        cperf_heapscan_g_previous
#define g_release         cperf_heapscan_g_release
#define g_slotCount       cperf_heapscan_g_slotCount
#define g_slots           cperf_heapscan_g_slots
#define index_build       cperf_heapscan_index_build
#define index_free        cperf_heapscan_index_free
#define list_threads      cperf_heapscan_list_threads
#define park_handler      cperf_heapscan_park_handler
#define read_maps         cperf_heapscan_read_maps
#define scan_blocks       cperf_heapscan_scan_blocks
#define scan_root_range   cperf_heapscan_scan_root_range
#define scan_words        cperf_heapscan_scan_words
#define static_tls_bytes  cperf_heapscan_static_tls_bytes
#define vec_free          cperf_heapscan_vec_free
#define vec_push          cperf_heapscan_vec_push

#endif
