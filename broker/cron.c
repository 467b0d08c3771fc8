#define _GNU_SOURCE // timegm
#include "cron.h"

#include "wire.h" // zl_parse_duration_ms

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MIN_EVERY_MS 1000
#define HORIZON_S (8LL * 366 * 86400)

static const char *const s_months[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                       "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const s_days[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

// One value of a field: a number, or a name (months 1-12, days 0-6).
static int
s_value (const char *s, size_t len, int field, long *out)
{
    if (len == 3 && (field == 3 || field == 4)) {
        const char *const *names = field == 3 ? s_months : s_days;
        int n = field == 3 ? 12 : 7;
        for (int i = 0; i < n; i++)
            if (!strncasecmp (s, names[i], 3)) {
                *out = field == 3 ? i + 1 : i;
                return 0;
            }
        return -1;
    }
    if (len == 0 || len > 2)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit ((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

// Parse field `field` (0 minute .. 4 weekday) of `len` bytes at `s` into a bit set.
static int
s_field (const char *s, size_t len, int field, uint64_t *bits, bool *any, char *err, size_t errlen)
{
    static const char *const what[] = {"minute", "hour", "day of the month", "month",
                                       "day of the week"};
    static const long lo[] = {0, 0, 1, 1, 0}, hi[] = {59, 23, 31, 12, 7};
    *bits = 0;
    *any = len == 1 && s[0] == '*';
    const char *end = s + len;
    while (s < end) {
        const char *comma = memchr (s, ',', (size_t)(end - s));
        const char *item_end = comma ? comma : end;
        const char *slash = memchr (s, '/', (size_t)(item_end - s));
        const char *range_end = slash ? slash : item_end;
        long a = lo[field], b = hi[field], step = 1;
        if (field == 4)
            b = 6; // "*": Sunday once
        if (!(range_end - s == 1 && *s == '*')) {
            const char *dash = memchr (s, '-', (size_t)(range_end - s));
            if (s_value (s, (size_t)((dash ? dash : range_end) - s), field, &a) != 0 ||
                (dash && s_value (dash + 1, (size_t)(range_end - dash - 1), field, &b) != 0))
                goto bad;
            if (!dash)
                b = slash ? hi[field] : a;
        }
        if (slash &&
            (s_value (slash + 1, (size_t)(item_end - slash - 1), -1, &step) != 0 || step < 1))
            goto bad;
        if (a < lo[field] || b > hi[field] || a > b) {
            snprintf (err, errlen, "cron: %s %ld-%ld is out of %ld-%ld", what[field], a, b,
                      lo[field], hi[field]);
            return -1;
        }
        for (long v = a; v <= b; v += step)
            *bits |= 1ull << (field == 4 && v == 7 ? 0 : v);
        s = comma ? comma + 1 : end;
        if (comma && s == end)
            goto bad;
    }
    if (*bits)
        return 0;
bad:
    snprintf (err, errlen, "cron: bad %s field (lists a,b, ranges a-b, steps */n or a-b/n%s)",
              what[field], field >= 3 ? ", names" : "");
    return -1;
}

int
zl_cron_parse (const char *text, zl_cron_t *out, char *err, size_t errlen)
{
    memset (out, 0, sizeof *out);
    while (*text == ' ')
        text++;
    static const struct {
        const char *name, *expr;
    } macros[] = {{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
                  {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
                  {"@hourly", "0 * * * *"}};
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
        if (!strcmp (text, macros[i].name))
            return zl_cron_parse (macros[i].expr, out, err, errlen);
    if (!strncmp (text, "@every ", 7)) {
        uint64_t ms;
        if (zl_parse_duration_ms (text + 7, &ms) != 0 || ms < MIN_EVERY_MS) {
            snprintf (err, errlen, "cron: @every wants a duration of at least 1s (e.g. 30s, 5m)");
            return -1;
        }
        out->every_ms = ms;
        return 0;
    }
    if (text[0] == '@') {
        snprintf (err, errlen,
                  "cron: unknown macro '%s' (@yearly, @monthly, @weekly, @daily, "
                  "@hourly, @every DUR)",
                  text);
        return -1;
    }
    const char *s = text;
    uint64_t bits[5];
    bool any[5];
    for (int f = 0; f < 5; f++) {
        while (*s == ' ')
            s++;
        size_t len = strcspn (s, " ");
        if (len == 0) {
            snprintf (err, errlen,
                      "cron: '%s' has %d field(s), not 5 (minute hour "
                      "day-of-month month day-of-week)",
                      text, f);
            return -1;
        }
        if (s_field (s, len, f, &bits[f], &any[f], err, errlen) != 0)
            return -1;
        s += len;
    }
    while (*s == ' ')
        s++;
    if (*s) {
        snprintf (err, errlen, "cron: '%s' has more than 5 fields", text);
        return -1;
    }
    *out = (zl_cron_t){.minutes = bits[0],
                       .hours = (uint32_t)bits[1],
                       .days = (uint32_t)bits[2],
                       .months = (uint16_t)bits[3],
                       .weekdays = (uint8_t)bits[4],
                       .dom_any = any[2],
                       .dow_any = any[4]};
    return 0;
}

static bool
s_day_matches (const zl_cron_t *c, const struct tm *tm)
{
    bool dom = c->days & (1u << tm->tm_mday), dow = c->weekdays & (1u << tm->tm_wday);
    if (c->dom_any && c->dow_any)
        return true;
    if (c->dom_any)
        return dow;
    if (c->dow_any)
        return dom;
    return dom || dow; // both restricted: either (cron's rule)
}

int64_t
zl_cron_next (const zl_cron_t *c, int64_t after_ms)
{
    if (c->every_ms) {
        int64_t p = (int64_t)c->every_ms;
        return (after_ms >= 0 ? after_ms / p + 1 : 0) * p;
    }
    time_t t = (time_t)(after_ms / 60000 + 1) * 60; // the next whole minute
    time_t horizon = t + HORIZON_S;
    while (t < horizon) {
        struct tm tm;
        gmtime_r (&t, &tm);
        if (!(c->months & (1u << (tm.tm_mon + 1)))) { // the first minute of next month
            tm.tm_mon++;
            tm.tm_mday = 1;
            tm.tm_hour = tm.tm_min = 0;
        } else if (!s_day_matches (c, &tm)) { // of the next day
            tm.tm_mday++;
            tm.tm_hour = tm.tm_min = 0;
        } else if (!(c->hours & (1u << tm.tm_hour))) { // of the next hour
            tm.tm_hour++;
            tm.tm_min = 0;
        } else if (!(c->minutes & (1ull << tm.tm_min))) {
            tm.tm_min++;
        } else
            return (int64_t)t * 1000;
        tm.tm_sec = 0;
        t = timegm (&tm); // normalises the overflowed field
    }
    return -1;
}
