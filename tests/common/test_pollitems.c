/*  test_pollitems: zl_poll_items answers as zmq_poll does, item for item
    (readable, writable, hung up, nothing), waits for a descriptor that
    becomes readable, and hands items with a libzmq socket to zmq_poll. */
#include "pollitems.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

// Both answers for the same items: return values and every revents equal.
static int
s_same_as_zmq_poll (zmq_pollitem_t *items, int n)
{
    zmq_pollitem_t theirs[8];
    assert_true (n <= 8);
    for (int i = 0; i < n; i++)
        theirs[i] = items[i];
    int rc = zl_poll_items (items, n, 0);
    assert_int_equal (rc, zmq_poll (theirs, n, 0));
    for (int i = 0; i < n; i++)
        assert_int_equal (items[i].revents, theirs[i].revents);
    return rc;
}

static void
test_descriptors (void **state)
{
    (void)state;
    int quiet = eventfd (0, EFD_NONBLOCK), ready = eventfd (0, EFD_NONBLOCK), p[2], sp[2];
    assert_true (quiet >= 0 && ready >= 0);
    assert_int_equal (pipe (p), 0);
    assert_int_equal (socketpair (AF_UNIX, SOCK_STREAM, 0, sp), 0);
    // nothing yet
    zmq_pollitem_t items[4] = {{NULL, quiet, ZMQ_POLLIN, 0}, {NULL, ready, ZMQ_POLLIN, 0}};
    assert_int_equal (s_same_as_zmq_poll (items, 2), 0);
    assert_int_equal (items[0].revents, 0);
    assert_int_equal (items[1].revents, 0);
    // one readable
    uint64_t one = 1;
    assert_int_equal (write (ready, &one, sizeof one), sizeof one);
    assert_int_equal (s_same_as_zmq_poll (items, 2), 1);
    assert_int_equal (items[0].revents, 0);
    assert_int_equal (items[1].revents, ZMQ_POLLIN);
    // a pipe whose writer is gone (hang-up), and a socket that can be written
    close (p[1]);
    items[2] = (zmq_pollitem_t){NULL, p[0], ZMQ_POLLIN, 0};
    items[3] = (zmq_pollitem_t){NULL, sp[0], ZMQ_POLLOUT, 0};
    assert_int_equal (s_same_as_zmq_poll (items, 4), 3);
    assert_true (items[2].revents & ZMQ_POLLERR);
    assert_int_equal (items[3].revents, ZMQ_POLLOUT);
    close (quiet);
    close (ready);
    close (p[0]);
    close (sp[0]);
    close (sp[1]);
}

static void *
s_signal (void *arg)
{
    uint64_t one = 1;
    ssize_t rc = write (*(int *)arg, &one, sizeof one);
    (void)rc;
    return NULL;
}

// A wait with a timeout returns when a descriptor becomes readable (here
// from another thread), and with 0 when none does.
static void
test_waits (void **state)
{
    (void)state;
    int fd = eventfd (0, EFD_NONBLOCK);
    zmq_pollitem_t item = {NULL, fd, ZMQ_POLLIN, 0};
    assert_int_equal (zl_poll_items (&item, 1, 20), 0);
    assert_int_equal (item.revents, 0);
    pthread_t t;
    assert_int_equal (pthread_create (&t, NULL, s_signal, &fd), 0);
    assert_int_equal (zl_poll_items (&item, 1, 30000), 1);
    assert_int_equal (item.revents, ZMQ_POLLIN);
    pthread_join (t, NULL);
    close (fd);
}

// Items with a libzmq socket among them: zmq_poll's answer.
static void
test_socket_items (void **state)
{
    (void)state;
    void *ctx = zmq_ctx_new ();
    void *a = zmq_socket (ctx, ZMQ_PAIR), *b = zmq_socket (ctx, ZMQ_PAIR);
    assert_int_equal (zmq_bind (a, "inproc://pollitems"), 0);
    assert_int_equal (zmq_connect (b, "inproc://pollitems"), 0);
    int fd = eventfd (0, EFD_NONBLOCK);
    zmq_pollitem_t items[2] = {{a, 0, ZMQ_POLLIN, 0}, {NULL, fd, ZMQ_POLLIN, 0}};
    assert_int_equal (zl_poll_items (items, 2, 0), 0);
    assert_int_equal (zmq_send (b, "x", 1, 0), 1);
    assert_int_equal (zl_poll_items (items, 2, 30000), 1);
    assert_int_equal (items[0].revents, ZMQ_POLLIN);
    assert_int_equal (items[1].revents, 0);
    close (fd);
    zmq_close (a);
    zmq_close (b);
    zmq_ctx_term (ctx);
}

int
main (void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test (test_descriptors),
        cmocka_unit_test (test_waits),
        cmocka_unit_test (test_socket_items),
    };
    return cmocka_run_group_tests (tests, NULL, NULL);
}
