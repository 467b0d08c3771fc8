/*  pollitems: see pollitems.h. */
#include "pollitems.h"

#include <poll.h>

// More plain descriptors than this go to zmq_poll (no loop here has them).
#define MAX_FDS 16

int
zl_poll_items (zmq_pollitem_t *items, int n, long timeout_ms)
{
    struct pollfd fds[MAX_FDS];
    if (n > MAX_FDS)
        return zmq_poll (items, n, timeout_ms);
    for (int i = 0; i < n; i++) {
        if (items[i].socket)
            return zmq_poll (items, n, timeout_ms);
        fds[i] = (struct pollfd){.fd = items[i].fd,
                                 .events = (short)((items[i].events & ZMQ_POLLIN ? POLLIN : 0) |
                                                   (items[i].events & ZMQ_POLLOUT ? POLLOUT : 0) |
                                                   (items[i].events & ZMQ_POLLPRI ? POLLPRI : 0))};
    }
    int rc = poll (fds, (nfds_t)n, timeout_ms < 0 ? -1 : (int)timeout_ms);
    for (int i = 0; i < n; i++) {
        short r = rc > 0 ? fds[i].revents : 0;
        items[i].revents = (short)((r & POLLIN ? ZMQ_POLLIN : 0) | (r & POLLOUT ? ZMQ_POLLOUT : 0) |
                                   (r & POLLPRI ? ZMQ_POLLPRI : 0) |
                                   (r & ~(POLLIN | POLLOUT | POLLPRI) ? ZMQ_POLLERR : 0));
    }
    return rc;
}
