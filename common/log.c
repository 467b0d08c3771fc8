#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static zl_log_level_t s_level = ZL_LOG_INFO;
static const char *s_program = "zlane";
static const char *s_names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

void
zl_log_set_level (zl_log_level_t level)
{
    s_level = level;
}

zl_log_level_t
zl_log_level (void)
{
    return s_level;
}

void
zl_log_set_program (const char *program)
{
    s_program = program;
}

void
zl_log (zl_log_level_t level, const char *component, const char *fmt, ...)
{
    if (level > s_level)
        return;
    char line[2048];
    struct timeval tv;
    gettimeofday (&tv, NULL);
    struct tm tm;
    gmtime_r (&tv.tv_sec, &tm);
    int n = snprintf (line, sizeof line,
                      "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s %s: ", tm.tm_year + 1900,
                      tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                      (int)(tv.tv_usec / 1000), s_names[level], s_program, component);
    va_list ap;
    va_start (ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        n += vsnprintf (line + n, sizeof line - (size_t)n, fmt, ap);
    va_end (ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t rc = write (STDERR_FILENO, line, (size_t)n);
    (void)rc;
}
