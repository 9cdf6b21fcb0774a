/* cgrad zoo, util layer: clocks. */
#ifndef CG_MODELS_UTIL_CLOCK_H
#define CG_MODELS_UTIL_CLOCK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds from a monotonic clock. */
double cg_now(void);
/* CPU seconds used by the process (all its threads). */
double cg_cpu_now(void);

#ifdef __cplusplus
}
#endif
#endif
