/*  test_http: the metrics page's HTTP server (broker/http.c) with a real TCP
    client on 127.0.0.1, and the Prometheus rendering (broker/metrics.c).
    Checked: GET and HEAD answered; 404, 405, 400 (garbage, a NUL byte, a
    control character in the target, another version), 431
    (a head past the limit) answered and counted; a request in two pieces;
    a silent connection closed by the sweep; connections past the limit
    closed at once; the text format's families, samples and label escaping. */
#define _GNU_SOURCE
#include "clock.h"
#include "http.h"
#include "log.h"
#include "metrics.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#define WAIT_MS 5000
#define T0 1000000

static const char *s_body = "zlane_up 1\n";

static int
s_page (void *arg, const char *path, const char *query, char **body, size_t *len,
        const char **content_type)
{
    (void)arg;
    if (strcmp (path, "/metrics"))
        return 404;
    // the query comes apart from the path
    if (!strcmp (query, "echo=1"))
        *body = strdup ("echo=1");
    else
        *body = strdup (s_body);
    *len = strlen (*body);
    *content_type = "text/plain; version=0.0.4";
    return 200;
}

static zl_http_t *
s_server (void)
{
    char err[256] = "";
    zl_http_t *http = zl_http_new ("tcp://127.0.0.1:*", s_page, NULL, err, sizeof err);
    if (!http)
        fail_msg ("zl_http_new: %s", err);
    return http;
}

