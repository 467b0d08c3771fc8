/*  sched_policy: the scheduler's policies (scheduler.h says how each picks
    the next job). A header of their own so that config.h can name them:
    scheduler.h includes lane.h, which includes config.h, so config.h
    cannot include scheduler.h. */
#ifndef ZL_SCHED_POLICY_H
#define ZL_SCHED_POLICY_H

/*  Weighted fair queuing between tenants, or global arrival order. */
typedef enum { ZL_SCHED_WFQ = 0, ZL_SCHED_FIFO = 1 } zl_sched_policy_t;
#define ZL_SCHED_QUANTUM_US 1000 // WFQ's default quantum (zl_sched_set_quantum)

#endif
