/*  replay_main: runs a fuzz target's LLVMFuzzerTestOneInput over files, for
    builds without libFuzzer (gcc, the normal and ASan builds). Each argument
    is a file or a directory of files (not recursive; dot files skipped).
    Exits 0 after "N inputs replayed"; a crash or an abort in the target is
    the failure. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerInitialize (int *argc, char ***argv) __attribute__ ((weak));

static int s_count;

static int
s_replay_file (const char *path)
{
    FILE *f = fopen (path, "rb");
    if (!f) {
        perror (path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc (cap);
    size_t n;
    while (buf && (n = fread (buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap)
            buf = realloc (buf, cap *= 2);
    }
    fclose (f);
    if (!buf)
        abort ();
    // an exact-size copy, so that ASan sees reads past the end of the input
    uint8_t *copy = malloc (len ? len : 1);
    memcpy (copy, buf, len);
    free (buf);
    LLVMFuzzerTestOneInput (copy, len);
    free (copy);
    s_count++;
    return 0;
}

static int
s_by_name (const struct dirent **a, const struct dirent **b)
{
    return strcmp ((*a)->d_name, (*b)->d_name);
}

static int
s_replay (const char *path)
{
    struct stat sb;
    if (stat (path, &sb) != 0) {
        perror (path);
        return -1;
    }
    if (!S_ISDIR (sb.st_mode))
        return s_replay_file (path);
    struct dirent **names;
    int n = scandir (path, &names, NULL, s_by_name);
    if (n < 0) {
        perror (path);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && rc == 0) {
            char full[4096];
            snprintf (full, sizeof full, "%s/%s", path, names[i]->d_name);
            rc = s_replay_file (full);
        }
        free (names[i]);
    }
    free (names);
    return rc;
}

int
main (int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize (&argc, &argv);
    for (int i = 1; i < argc; i++)
        if (s_replay (argv[i]) != 0)
            return 1;
    printf ("%s: %d inputs replayed\n", argv[0], s_count);
    return 0;
}
