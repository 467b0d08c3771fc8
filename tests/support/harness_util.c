/*  harness_util: what the server harnesses share (harness_util.h). */
#define _GNU_SOURCE
#include "harness_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_USER "zlane-test" // the server user when the test runs as root
#define USERADD_MS 30000
#define USERADD_LOCK "/tmp/zlane-test-useradd.lock" // one useradd at a time

int64_t
zlh_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
zlh_pidfd_open (pid_t pid)
{
    return (int)syscall (SYS_pidfd_open, pid, 0);
}

int
zlh_pidfd_kill (int pidfd, int sig)
{
    return (int)syscall (SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

void
zlh_dump_tail (const char *title, const char *path, size_t max_bytes)
{
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat (fd, &st) < 0) {
        fprintf (stderr, "---- %s (%s): unreadable\n", title, path);
        if (fd >= 0)
            close (fd);
        return;
    }
    size_t size = (size_t)st.st_size;
    size_t from = size > max_bytes ? size - max_bytes : 0;
    char *buf = malloc (size - from + 1);
    if (!buf) {
        close (fd);
        return;
    }
    ssize_t n = pread (fd, buf, size - from, (off_t)from);
    close (fd);
    buf[n > 0 ? n : 0] = '\0';
    fprintf (stderr, "---- %s (%s)%s\n%s%s---- end of %s\n", title, path, from ? " [tail]" : "",
             buf, n > 0 && buf[n - 1] != '\n' ? "\n" : "", title);
    free (buf);
}

static int
s_rm_entry (const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove (path);
    return 0;
}

void
zlh_remove_tree (const char *dir)
{
    nftw (dir, s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// useradd the default user, waiting at most USERADD_MS. Returns its exit
// status, or -1.
static int
s_useradd (void)
{
    char *const argv[] = {"/usr/sbin/useradd", "--system",
                          "--user-group",      "--no-create-home",
                          "--home-dir",        "/nonexistent",
                          "--shell",           "/usr/sbin/nologin",
                          "--comment",         "zlane tests, throwaway PostgreSQL clusters",
                          DEFAULT_USER,        NULL};
    char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
    pid_t pid = fork ();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close_range (3, ~0U, 0);
        execve (argv[0], argv, envp);
        _exit (127);
    }
    int pidfd = zlh_pidfd_open (pid);
    struct pollfd pfd = {pidfd, POLLIN, 0};
    if (pidfd >= 0 && poll (&pfd, 1, USERADD_MS) == 0)
        kill (pid, SIGKILL);
    if (pidfd >= 0)
        close (pidfd);
    int status = 0;
    if (waitpid (pid, &status, 0) != pid)
        return -1;
    return WIFEXITED (status) ? WEXITSTATUS (status) : -1;
}

int
zlh_server_user (bool *drop, uid_t *uid, gid_t *gid, char *why, size_t whylen)
{
    *drop = false;
    if (geteuid () != 0)
        return 0; // the servers run as we do
    const char *env = getenv ("ZLANE_PG_USER");
    const char *name = env && env[0] ? env : DEFAULT_USER;
    // The tests run in parallel, and on a new machine two of them may each
    // make the user at once: once, a test ran initdb as an id no user had
    // ("could not look up effective user ID 999"). The look-up and the
    // useradd are made under one lock, and the user found must be the one
    // its id names.
    bool ours = strcmp (name, DEFAULT_USER) == 0;
    int lock = ours ? open (USERADD_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (lock >= 0)
        (void)flock (lock, LOCK_EX);
    struct passwd *pw = getpwnam (name);
    int rc = 0;
    if (!pw && ours) {
        rc = s_useradd ();
        pw = getpwnam (name);
    }
    uid_t found_uid = pw ? pw->pw_uid : 0;
    gid_t found_gid = pw ? pw->pw_gid : 0;
    struct passwd *back = pw ? getpwuid (found_uid) : NULL;
    if (back && strcmp (back->pw_name, name) != 0)
        back = NULL;
    if (lock >= 0)
        close (lock); // (the lock goes with it)
    if (pw && !back) {
        snprintf (why, whylen, "user %s has id %u, which names no user", name, (unsigned)found_uid);
        return -1;
    }
    if (!pw) {
        snprintf (why, whylen,
                  "PostgreSQL refuses to run as root, and there is no user %s to run it as "
                  "(useradd exit %d; set ZLANE_PG_USER, e.g. to nobody)",
                  name, rc);
        return -1;
    }
    if (found_uid == 0) {
        snprintf (why, whylen, "ZLANE_PG_USER=%s is root", name);
        return -1;
    }
    *drop = true;
    *uid = found_uid;
    *gid = found_gid;
    return 0;
}
