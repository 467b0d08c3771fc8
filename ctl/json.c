#include "json.h"

void
zl_json_bytes (FILE *out, const uint8_t *data, size_t len)
{
    fputc ('"', out);
    for (size_t i = 0; i < len; i++) {
        uint8_t c = data[i];
        if (c == '"' || c == '\\')
            fprintf (out, "\\%c", c);
        else if (c == '\n')
            fputs ("\\n", out);
        else if (c == '\t')
            fputs ("\\t", out);
        else if (c < 0x20 || c >= 0x7f)
            fprintf (out, "\\u%04x", c); // bytes, not code points: lossless and valid
        else
            fputc (c, out);
    }
    fputc ('"', out);
}

void
zl_json_str (FILE *out, const char *s)
{
    const char *p = s ? s : "";
    size_t n = 0;
    while (p[n])
        n++;
    zl_json_bytes (out, (const uint8_t *)p, n);
}
