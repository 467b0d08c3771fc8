/*  zlane-guard: the guard of one exec job. See exec.c for why it exists.

    Started by zl_exec_handler, never by hand, as
        zlane-guard LIFELINE_FD REPORT_FD PROGRAM ARG...
    with the job's environment, stdin the payload, stderr the capture pipe,
    every signal blocked, in a new process group that it leads. It starts
    PROGRAM (vfork, then execve) in its group and waits for one of:
    - the command's exit: its wait status goes to REPORT_FD; if the job was
      cancelled, what the command left in the group is SIGKILLed, the guard
      included; else the guard exits;
    - a word on the lifeline: ZL_GUARD_TERM sends SIGTERM to the group (the
      guard has it blocked), ZL_GUARD_KILL sends SIGKILL to the command;
    - the lifeline's end of file: the worker is gone, and the guard removes
      the files the worker made for the job (its result, checkpoint and
      parents' results files, named in the job's environment: the worker
      removes them when a job ends, which a SIGKILLed worker never sees),
      then SIGKILLs the whole group, itself included, at once.
    Nothing else of the worker's is open here: the exec that started the
    guard closed every close-on-exec descriptor, another job's lifeline
    among them; those without close-on-exec are passed on to the command.

    Freestanding on x86_64: no libc, no start files, system calls by s_sys.
    Starting it then costs one exec of a few pages: the start-up of a libc
    program alone (its CPU feature probing) costs more than a small job
    where CPUID traps to the hypervisor. Elsewhere it is built as an
    ordinary program on libc's syscall(2) and vfork. */
#define _GNU_SOURCE
#include "exec_guard.h"

#include <errno.h> // the constants only
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

// ------------------------------------------------------------------ system calls

