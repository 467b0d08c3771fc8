// Types of the zlane Node.js client (hand-written; the wire schema itself is
// loaded at run time from proto/zlane.proto). Job ids are decimal strings.
import { EventEmitter } from "node:events";

/** Broker endpoints: "tcp://a:5570,tcp://b:5570" or an array; one is used at a time. */
export type Endpoints = string | string[];

/** CURVE: the broker's public certificate and this client's _secret certificate (zlane-ctl keygen), or the Z85 keys. */
export type CurveOptions =
  | { serverCert: string; clientCert: string }
  | { serverKey: string; publicKey: string; secretKey: string };

export type Headers = Record<string, string> | Array<[string, string]> | Array<{ key: string; value: string }>;

export interface JobSpec {
  tenant: string;
  lane: string;
  /** Buffer/Uint8Array as is, a string as UTF-8, anything else as JSON. */
  payload?: Buffer | Uint8Array | string | unknown;
  /** Idempotency key; without one the library makes "<instance>-<seq>" (generated_key). */
  key?: string;
  idempotencyKey?: string;
  delayMs?: number;
  /** 0 = the lane's default. */
  maxAttempts?: number;
  leaseMs?: number;
  maxRunMs?: number;
  headers?: Headers;
  /** Join this open batch (of the same tenant; opened before, or by an earlier spec of the same submitMany). */
  batch?: string;
  /**
   * Open a batch, this job its callback (run once the batch is closed and every job
   * of it settled; its job.batch the summary): a batch id (1-128 of [A-Za-z0-9._:-],
   * not all digits), or true / "" for the broker to name it after the job id.
   */
  openBatch?: string | boolean;
  /** With openBatch: nothing runs when the batch settles (the job only places it). */
  noCallback?: boolean;
  /** With openBatch: close the batch at once after this Submit's jobs joined it. */
  close?: boolean;
  /**
   * 0 (lowest) to 9 (highest): within the job's flow (lane x tenant) a higher one
   * runs first, FIFO within a priority; fair queuing across tenants is unchanged.
   * Omitted (or null): none sent, the broker's default 5. Outside 0..9 (or not an
   * integer): RangeError, nothing sent.
   */
  priority?: number | null;
  /**
   * The broker's deadline for the job, an absolute time: ms since the epoch (the
   * broker's wall clock) or a Date. Past it (or past maxAgeMs, or the lane's max_age,
   * whichever comes first) the job is never dispatched again (a running attempt is
   * stopped) and is dead-lettered with outcome "expired". Omitted, null or 0: none.
   * Already past at submit: rejected by the broker (InvalidJobError). Not a number or
   * Date: TypeError; negative or not an integer: RangeError; nothing sent.
   * (Not ProducerOptions.deadlineMs, this client's own time to keep trying.)
   */
  deadlineMs?: number | Date | null;
  /**
   * The job's maximum age, ms counted from its acceptance (0..2^32-1): past it, as
   * deadlineMs. Omitted, null or 0: none. Not a number: TypeError; negative, not an
   * integer or above 2^32-1: RangeError; nothing sent.
   */
  maxAgeMs?: number | null;
  /**
   * Ordering key (FIFO group): the jobs of this tenant and lane with the same key run
   * one at a time, in the order the broker accepted them; a job being retried holds the
   * ones after it. 1 to 256 bytes; not with dependsOn or openBatch (InvalidError).
   * Not a string: TypeError; longer: RangeError; nothing sent.
   */
  orderingKey?: string | null;
}

export interface SubmitOptions {
  /** false: reject with QueueFullError at once when there is no credit (and on QUEUE_FULL / STORE_FULL). */
  block?: boolean;
  /** Resolve with a SubmitResult instead of the job id. */
  detail?: boolean;
}

export interface SubmitResult {
  jobId: string;
  /** The application's key was seen before: jobId is the original job. */
  duplicate: boolean;
  idempotencyKey: string;
  /** Times the job went on the wire. */
  sends: number;
  /** A job that opened a batch: the batch's id; "" otherwise. */
  batchId: string;
}

export interface ProducerOptions {
  endpoints?: Endpoints;
  client?: string;
  curve?: CurveOptions;
  /** Per job, from the submit call; default 30000. */
  deadlineMs?: number;
  /** Job specs per Submit frame; default 256. */
  maxBatch?: number;
  /** Default for SubmitOptions.block; default true. */
  block?: boolean;
}

