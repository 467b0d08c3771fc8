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
  flush(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
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
  /** "acked", "transient", "throttled", "permanent", "lease_expired", "worker_dead", "max_run", "broker_restart", "leader_change" */
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
}

export type DlqFilter =
  | { lane?: string; tenant?: string; ids?: Array<string | bigint | number>; all?: boolean }
  | Array<string | bigint | number>
  | string;

export interface AdminOptions {
  endpoints?: Endpoints;
  curve?: CurveOptions;
  timeoutMs?: number;
}

export class Admin {
  constructor(opts?: AdminOptions);
  stats(): Promise<Stats>;
  dlqList(filter?: DlqFilter, opts?: { limit?: number; afterId?: string }): Promise<DeadLetter[]>;
  dlqShow(jobId: string | bigint): Promise<DeadLetter>;
  dlqRedrive(filter: DlqFilter): Promise<number>;
  dlqPurge(filter: DlqFilter): Promise<number>;
  /** Cancel jobs (as zlane-ctl cancel): one answer per id, in order. A running job's
   * worker is told (its handler's job.signal aborts, nothing is settled). */
  cancel(...ids: Array<string | string[]>): Promise<CancelResult[]>;
  pause(lane: string): Promise<void>;
  resume(lane: string): Promise<void>;
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
  | { type: "dlqAlert"; topic: string; depth: number; oldestAgeMs: number };

export interface SubscriberOptions {
  endpoints?: Endpoints;
  /** Topic prefixes ("dlq.", "dlq.emails.", "alert.dlq"); default all. */
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

export function readCert(file: string): { publicKey: string; secretKey: string; metadata: Record<string, string> };
export const protoPath: string;
