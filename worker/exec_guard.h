/*  exec_guard: what the guard of an exec job (exec_guard.c) and the exec
    handler (exec.c) share. The handler starts the guard as
        zlane-guard LIFELINE_FD REPORT_FD /bin/sh -c COMMAND
    and reads the guard's reports from REPORT_FD: records of two int32s,
    each written whole in one write (shorter than PIPE_BUF). On the
    lifeline the handler writes ZL_GUARD_TERM or ZL_GUARD_KILL; its end of
    file means the worker is gone. Included by a freestanding program:
    nothing here may need libc. */
#ifndef ZL_EXEC_GUARD_H
#define ZL_EXEC_GUARD_H

#include <stdint.h>

#define ZL_GUARD_NAME "zlane-guard" // argv[0] and the process name (comm)

typedef enum {
    ZL_GUARD_EXITED = 1,      // value: the command's wait status
    ZL_GUARD_START_FAILED = 2 // value: errno of what failed (signalfd, clone, execve)
} zl_guard_what_t;

typedef struct {
    int32_t what;
    int32_t value;
} zl_guard_record_t;

#define ZL_GUARD_TERM 'T' // SIGTERM the command's group
#define ZL_GUARD_KILL 'K' // SIGKILL the command (its group follows, once it is reaped)

/*  The guard program's bytes, compiled into the library from the built
    zlane-exec-guard (exec_guard_elf.c, generated). */
extern const unsigned char zl_exec_guard_elf[];
extern const unsigned long zl_exec_guard_elf_len;

#endif