export interface ProducerStats {
  submitted: number;
  accepted: number;
  rejected: number;
  timedOut: number;
  specsSent: number;
  resent: number;
  retried: number;
  connects: number;
  disconnects: number;
  moves: number;
}

export class Producer extends EventEmitter {
  constructor(opts?: ProducerOptions);
  readonly endpoint: string;
  readonly connected: boolean;
  readonly outstanding: number;
  readonly creditAvailable: number;
  readonly lastError: string;
  readonly stats: ProducerStats;
  ready(timeoutMs?: number): Promise<void>;
  submit(spec: JobSpec, opts?: SubmitOptions & { detail?: false }): Promise<string>;
  submit(spec: JobSpec, opts: SubmitOptions & { detail: true }): Promise<SubmitResult>;
  submitMany(specs: Iterable<JobSpec>, opts?: SubmitOptions & { detail?: false }): Promise<string[]>;
  submitMany(specs: Iterable<JobSpec>, opts: SubmitOptions & { detail: true }): Promise<SubmitResult[]>;
  /** Submit `spec` as a new batch's callback job; resolves with the batch's id (spec.batchId, or the broker's name). */
  openBatch(spec: Omit<JobSpec, "openBatch" | "batch"> & { batchId?: string }, opts?: Omit<SubmitOptions, "detail">): Promise<string>;
  /**
   * Close a batch once every job submitted before this call was answered; resolves when
   * the broker confirmed it (closing a closed batch is no error). Rejects with BatchError
   * (unknown batch, another tenant's, cancelled) or TimeoutError (default: the job deadline).
   */
  closeBatch(batchId: string, opts?: { timeoutMs?: number }): Promise<void>;
  flush(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

/** A batch's progress (Admin.batchShow), its summary once settled (a callback's job.batch, the batchDone event). */
export interface BatchInfo {
  batchId: string;
  /** false: the broker does not know it (never opened, or forgotten). */
  found: boolean;
  tenant: string;
  /** The callback's lane. */
  lane: string;
  /** The callback job (the batch's record). */
  jobId: string;
  /** false: opened with noCallback. */
  callback: boolean;
  closed: boolean;
  /** Closed and every job settled: the callback was enqueued. */
  settled: boolean;
  /** Its callback job was cancelled: it never settles. */
  cancelled: boolean;
  jobs: number;
  acked: number;
  /** Dead-lettered (also those purged since). */
  dead: number;
  cancelledJobs: number;
  pending: number;
  /** Ids of the dead and cancelled jobs, ascending, at most 1000. */
  failed: string[];
  /** Failed ids beyond those listed. */
  failedMore: number;
  openedAtMs: number;
  closedAtMs: number;
  settledAtMs: number;
}

export interface Job {
  id: string;
  /** 1 for the first delivery. */
  attempt: number;
  tenant: string;
  lane: string;
  payload: Buffer;
  headers: Record<string, string>;
  /** The producer's key, or "job-<id>". */
  idempotencyKey: string;
  leaseMs: number;
  maxRunMs: number;
  maxAttempts: number;
  /** Broker wall clock, ms since the epoch. */
  enqueuedAt: number;
  /** A batch's callback job: the batch as it settled; undefined for other jobs. */
  batch?: BatchInfo;
  /** Its ordering key ("" none). */
  orderingKey: string;
  /** The last progress checkpoint an earlier attempt saved, or null. */
  checkpoint: Buffer | null;
  /** Save progress (sent at once, before the job's Ack or Nack); a later attempt gets it as checkpoint. */
  saveCheckpoint(data: Buffer | Uint8Array | string): void;
  /** Aborted when the lease is lost (or presumed lost), max run time passes, or a forced stop. */
  signal: AbortSignal;
  text(): string;
  json<T = unknown>(): T;
}

export type Handler = (job: Job) => unknown | Promise<unknown>;

export interface WorkerOptions {
  endpoints?: Endpoints;
  name?: string;
  concurrency?: number;
  prefetch?: number;
  handlers?: Record<string, Handler>;
  lanes?: string[];
  /** Used for lanes without their own handler. */
  handler?: Handler;
  /** Must match the broker's --heartbeat; default 1000. */
  heartbeatMs?: number;
  liveness?: number;
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  drainMs?: number;
  /** Extend leases at half-life; default true. */
  extend?: boolean;
  curve?: CurveOptions;
  /** Signals that drain the worker, e.g. ["SIGTERM", "SIGINT"]; default none. */
  stopSignals?: NodeJS.Signals[];
}

export interface WorkerStats {
  received: number;
  acked: number;
  nacked: number;
  settled: number;
  refused: number;
  extendsSent: number;
  leaseLost: number;
  reconnects: number;
}

export class Worker extends EventEmitter {
  constructor(opts?: WorkerOptions);
  readonly name: string;
  readonly lanes: string[];
  readonly stats: WorkerStats;
  /** Resolves once the worker stopped. */
  readonly closed: Promise<void>;
  handle(lane: string, fn: Handler): this;
  start(): this;
  stop(opts?: { force?: boolean }): Promise<void>;
}

export interface Attempt {
  attempt: number;
  worker: string;
  startedAtMs: number;
  endedAtMs: number;
  /** "acked", "transient", "throttled", "permanent", "not_yet", "lease_expired", "worker_dead", "max_run", "broker_restart", "leader_change" */
  outcome: string;
  error: string;
}

export interface DeadLetter {
  jobId: string;
  tenant: string;
  lane: string;
  payload: Buffer;
  idempotencyKey: string;
  enqueuedAtMs: number;
  deadAtMs: number;
  error: string;
  attempts: Attempt[];
  headers: Record<string, string>;
}

export interface GroupStats {
  lane: string;
  tenant: string;
  ready: number;
  delayed: number;
  inFlight: number;
  dlq: number;
  oldestReadyAgeMs: number;
  oldestDlqAgeMs: number;
  submitted: number;
  acked: number;
  nackedTransient: number;
  nackedThrottled: number;
  nackedPermanent: number;
  leaseExpired: number;
  deadLettered: number;
  runUs: number;
  throttled: number;
  capped: number;
  paused: boolean;
}

export interface Latency {
  name: string;
  count: number;
  p50Us: number;
  p90Us: number;
  p99Us: number;
  maxUs: number;
}

export interface Stats {
  uptimeMs: number;
  counters: Record<string, number>;
  lanes: GroupStats[];
  tenants: GroupStats[];
  groups: GroupStats[];
  latencies: Record<string, Latency>;
  workers: number;
  producers: number;
  storeBackend: string;
  role: string;
  epoch: number;
  storeReachable: boolean;
  takeovers: number;
  fenced: number;
  leader: string;
  tenantsKnown: number;
  groupsMatched: number;
}

export type DlqFilter =
  | {
      lane?: string;
      tenant?: string;
      ids?: Array<string | bigint | number>;
      /** the final error contains this text (any case) */
      errorContains?: string;
      /** died at or after / before (broker wall clock, ms since the epoch) */
      deadFromMs?: number;
      deadToMs?: number;
      all?: boolean;
    }
  | Array<string | bigint | number>
  | string;

export interface AdminOptions {
  endpoints?: Endpoints;
  curve?: CurveOptions;
  timeoutMs?: number;
}

export interface WorkerInfo {
  name: string;
  /** the connection's peer address ("" unknown) */
  host: string;
  lanes: string[];
  capacity: number;
  inFlight: number;
  lastSeenAgeMs: number;
  /** Ready.instance (a 64-bit number, as a decimal string) */
  instance: string;
  /** the heartbeat interval its Ready stated, ms (at most 60000; 0 unstated) */
  heartbeatMs: number;
}

export class Admin {
  constructor(opts?: AdminOptions);
  /** lanesOnly: no per-tenant or lane x tenant rows (cheap to poll); groups: a sorted page
   * of lane x tenant rows chosen by the broker (Stats.groupsMatched counts them all) */
  stats(opts?: {
    lanesOnly?: boolean;
    groups?: {
      lane?: string;
      tenantContains?: string;
      sort?: "ready" | "delayed" | "inFlight" | "dlq" | "oldestReady" | "submitted" | "acked" | "capped" | "throttled" | "tenant" | "lane";
      ascending?: boolean;
      offset?: number;
      limit?: number;
    };
  }): Promise<Stats>;
  /** The connected workers (zlane-ctl workers). */
  workers(): Promise<WorkerInfo[]>;
  /** A job's state, or its outcome once final (zlane-ctl job show). */
  jobShow(jobId: string | bigint): Promise<Record<string, unknown>>;
  /** The cron schedules (zlane-ctl schedule list). */
  scheduleList(): Promise<Array<Record<string, unknown>>>;
  schedulePause(name: string): Promise<void>;
  scheduleResume(name: string): Promise<void>;
  dlqList(filter?: DlqFilter, opts?: { limit?: number; afterId?: string }): Promise<DeadLetter[]>;
  dlqShow(jobId: string | bigint): Promise<DeadLetter>;
  dlqRedrive(filter: DlqFilter): Promise<number>;
  dlqPurge(filter: DlqFilter): Promise<number>;
  /** Cancel jobs (as zlane-ctl cancel): one answer per id, in order. A running job's
   * worker is told (its handler's job.signal aborts, nothing is settled). */
  cancel(...ids: Array<string | string[]>): Promise<CancelResult[]>;
  pause(lane: string): Promise<void>;
  resume(lane: string): Promise<void>;
  /** A batch's progress (as zlane-ctl batch show); found is false for one the broker does not know. */
  batchShow(batchId: string): Promise<BatchInfo>;
  close(): Promise<void>;
}

export interface CancelResult {
  jobId: string;
  outcome: "cancelled" | "already_cancelled" | "finished" | "unknown";
  /** cancelled: the state it left ("ready", "delayed", "leased", "dead"); already_cancelled: the state it was cancelled in */
  state: string;
  cancelledAtMs: number;
}

export type ZlaneEvent =
  | ({ type: "deadLetter"; topic: string } & DeadLetter)
  | { type: "dlqAlert"; topic: string; depth: number; oldestAgeMs: number }
  | ({ type: "batchDone"; topic: string } & BatchInfo);

export interface SubscriberOptions {
  endpoints?: Endpoints;
  /** Topic prefixes ("dlq.", "dlq.emails.", "alert.dlq", "batch.", "batch.<id>"); default all. */
  topics?: string | string[];
  curve?: CurveOptions;
}

export class Subscriber implements AsyncIterable<ZlaneEvent> {
  constructor(opts?: SubscriberOptions);
  connected(timeoutMs?: number): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<ZlaneEvent>;
  close(): Promise<void>;
}

export class ZlaneError extends Error {
  code: string;
}
export class RejectedError extends ZlaneError {
  reason: string;
}
export class InvalidJobError extends RejectedError {}
export class PayloadTooLargeError extends RejectedError {}
export class UnknownLaneError extends RejectedError {}
export class UnauthorizedError extends RejectedError {}
/** REJECT_UNKNOWN_BATCH: the batch to join is not open here (never opened, settled, another tenant's). */
export class UnknownBatchError extends RejectedError {}
/** REJECT_BATCH_CLOSED: the batch to join is closed (or cancelled). */
export class BatchClosedError extends RejectedError {}
/** REJECT_BATCH_EXISTS: a batch of the id to open exists. */
export class BatchExistsError extends RejectedError {}
/** closeBatch: the broker did not close the batch. */
export class BatchError extends ZlaneError {
  batchId: string;
  reason: string;
}
export class QueueFullError extends RejectedError {
  retryAfterMs: number;
}
export class StoreFullError extends QueueFullError {}
export class TimeoutError extends ZlaneError {
  /** The job went on the wire: it may have been accepted. */
  sent: boolean;
  idempotencyKey: string;
}
export class ClosedError extends ZlaneError {}
export class ConfigError extends ZlaneError {}
export class AdminError extends ZlaneError {}
export class JobCancelledError extends ZlaneError {
  why: string;
}
export class PermanentError extends ZlaneError {
  constructor(message: string);
}
export class ThrottledError extends ZlaneError {
  constructor(message: string, retryAfterMs?: number);
  retryAfterMs: number;
}
/**
 * Thrown by a handler: what the job needs has not arrived yet (Nack NOT_YET).
 * Retried after retryAfterMs (0, the default: the broker's 1 s) without spending
 * an attempt; dead-lettered past the lane's max_not_yet.
 */
export class NotYetError extends ZlaneError {
  constructor(message?: string, retryAfterMs?: number);
  retryAfterMs: number;
}

export function readCert(file: string): { publicKey: string; secretKey: string; metadata: Record<string, string> };
export const protoPath: string;
