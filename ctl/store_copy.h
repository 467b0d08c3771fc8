/*  store_copy: `zlane-ctl store copy --from DIR --to LOCATION [--batch N]`
    (store_copy.c says what it copies and checks). */
#ifndef ZL_CTL_STORE_COPY_H
#define ZL_CTL_STORE_COPY_H

/*  Run `store ARGS...` (argv[0] is "copy"); returns the exit status: 0
    copied and verified, 1 failed or a mismatch, 2 usage. */
int zl_ctl_store_copy (int argc, char **argv);

#endif
