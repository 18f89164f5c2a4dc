// The CPerfSampler target's internal globals under its own prefix (cperf_sampler_): hidden from the
// dynamic symbol table, they are still global in a static link, where a plain name
// ("walk", "g_state") would clash with a user's own C code. Included first by every file
// of the target (through sampler_internal.h); scripts/check-c-symbols.sh, run by make test,
// fails on a global this list misses.
#ifndef SAMPLER_NAMESPACE_H
#define SAMPLER_NAMESPACE_H

#define calibrate_tsc            cperf_sampler_calibrate_tsc
#define chain_rule               cperf_sampler_chain_rule
#define claim_record             cperf_sampler_claim_record
#define close_table              cperf_sampler_close_table
#define defer_sample             cperf_sampler_defer_sample
#define discovery_main           cperf_sampler_discovery_main
#define drain_deferred           cperf_sampler_drain_deferred
#define extend_learned_rules     cperf_sampler_extend_learned_rules
#define find_live                cperf_sampler_find_live
#define forget_table_in_children cperf_sampler_forget_table_in_children
#define g_asyncChains            cperf_sampler_g_asyncChains
#define g_asyncRanges            cperf_sampler_g_asyncRanges
#define g_asyncRangesWanted      cperf_sampler_g_asyncRangesWanted
#define g_asyncUnread            cperf_sampler_g_asyncUnread
#define g_boundsWanted           cperf_sampler_g_boundsWanted
#define g_config                 cperf_sampler_g_config
#define g_defer                  cperf_sampler_g_defer
#define g_deferDone              cperf_sampler_g_deferDone
#define g_deferPrefaulted        cperf_sampler_g_deferPrefaulted
#define g_deferredSamples        cperf_sampler_g_deferredSamples
#define g_deferUsed              cperf_sampler_g_deferUsed
#define g_dither                 cperf_sampler_g_dither
#define g_discoveryStop          cperf_sampler_g_discoveryStop
#define g_dwfl                   cperf_sampler_g_dwfl
#define g_fallbacks              cperf_sampler_g_fallbacks
#define g_freeRecordCount        cperf_sampler_g_freeRecordCount
#define g_freeRecords            cperf_sampler_g_freeRecords
#define g_hot                    cperf_sampler_g_hot
#define g_ignoredTids            cperf_sampler_g_ignoredTids
#define g_learned                cperf_sampler_g_learned
#define g_learnedCount           cperf_sampler_g_learnedCount
#define g_lost                   cperf_sampler_g_lost
#define g_mappedBytes            cperf_sampler_g_mappedBytes
#define g_mismatches             cperf_sampler_g_mismatches
#define g_perfErrno              cperf_sampler_g_perfErrno
#define g_perfRefused            cperf_sampler_g_perfRefused
#define g_prefaulted             cperf_sampler_g_prefaulted
#define g_prefaultWorks          cperf_sampler_g_prefaultWorks
#define g_previousKind           cperf_sampler_g_previousKind
#define g_rangeRules             cperf_sampler_g_rangeRules
#define g_recordsUsed            cperf_sampler_g_recordsUsed
#define g_rejoined               cperf_sampler_g_rejoined
#define g_scanMark               cperf_sampler_g_scanMark
#define g_tableLock              cperf_sampler_g_tableLock
#define g_tableOpen              cperf_sampler_g_tableOpen
#define g_tablesPopulated        cperf_sampler_g_tablesPopulated
#define g_tableStorage           cperf_sampler_g_tableStorage
#define g_threadCapacity         cperf_sampler_g_threadCapacity
#define g_threadCount            cperf_sampler_g_threadCount
#define g_threads                cperf_sampler_g_threads
#define g_tickerTid              cperf_sampler_g_tickerTid
#define g_timerFailures          cperf_sampler_g_timerFailures
#define install_handler          cperf_sampler_install_handler
#define perf_source_count        cperf_sampler_perf_source_count
#define perf_source_forget       cperf_sampler_perf_source_forget
#define perf_source_open         cperf_sampler_perf_source_open
#define perf_source_release      cperf_sampler_perf_source_release
#define perf_source_signal       cperf_sampler_perf_source_signal
#define populate_tables          cperf_sampler_populate_tables
#define prefault_arena           cperf_sampler_prefault_arena
#define publish_executor         cperf_sampler_publish_executor
#define read_comm                cperf_sampler_read_comm
#define read_self_maps           cperf_sampler_read_self_maps
#define refresh_async_ranges     cperf_sampler_refresh_async_ranges
#define release_record           cperf_sampler_release_record
#define rule_insert_tagged       cperf_sampler_rule_insert_tagged
#define sampler_blocks_sigprof   cperf_sampler_blocks_sigprof
#define sampler_create_unwatched cperf_sampler_create_unwatched
#define sampler_thread_born      cperf_sampler_thread_born
#define sampler_thread_ended     cperf_sampler_thread_ended
#define scan                     cperf_sampler_scan
#define sigprof_handler          cperf_sampler_sigprof_handler
#define timer_source_signal      cperf_sampler_timer_source_signal
#define timer_source_register    cperf_sampler_timer_source_register
#define timer_source_forget      cperf_sampler_timer_source_forget
#define ticker_main              cperf_sampler_ticker_main
#define wait_for_handlers        cperf_sampler_wait_for_handlers
#define walk                     cperf_sampler_walk
#define wall_signal              cperf_sampler_wall_signal
#define wall_thread_state        cperf_sampler_wall_thread_state

#endif
