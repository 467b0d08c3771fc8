/*  pollitems: wait for zmq_pollitem_t items as zmq_poll does, in one
    system call when it can.

    zmq_poll looks at its items with a zero timeout before it sleeps: two
    poll(2) calls for every wait that finds nothing at once. A loop whose
    items are all plain descriptors (the broker's own ZMTP routers' epoll
    sets, the commit thread's eventfd) needs one: this polls them itself,
    and hands items with a libzmq socket among them to zmq_poll. */
#ifndef ZL_POLLITEMS_H
#define ZL_POLLITEMS_H

#include <zmq.h>

/*  Wait up to `timeout_ms` (-1: no limit) for the `n` items' events, as
    zmq_poll: sets each item's revents (ZMQ_POLLIN, ZMQ_POLLOUT, and
    ZMQ_POLLERR for an error or hang-up on a descriptor) and returns how
    many have some, 0 on a timeout, -1 with errno (EINTR) on failure. */
int zl_poll_items (zmq_pollitem_t *items, int n, long timeout_ms);

#endif
