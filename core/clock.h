/* cgrad core: clocks, for timing a step or a run (time.perf_counter and
 * time.process_time in Python). */
#ifndef CG_CORE_CLOCK_H
#define CG_CORE_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds from a monotonic clock (CLOCK_MONOTONIC): differences only. */
double cg_now(void);
/* CPU seconds used by the process (all its threads). */
double cg_cpu_now(void);

#ifdef __cplusplus
}
#endif
#endif
