/*  json: just enough JSON writing for zlane-ctl's --json output. */
#ifndef ZL_CTL_JSON_H
#define ZL_CTL_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*  Write `s` as a JSON string (quoted, escaped). */
void zl_json_str (FILE *out, const char *s);
/*  Write `len` bytes as a JSON string; invalid UTF-8 and control bytes are
    escaped so the output stays valid JSON. */
void zl_json_bytes (FILE *out, const uint8_t *data, size_t len);

#endif
