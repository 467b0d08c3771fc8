/*  test_endpoints: the endpoints a broker advertises (zl_endpoints_advertise),
    which a standby's NOT_LEADER names: tcp://HOST:PORT with the configured
    host, else the bound address, else the host name for a wildcard bind;
    IPv6 hosts in brackets; ipc and inproc as they are. */
#include "endpoints.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void
s_expect (const char *bound, const char *advertise, const char *want)
{
    char out[256] = "";
    if (zl_endpoints_advertise (bound, advertise, out, sizeof out) != 0)
        fail_msg ("'%s' (advertise %s): refused", bound, advertise ? advertise : "none");
    if (strcmp (out, want) != 0)
        fail_msg ("'%s' (advertise %s): '%s', not '%s'", bound, advertise ? advertise : "none", out,
                  want);
}

static void
test_advertise (void **state)
{
    (void)state;
    char host[256] = "";
    assert_int_equal (gethostname (host, sizeof host), 0);
    char want[300];

    // the bound address, when it is one address
    s_expect ("tcp://127.0.0.1:5570", NULL, "tcp://127.0.0.1:5570");
    s_expect ("tcp://10.1.2.3:40123", NULL, "tcp://10.1.2.3:40123");
    s_expect ("tcp://[::1]:5571", NULL, "tcp://[::1]:5571");
    // a wildcard: this machine's name, with the port bound
    snprintf (want, sizeof want, "tcp://%s:5570", host);
    s_expect ("tcp://0.0.0.0:5570", NULL, want);
    snprintf (want, sizeof want, "tcp://%s:39001", host);
    s_expect ("tcp://[::]:39001", NULL, want);
    // advertise wins over both, and an IPv6 host gets its brackets
    s_expect ("tcp://0.0.0.0:5570", "broker-a.example.net", "tcp://broker-a.example.net:5570");
    s_expect ("tcp://127.0.0.1:5573", "10.0.0.5", "tcp://10.0.0.5:5573");
    s_expect ("tcp://[::]:5572", "2001:db8::5", "tcp://[2001:db8::5]:5572");
    s_expect ("tcp://[::]:5572", "[2001:db8::5]", "tcp://[2001:db8::5]:5572");
    // a name every client shares already
    s_expect ("ipc:///run/zlane/frontend", NULL, "ipc:///run/zlane/frontend");
    s_expect ("ipc:///run/zlane/frontend", "broker-a", "ipc:///run/zlane/frontend");
    s_expect ("inproc://zlane-frontend-3", NULL, "inproc://zlane-frontend-3");

    // no port: refused
    char out[64];
    assert_int_equal (zl_endpoints_advertise ("tcp://127.0.0.1", NULL, out, sizeof out), -1);
    assert_int_equal (zl_endpoints_advertise ("tcp://127.0.0.1:", NULL, out, sizeof out), -1);
    assert_int_equal (zl_endpoints_advertise ("tcp://:5570", NULL, out, sizeof out), -1);
    // cut to the room given, never past it
    char small[12];
    memset (small, 'x', sizeof small);
    assert_int_equal (zl_endpoints_advertise ("tcp://127.0.0.1:5570", NULL, small, sizeof small),
                      0);
    assert_int_equal (strlen (small), sizeof small - 1);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_advertise),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