// A TCP connection to the server from 127.0.0.`src`.
static int
s_connect_from (zl_http_t *http, int src)
{
    const char *ep = zl_http_endpoint (http);
    const char *colon = strrchr (ep, ':');
    assert_non_null (colon);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons ((uint16_t)atoi (colon + 1))};
    a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    struct sockaddr_in from = {.sin_family = AF_INET};
    from.sin_addr.s_addr = htonl (INADDR_LOOPBACK - 1 + (uint32_t)src);
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    assert_true (fd >= 0);
    assert_int_equal (bind (fd, (struct sockaddr *)&from, sizeof from), 0);
    assert_int_equal (connect (fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static int
s_connect (zl_http_t *http)
{
    return s_connect_from (http, 1);
}

// Serve until the client has read everything up to the server's close, or
// until `serve_ms`; returns what the client read (caller frees). `*closed`
// says whether the server closed the connection.
static char *
s_pump (zl_http_t *http, int fd, int64_t now, int serve_ms, bool *closed)
{
    char *got = calloc (1, 1);
    size_t n = 0;
    *closed = false;
    int64_t deadline = zl_clock_mono_ms () + serve_ms;
    while (!*closed && zl_clock_mono_ms () < deadline) {
        zmq_pollitem_t items[2] = {{zl_http_socket (http), 0, ZMQ_POLLIN, 0},
                                   {NULL, fd, ZMQ_POLLIN, 0}};
        zmq_poll (items, 2, (long)(deadline - zl_clock_mono_ms ()));
        if (items[0].revents & ZMQ_POLLIN)
            zl_http_serve (http, now);
        if (items[1].revents & ZMQ_POLLIN) {
            char buf[4096];
            ssize_t r = read (fd, buf, sizeof buf);
            if (r <= 0)
                *closed = true;
            else {
                got = realloc (got, n + (size_t)r + 1);
                memcpy (got + n, buf, (size_t)r);
                n += (size_t)r;
                got[n] = '\0';
            }
        }
    }
    return got;
}

// Send `request` on a new connection and return the whole answer.
static char *
s_fetch (zl_http_t *http, const char *request, size_t len)
{
    int fd = s_connect (http);
    assert_int_equal (write (fd, request, len), (ssize_t)len);
    bool closed;
    char *got = s_pump (http, fd, T0, WAIT_MS, &closed);
    close (fd);
    if (!closed)
        fail_msg ("the server did not close the connection; it said: %s", got);
    return got;
}

static void
s_expect (zl_http_t *http, const char *request, const char *status_line)
{
    char *got = s_fetch (http, request, strlen (request));
    if (strncmp (got, status_line, strlen (status_line)))
        fail_msg ("for %s: wanted '%s', got '%s'", request, status_line, got);
    assert_non_null (strstr (got, "Connection: close\r\n"));
    free (got);
}

static void
test_get_and_head (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    char *got = s_fetch (http, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                         sizeof "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" - 1);
    assert_non_null (strstr (got, "HTTP/1.0 200 OK\r\n"));
    assert_non_null (strstr (got, "Content-Type: text/plain; version=0.0.4\r\n"));
    char want[64];
    snprintf (want, sizeof want, "Content-Length: %zu\r\n", strlen (s_body));
    assert_non_null (strstr (got, want));
    const char *body = strstr (got, "\r\n\r\n");
    assert_non_null (body);
    assert_string_equal (body + 4, s_body);
    free (got);
    // a query string is not part of the path, and reaches the page
    s_expect (http, "GET /metrics?x=1 HTTP/1.0\r\n\r\n", "HTTP/1.0 200 OK\r\n");
    got = s_fetch (http, "GET /metrics?echo=1 HTTP/1.0\r\n\r\n",
                   sizeof "GET /metrics?echo=1 HTTP/1.0\r\n\r\n" - 1);
    assert_string_equal (strstr (got, "\r\n\r\n") + 4, "echo=1");
    free (got);
    got = s_fetch (http, "HEAD /metrics HTTP/1.1\r\n\r\n",
                   sizeof "HEAD /metrics HTTP/1.1\r\n\r\n" - 1);
    assert_non_null (strstr (got, "HTTP/1.0 200 OK\r\n"));
    assert_non_null (strstr (got, want)); // the length it would have
    assert_string_equal (strstr (got, "\r\n\r\n") + 4, "");
    free (got);
    assert_int_equal (zl_http_counts (http).requests, 4);
    assert_int_equal (zl_http_counts (http).refused, 0);
    zl_http_destroy (&http);
    assert_null (http);
}

static void
test_bad_requests_are_answered_and_counted (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    s_expect (http, "GET /nope HTTP/1.1\r\n\r\n", "HTTP/1.0 404 Not Found\r\n");
    s_expect (http, "POST /metrics HTTP/1.1\r\n\r\n", "HTTP/1.0 405 Method Not Allowed\r\n");
    s_expect (http, "hello\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    s_expect (http, "GET /metrics\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    s_expect (http, "GET metrics HTTP/1.1\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    s_expect (http, "GET /metrics SPDY/3\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    s_expect (http, "GET  /metrics HTTP/1.1\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    s_expect (http, "GET /met\rrics HTTP/1.1\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    s_expect (http, "GET /metrics HTTP/1.2\r\n\r\n", "HTTP/1.0 400 Bad Request\r\n");
    char *got = s_fetch (http, "GET /metrics\0 HTTP/1.1\r\n\r\n",
                         sizeof "GET /metrics\0 HTTP/1.1\r\n\r\n" - 1);
    assert_non_null (strstr (got, "HTTP/1.0 400 Bad Request\r\n"));
    free (got);
    // a head longer than the limit, never finished
    size_t big = ZL_HTTP_MAX_REQUEST + 100;
    char *huge = malloc (big);
    memcpy (huge, "GET /metrics HTTP/1.1\r\nX-Pad: ", 30);
    memset (huge + 30, 'a', big - 30);
    got = s_fetch (http, huge, big);
    assert_non_null (strstr (got, "HTTP/1.0 431 Request Header Fields Too Large\r\n"));
    free (got);
    free (huge);
    assert_int_equal (zl_http_counts (http).refused, 11);
    // and it still serves
    s_expect (http, "GET /metrics HTTP/1.1\r\n\r\n", "HTTP/1.0 200 OK\r\n");
    assert_int_equal (zl_http_counts (http).requests, 1);
    zl_http_destroy (&http);
}

// A request that arrives in two pieces is answered once it is whole.
static void
test_request_in_pieces (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    int fd = s_connect (http);
    assert_int_equal (write (fd, "GET /met", 8), 8);
    bool closed;
    char *got = s_pump (http, fd, T0, 200, &closed); // nothing yet
    assert_false (closed);
    assert_string_equal (got, "");
    free (got);
    assert_int_equal (write (fd, "rics HTTP/1.1\r\n\r\n", 17), 17);
    got = s_pump (http, fd, T0, WAIT_MS, &closed);
    assert_true (closed);
    assert_non_null (strstr (got, "HTTP/1.0 200 OK\r\n"));
    free (got);
    close (fd);
    zl_http_destroy (&http);
}

// Serve (at `now`) until the server holds `waiting` connections and has
// evicted `evicted`, at most WAIT_MS.
static void
s_serve_until (zl_http_t *http, int64_t now, size_t waiting, uint64_t evicted)
{
    int64_t deadline = zl_clock_mono_ms () + WAIT_MS;
    while (zl_http_waiting (http) != waiting || zl_http_counts (http).evicted != evicted) {
        int64_t left = deadline - zl_clock_mono_ms ();
        if (left <= 0)
            fail_msg ("the server holds %zu connections and evicted %llu; wanted %zu and %llu",
                      zl_http_waiting (http), (unsigned long long)zl_http_counts (http).evicted,
                      waiting, (unsigned long long)evicted);
        zmq_pollitem_t item = {zl_http_socket (http), 0, ZMQ_POLLIN, 0};
        zmq_poll (&item, 1, (long)left);
        zl_http_serve (http, now);
    }
}

// Open a connection from 127.0.0.`src` that sends "GET" and no more, and
// serve until the server holds `waiting` and has evicted `evicted`.
static int
s_slow_from (zl_http_t *http, int src, size_t waiting, uint64_t evicted)
{
    int fd = s_connect_from (http, src);
    assert_int_equal (write (fd, "GET", 3), 3);
    s_serve_until (http, T0, waiting, evicted);
    return fd;
}

// The server closed `fd` without a word.
static void
s_expect_closed (zl_http_t *http, int fd)
{
    bool closed;
    char *got = s_pump (http, fd, T0, WAIT_MS, &closed);
    assert_true (closed);
    assert_string_equal (got, "");
    free (got);
}

// Send the rest of "GET /metrics HTTP/1.1" on a connection that sent "GET":
// it is answered 200 and closed.
static void
s_finish (zl_http_t *http, int fd)
{
    const char *rest = " /metrics HTTP/1.1\r\n\r\n";
    assert_int_equal (write (fd, rest, strlen (rest)), (ssize_t)strlen (rest));
    bool closed;
    char *got = s_pump (http, fd, T0, WAIT_MS, &closed);
    assert_true (closed);
    if (strncmp (got, "HTTP/1.0 200 OK\r\n", 17))
        fail_msg ("wanted a 200, got '%s'", got);
    free (got);
}

// A connection that has not sent a complete head ZL_HTTP_HEAD_MS after it
// opened is closed by the sweep (counted as refused), not a moment before.
static void
test_head_deadline (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    int fd = s_connect (http);
    assert_int_equal (write (fd, "GET /met", 8), 8);
    s_serve_until (http, T0, 1, 0);
    zl_http_sweep (http, T0 + ZL_HTTP_HEAD_MS - 1);
    assert_int_equal (zl_http_waiting (http), 1);
    assert_int_equal (zl_http_counts (http).refused, 0);
    zl_http_sweep (http, T0 + ZL_HTTP_HEAD_MS);
    assert_int_equal (zl_http_waiting (http), 0);
    s_expect_closed (http, fd);
    close (fd);
    assert_int_equal (zl_http_counts (http).refused, 1);
    assert_int_equal (zl_http_counts (http).evicted, 0);
    // one that finishes in time is answered
    fd = s_connect (http);
    assert_int_equal (write (fd, "GET /met", 8), 8);
    s_serve_until (http, T0, 1, 0);
    zl_http_sweep (http, T0 + ZL_HTTP_HEAD_MS - 1);
    assert_int_equal (write (fd, "rics HTTP/1.1\r\n\r\n", 17), 17);
    bool closed;
    char *got = s_pump (http, fd, T0, WAIT_MS, &closed);
    assert_true (closed);
    assert_non_null (strstr (got, "HTTP/1.0 200 OK\r\n"));
    free (got);
    close (fd);
    assert_int_equal (zl_http_counts (http).requests, 1);
    zl_http_destroy (&http);
}

// The tests below fill the table from four addresses, none over its limit.
_Static_assert(ZL_HTTP_MAX_CONNS / 4 <= ZL_HTTP_MAX_PER_ADDR, "four addresses fill the table");

// With ZL_HTTP_MAX_CONNS waiting (from four addresses, none over its
// limit), each new connection evicts the oldest one: they go in the order
// they came. The newest is answered when its request comes.
static void
test_eviction_oldest_first (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    int fds[ZL_HTTP_MAX_CONNS];
    for (int i = 0; i < ZL_HTTP_MAX_CONNS; i++)
        fds[i] = s_slow_from (http, 2 + i % 4, (size_t)i + 1, 0);
    assert_int_equal (zl_http_counts (http).refused, 0);
    int newer[3];
    for (int k = 0; k < 3; k++) {
        newer[k] = s_slow_from (http, 6 + k, ZL_HTTP_MAX_CONNS, (uint64_t)k + 1);
        s_expect_closed (http, fds[k]); // the oldest of those left
    }
    assert_int_equal (zl_http_counts (http).refused, 3);
    // the newest finishes its request and is answered
    s_finish (http, newer[2]);
    assert_int_equal (zl_http_waiting (http), ZL_HTTP_MAX_CONNS - 1);
    assert_int_equal (zl_http_counts (http).evicted, 3);
    for (int i = 0; i < ZL_HTTP_MAX_CONNS; i++)
        close (fds[i]);
    for (int k = 0; k < 3; k++)
        close (newer[k]);
    zl_http_destroy (&http);
}

// One address holds at most ZL_HTTP_MAX_PER_ADDR: past that its own oldest
// goes, and older connections from other addresses stay.
static void
test_per_address_limit (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    enum { OTHERS = 3, CROWD = ZL_HTTP_MAX_PER_ADDR + 4 };
    int others[OTHERS], crowd[CROWD];
    for (int i = 0; i < OTHERS; i++)
        others[i] = s_slow_from (http, 3, (size_t)i + 1, 0);
    for (int i = 0; i < CROWD; i++) {
        size_t held = i < ZL_HTTP_MAX_PER_ADDR ? (size_t)i + 1 : ZL_HTTP_MAX_PER_ADDR;
        uint64_t evicted = i < ZL_HTTP_MAX_PER_ADDR ? 0 : (uint64_t)(i + 1 - ZL_HTTP_MAX_PER_ADDR);
        crowd[i] = s_slow_from (http, 2, OTHERS + held, evicted);
    }
    for (int i = 0; i < CROWD - ZL_HTTP_MAX_PER_ADDR; i++)
        s_expect_closed (http, crowd[i]);
    assert_int_equal (zl_http_counts (http).evicted, CROWD - ZL_HTTP_MAX_PER_ADDR);
    assert_int_equal (zl_http_waiting (http), OTHERS + ZL_HTTP_MAX_PER_ADDR);
    // the others were not touched: each is still there to be answered
    for (int i = 0; i < OTHERS; i++)
        s_finish (http, others[i]);
    assert_int_equal (zl_http_counts (http).requests, OTHERS);
    for (int i = 0; i < OTHERS; i++)
        close (others[i]);
    for (int i = 0; i < CROWD; i++)
        close (crowd[i]);
    zl_http_destroy (&http);
}

// When the table is full, a crowd gives up its own slots before a lone
// client's, even an older one: the oldest of the crowd's addresses goes.
static void
test_crowd_evicted_before_a_lone_client (void **state)
{
    (void)state;
    zl_http_t *http = s_server ();
    int lone = s_slow_from (http, 9, 1, 0); // the oldest of all
    int crowd[ZL_HTTP_MAX_CONNS];           // 16 from each of four addresses
    for (int i = 0; i < ZL_HTTP_MAX_CONNS - 1; i++)
        crowd[i] = s_slow_from (http, 2 + i % 4, (size_t)i + 2, 0);
    crowd[ZL_HTTP_MAX_CONNS - 1] =
        s_slow_from (http, 2 + (ZL_HTTP_MAX_CONNS - 1) % 4, ZL_HTTP_MAX_CONNS, 1);
    s_expect_closed (http, crowd[0]); // not `lone`
    // `lone` still waits and is answered
    s_finish (http, lone);
    assert_int_equal (zl_http_counts (http).evicted, 1);
    close (lone);
    for (int i = 0; i < ZL_HTTP_MAX_CONNS; i++)
        close (crowd[i]);
    zl_http_destroy (&http);
}

// ---------------------------------------------------------------- rendering
static int
s_count (const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr (p, needle)); p += strlen (needle))
        n++;
    return n;
}

static void
test_render (void **state)
{
    (void)state;
    zl_counter_t counters[] = {{"jobs_accepted", 3}, {"store_jobs", 5}, {"store_commits", 7}};
    zl_group_stats_t groups[] = {{.lane = "chat",
                                  .tenant = "acme",
                                  .ready = 2,
                                  .in_flight = 1,
                                  .oldest_ready_age_ms = 1500,
                                  .acked = 9,
                                  .nacked_transient = 4,
                                  .run_us = 2500000},
                                 {.lane = "chat", .tenant = "we\"ird\\na\nme", .dlq = 1}};
    zl_group_stats_t lanes[] = {{.lane = "chat",
                                 .tenant = "",
                                 .paused = true,
                                 .ready = 2,
                                 .dlq = 1,
                                 .nacked_transient = 4}};
    zl_latency_t lat[] = {{"submit_to_start", 12, 1000, 2000, 3000, 4000}};
    zl_stats_t st = {.uptime_ms = 61500,
                     .n_counters = 3,
                     .counters = counters,
                     .n_lanes = 1,
                     .lanes = lanes,
                     .n_groups = 2,
                     .groups = groups,
                     .n_latencies = 1,
                     .latencies = lat,
                     .workers = 2,
                     .producers = 1,
                     .store_backend = "lmdb"};
    size_t len;
    char *text = zl_metrics_render (&st, true, &len);
    assert_int_equal (strlen (text), len);
    const char *want[] = {
        "zlane_uptime_seconds 61.500\n",
        "zlane_workers 2\n",
        "# TYPE zlane_store_info gauge\nzlane_store_info{backend=\"lmdb\"} 1\n",
        "# TYPE zlane_jobs_accepted_total counter\nzlane_jobs_accepted_total 3\n",
        "# TYPE zlane_store_jobs gauge\nzlane_store_jobs 5\n",
        "# TYPE zlane_store_commits_total counter\nzlane_store_commits_total 7\n",
        "zlane_ready{lane=\"chat\",tenant=\"acme\"} 2\n",
        "zlane_in_flight{lane=\"chat\",tenant=\"acme\"} 1\n",
        "zlane_oldest_ready_age_seconds{lane=\"chat\",tenant=\"acme\"} 1.5\n",
        "zlane_flow_acked_total{lane=\"chat\",tenant=\"acme\"} 9\n",
        "zlane_flow_run_seconds_total{lane=\"chat\",tenant=\"acme\"} 2.5\n",
        "zlane_flow_nacked_total{lane=\"chat\",tenant=\"acme\",class=\"transient\"} 4\n",
        "zlane_dlq{lane=\"chat\",tenant=\"we\\\"ird\\\\na\\nme\"} 1\n",
        "zlane_lane_paused{lane=\"chat\"} 1\n",
        "zlane_latency_seconds{kind=\"submit_to_start\",quantile=\"0.99\"} 0.003000\n",
        "zlane_latency_count_total{kind=\"submit_to_start\"} 12\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr (text, want[i]))
            fail_msg ("the metrics lack '%s'; they are:\n%s", want[i], text);
    // each family is declared once, and every sample line is NAME[{...}] VALUE
    assert_int_equal (s_count (text, "# TYPE zlane_ready "), 1);
    assert_int_equal (s_count (text, "# TYPE zlane_flow_nacked_total "), 1);
    assert_int_equal (s_count (text, "zlane_ready{"), 2);
    for (char *line = strtok (text, "\n"); line; line = strtok (NULL, "\n")) {
        if (line[0] == '#')
            continue;
        char *sp = strrchr (line, ' ');
        assert_non_null (sp);
        char *end;
        strtod (sp + 1, &end);
        if (*end != '\0' || strncmp (line, "zlane_", 6) != 0)
            fail_msg ("not a sample line: '%s'", line);
    }
    free (text);

    // per lane only: the same families, label lane alone, the lane's sums
    text = zl_metrics_render (&st, false, &len);
    const char *per_lane[] = {"\nzlane_ready{lane=\"chat\"} 2\n", "\nzlane_dlq{lane=\"chat\"} 1\n",
                              "\nzlane_flow_nacked_total{lane=\"chat\",class=\"transient\"} 4\n",
                              "\nzlane_jobs_accepted_total 3\n"};
    for (size_t i = 0; i < sizeof per_lane / sizeof per_lane[0]; i++)
        if (!strstr (text, per_lane[i]))
            fail_msg ("the per-lane metrics lack '%s'; they are:\n%s", per_lane[i], text);
    assert_null (strstr (text, "tenant="));
    free (text);
}

int
main (void)
{
    zl_log_set_level (ZL_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_get_and_head),
        cmocka_unit_test (test_bad_requests_are_answered_and_counted),
        cmocka_unit_test (test_request_in_pieces),
        cmocka_unit_test (test_head_deadline),
        cmocka_unit_test (test_eviction_oldest_first),
        cmocka_unit_test (test_per_address_limit),
        cmocka_unit_test (test_crowd_evicted_before_a_lone_client),
        cmocka_unit_test (test_render),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