#if defined(ZL_GUARD_FREESTANDING) && defined(__x86_64__)
static inline __attribute__ ((always_inline)) long
s_sys6 (long n, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#elif defined(ZL_GUARD_FREESTANDING)
#error "a freestanding zlane-guard is written for x86_64 only; build it hosted"
#else
#include <unistd.h>
static inline __attribute__ ((always_inline)) long
s_sys6 (long n, long a, long b, long c, long d, long e, long f)
{
    long ret = syscall (n, a, b, c, d, e, f);
    return ret < 0 ? -errno : ret; // the kernel's convention, as the freestanding ones
}
#endif

// s_sys (SYS_x, args...): up to six arguments; returns the result or -errno.
#define S_ARGS6(n, a, b, c, d, e, f, ...)                                                          \
    s_sys6 ((long)(n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define s_sys(...) S_ARGS6 (__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

#ifdef ZL_GUARD_FREESTANDING
// The compiler may call these for struct copies and zeroing.
void *memset (void *s, int c, size_t n);
void *memcpy (void *dst, const void *src, size_t n);

void *
memset (void *s, int c, size_t n)
{
    volatile unsigned char *p = s;
    while (n--)
        *p++ = (unsigned char)c;
    return s;
}

void *
memcpy (void *dst, const void *src, size_t n)
{
    volatile unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}
#endif

static void __attribute__ ((noreturn)) s_exit (int code)
{
    for (;;)
        s_sys (SYS_exit_group, code);
}

// ------------------------------------------------------------------ the guard

static int
s_atoi (const char *s)
{
    int n = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        n = n * 10 + (*s - '0');
    return n;
}

static void
s_report (int fd, zl_guard_what_t what, long value)
{
    zl_guard_record_t r = {(int32_t)what, (int32_t)value};
    while (s_sys (SYS_write, fd, &r, sizeof r) == -EINTR)
        ;
    // -EPIPE: the worker is gone, and nobody is left to tell
}

/*  The wait status (as waitpid gives it) of the child `info` describes. */
static int
s_status (const siginfo_t *info)
{
    switch (info->si_code) {
    case CLD_EXITED: return (info->si_status & 0xff) << 8;
    case CLD_KILLED: return info->si_status & 0x7f;
    case CLD_DUMPED: return (info->si_status & 0x7f) | 0x80;
    default: return info->si_status & 0x7f;
    }
}

/*  In the vfork child: become the command. Runs on the guard's stack, so it
    must never return; the guard waits, suspended, until the exec. */
static void __attribute__ ((noreturn, noinline))
s_command (char **argv, char **envp, int report_fd, long guard)
{
    // What the worker ignored was set back to default by its spawn; what
    // the guard blocks, the command must not.
    unsigned long none = 0;
    s_sys (SYS_rt_sigprocmask, SIG_SETMASK, &none, 0, sizeof none);
    // Should the guard be killed from outside, the shell goes too.
    s_sys (SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
    long err = s_sys (SYS_getppid) == guard ? s_sys (SYS_execve, argv[0], argv, envp) : -ESRCH;
    s_report (report_fd, ZL_GUARD_START_FAILED, -err);
    s_exit (127);
}

/*  Start the command: vfork, and in the child become it. Returns its pid,
    or -errno. Freestanding, the vfork is a clone system call in this very
    frame (s_sys6 is always inlined: a frame of its own would be overwritten
    by the child's calls under the waiting parent); hosted, libc's vfork,
    which is made for this. The child never returns from here. */
static long __attribute__ ((noinline)) s_start (char **argv, char **envp, int report_fd, long guard)
{
#ifdef ZL_GUARD_FREESTANDING
    long pid = s_sys (SYS_clone, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0);
#else
    long pid = vfork ();
    if (pid < 0)
        pid = -errno;
#endif
    if (pid == 0)
        s_command (argv, envp, report_fd, guard);
    return pid;
}

/*  The worker is gone: remove the job's files it made (their paths are the
    values of these variables of the job's environment). The names are an
    array, not pointers: the freestanding guard has no relocations. */
static void
s_remove_job_files (char **envp)
{
    static const char names[][24] = {
        "ZLANE_RESULT_FILE=", "ZLANE_CHECKPOINT=", "ZLANE_PARENT_RESULTS="};
    for (char **e = envp; *e; e++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *n = names[i], *v = *e;
            while (*n && *n == *v)
                n++, v++;
            if (!*n && *v)
                s_sys (SYS_unlinkat, AT_FDCWD, v, 0);
        }
}

static void __attribute__ ((noreturn)) s_guard (int argc, char **argv, char **envp)
{
    if (argc < 4)
        s_exit (2);
    int life = s_atoi (argv[1]), report = s_atoi (argv[2]);
    long guard = s_sys (SYS_getpid);
    // The spawn made us a group leader; never kill(0, ...) in another's group.
    if (s_sys (SYS_getpgid, 0) != guard) {
        long err = s_sys (SYS_setpgid, 0, 0);
        if (err) {
            s_report (report, ZL_GUARD_START_FAILED, -err);
            s_exit (1);
        }
    }
    s_sys (SYS_prctl, PR_SET_NAME, ZL_GUARD_NAME);
    s_sys (SYS_fcntl, life, F_SETFD, FD_CLOEXEC); // the command gets neither
    s_sys (SYS_fcntl, report, F_SETFD, FD_CLOEXEC);
    // SIGCHLD as a readable descriptor: every signal is blocked already.
    unsigned long chld = 1UL << (SIGCHLD - 1);
    long sigfd = s_sys (SYS_signalfd4, -1, &chld, sizeof chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) {
        s_report (report, ZL_GUARD_START_FAILED, -sigfd);
        s_exit (1);
    }
    struct pollfd p[2] = {{life, POLLIN, 0}, {(int)sigfd, POLLIN, 0}};
    struct timespec zero = {0, 0};
    if (s_sys (SYS_ppoll, p, 1, &zero, 0, 0) == 1 && (p[0].revents & (POLLHUP | POLLERR))) {
        s_remove_job_files (envp);
        s_exit (1); // the worker is gone already: start nothing
    }

    long pid = s_start (argv + 3, envp, report, guard);
    if (pid < 0) {
        s_report (report, ZL_GUARD_START_FAILED, -pid);
        s_exit (1);
    }
    s_sys (SYS_close, 0); // the payload and the stderr pipe are the command's
    s_sys (SYS_close, 2);

    bool cancelled = false; // a word came: leave nothing of the group behind
    for (;;) {
        siginfo_t info;
        info.si_pid = 0;
        long r = s_sys (SYS_waitid, P_PID, pid, &info, WEXITED | WNOHANG, 0);
        if (r == 0 && info.si_pid == pid) {
            s_report (report, ZL_GUARD_EXITED, s_status (&info));
            if (cancelled)
                s_sys (SYS_kill, 0, SIGKILL); // what the command left running, and us
            s_exit (0);
        }
        if (r < 0 && r != -EINTR) {
            s_sys (SYS_kill, 0, SIGKILL); // cannot happen: the command is our child
            s_exit (1);
        }
        // A SIGCHLD after the waitid above leaves sigfd readable: none is missed.
        p[0].revents = p[1].revents = 0;
        if (s_sys (SYS_ppoll, p, 2, 0, 0, 0) <= 0)
            continue;
        if (p[1].revents) {
            char drain[128 * 4];
            while (s_sys (SYS_read, sigfd, drain, sizeof drain) > 0)
                ;
        }
        if (!p[0].revents)
            continue;
        char words[16];
        long n = s_sys (SYS_read, life, words, sizeof words);
        if (n == 0 || (n < 0 && n != -EINTR && n != -EAGAIN)) {
            // end of file: the worker is gone, so is the group
            s_remove_job_files (envp);
            s_sys (SYS_kill, 0, SIGKILL);
            s_exit (1);
        }
        for (long i = 0; i < n; i++) {
            cancelled = true;
            if (words[i] == ZL_GUARD_TERM)
                s_sys (SYS_kill, 0, SIGTERM);
            else if (words[i] == ZL_GUARD_KILL)
                s_sys (SYS_kill, pid, SIGKILL);
        }
    }
}

// ------------------------------------------------------------------ entry

#ifdef ZL_GUARD_FREESTANDING
/*  From _start: the stack holds argc, then argv, NULL, envp, NULL. */
void __attribute__ ((noreturn, used)) zl_guard_start (long *sp);

void
zl_guard_start (long *sp)
{
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    s_guard (argc, argv, argv + argc + 1);
}

__asm__(".text\n"
        ".global _start\n"
        "_start:\n"
        "    xor %rbp, %rbp\n"
        "    mov %rsp, %rdi\n"
        "    and $-16, %rsp\n"
        "    call zl_guard_start\n"
        "    hlt\n");
#else
int
main (int argc, char **argv, char **envp)
{
    s_guard (argc, argv, envp);
}
#endif
