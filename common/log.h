/*  log: one line per event, naming the component and what it is about.
    Format: "2026-11-30T10:00:00.123Z LEVEL component: message". Written to
    stderr; thread-safe (one write per line). */
#ifndef ZL_LOG_H
#define ZL_LOG_H

typedef enum {
    ZL_LOG_ERROR = 0,
    ZL_LOG_WARN,
    ZL_LOG_INFO,
    ZL_LOG_DEBUG,
    ZL_LOG_TRACE
} zl_log_level_t;

/*  Set the most verbose level that is printed (default ZL_LOG_INFO). */
void zl_log_set_level (zl_log_level_t level);
/*  Return the current level. */
zl_log_level_t zl_log_level (void);
/*  Set the program name printed in every line (borrowed; keep it alive). */
void zl_log_set_program (const char *program);
/*  Print one line if `level` is enabled. */
void zl_log (zl_log_level_t level, const char *component, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

#define zl_error(comp, ...) zl_log (ZL_LOG_ERROR, comp, __VA_ARGS__)
#define zl_warn(comp, ...) zl_log (ZL_LOG_WARN, comp, __VA_ARGS__)
#define zl_info(comp, ...) zl_log (ZL_LOG_INFO, comp, __VA_ARGS__)
#define zl_debug(comp, ...)                                                                        \
    do {                                                                                           \
        if (zl_log_level () >= ZL_LOG_DEBUG)                                                       \
            zl_log (ZL_LOG_DEBUG, comp, __VA_ARGS__);                                              \
    } while (0)
#define zl_trace(comp, ...)                                                                        \
    do {                                                                                           \
        if (zl_log_level () >= ZL_LOG_TRACE)                                                       \
            zl_log (ZL_LOG_TRACE, comp, __VA_ARGS__);                                              \
    } while (0)

#endif
