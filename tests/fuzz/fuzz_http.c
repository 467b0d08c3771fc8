/*  fuzz_http: libFuzzer target for the metrics page's request parser
    (zl_http_parse, broker/http.c). An input is a request head as the server
    would hold it: at most ZL_HTTP_MAX_REQUEST bytes, no NUL byte, ended by
    a blank line (the server answers anything else before it parses). A
    parse must answer 400 or 405, or give a path that starts with '/' and a
    query, both inside the head and free of spaces and CR/LF. */
#include "http.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size > ZL_HTTP_MAX_REQUEST || memchr (data, '\0', size))
        return 0;
    char *buf = malloc (size + 1);
    if (!buf)
        abort ();
    memcpy (buf, data, size);
    buf[size] = '\0';
    if (!strstr (buf, "\r\n\r\n")) {
        free (buf);
        return 0;
    }
    bool head_only = false;
    char *path = NULL, *query = NULL;
    int rc = zl_http_parse (buf, &head_only, &path, &query);
    if (rc == 0) {
        bool inside = path >= buf && path < buf + size && query >= buf && query <= buf + size;
        if (!inside || path[0] != '/' || strpbrk (path, " \r\n?") || strpbrk (query, " \r\n"))
            abort ();
    } else if (rc != 400 && rc != 405)
        abort ();
    free (buf);
    return 0;
}
