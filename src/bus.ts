// createBus: the public face of rea. It validates and records events inside the caller's
// transaction, and runs the relay, the workers and (when leading) maintenance.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import type { SpanContext } from '@opentelemetry/api';
import { defaultHandlerBackoff } from './core/backoff.js';
import { databaseClock, type Clock } from './core/clock.js';
import { BusStateError, DatabaseError, DuplicateHandlerError, HandlerInUseError, InvalidFilterError, OptionsError, PayloadNotJsonError, PayloadTooLargeError, UnknownEventTypeError } from './core/errors.js';
import {
  patternMatches, validatePayload, type EventCatalog, type EventSchemas, type EventType, type MatchingTypes, type HandlerName,
  type PayloadInput, type ReaEvent,
} from './core/events.js';
import { errorMessage } from './core/errors-format.js';
import { findJsonProblem, unstorableText } from './core/json.js';
import { isJobId } from './core/job-id.js';
import { Lifecycle } from './core/lifecycle.js';
import { checkLogger, defaultLogger, type Logger } from './core/logger.js';
import { throttled } from './core/throttle.js';
import { busOptionsSchema, checkDatabaseOptions, DEFAULTS, handlerOptionsSchema, knownOptions, MAX_TIMER_MS, validateWith, type HandlerOptions } from './core/options.js';
import { activeSpanContext, currentTraceId, newTraceId, normalizeTraceId, spanInTrace } from './core/trace.js';
import { uuidv7 } from './core/uuid.js';
import type { Driver, EventInsert, EventRow, JobRow, Queryable, StatusCounts } from './driver/types.js';
import type { EventSummary, HandlerSummary, JobSummary } from './driver/admin.js';
import { eventListParams, isUuid, jobListParams, pageOf, rejectUnknownFilterKeys, type EventListFilter, type JobListFilter, type Page } from './core/filters.js';
import { LATEST_MIGRATION, notifyChannel } from './drivers/postgres/common.js';
import { PostgresDriver } from './drivers/postgres/driver.js';
import type { PGliteDatabase } from './drivers/pglite/database.js';
import { PGliteDriver } from './drivers/pglite/driver.js';
import { evaluateAlerts, formatMs, type Alert, type AlertThresholds } from './admin/alerts.js';
import { Leader } from './maintenance/leader.js';
import { Retention, type AppTableRetention, type RetentionReport } from './maintenance/retention.js';
import { Rescuer } from './maintenance/rescuer.js';
import { Vacuum } from './maintenance/vacuum.js';
import { MaintenanceLane, ServiceRunner } from './maintenance/service.js';
import { Relay } from './relay/relay.js';
import { deferInto, isReaTransaction, makeTransaction, noteRecorded, type Transaction, type TransactionState } from './tx/rea.js';
import type { HandlerContext, RegisteredHandler } from './worker/registry.js';
import { Worker } from './worker/worker.js';
import { checkHandlerName, replayEventsToHandler, replayToHandler, unknownHandler, type EventReplayFilter, type HandlerBulkReplay, type HandlerReplay } from './worker/replay.js';
import { HandlerChannel } from './channels/handler/channel.js';
import { WebhookChannel, WEBHOOK_RUN_GRACE_MS, type WebhookOptions, type WebhookSettings } from './channels/webhook/channel.js';
import { compileAllowlist } from './channels/webhook/address.js';
import {
  createWebhookApi, type DeliveriesApi, type EndpointsApi, type NewDelivery, type WebhookAttempt,
} from './channels/webhook/endpoints.js';
import { AttemptRetention } from './maintenance/attempt-retention.js';
import { EndpointHealth } from './maintenance/endpoint-health.js';

export type DatabaseOptions =
  | {
    postgres: string | pg.Pool;
    poolSize?: number;
    /** How long a statement on rea's connections waits for its answer before rea closes that connection (default 30 s; 0: for ever). */
    queryTimeoutMs?: number;
    /**
     * 'transaction': `postgres` reaches PostgreSQL through a pooler in transaction mode (PgBouncer,
     * RDS Proxy, Supavisor): rea's statements go unprepared, and `listen` must be given.
     */
    pooler?: 'transaction';
    /**
     * The LISTEN connection's own connection string, straight to PostgreSQL (past the pooler), or
     * false: no LISTEN, so other processes' events and jobs are found by polling. Default: `postgres`.
     */
    listen?: string | false;
  }
  /** A data directory, 'memory://', or a PGlite instance (PGliteDatabase: what rea uses of one). */
  | { pglite: string | PGliteDatabase }
  | { driver: Driver };

export interface BusOptions<S extends EventSchemas> {
  database: DatabaseOptions;
  events: EventCatalog<S>;
  /** Schema holding rea's tables (default 'rea'). */
  schema?: string;
  /** Largest serialized payload record() accepts, in bytes (default 256 KiB). */
  maxPayloadBytes?: number;
  /** Connections in the pool rea creates for PostgreSQL (default 10). */
  poolSize?: number;
  /** Names this process in leases and job rows (default host:pid:random). */
  instanceId?: string;
  relay?: { enabled?: boolean; batchSize?: number; minPollMs?: number; maxPollMs?: number; maxFanAttempts?: number; concurrency?: number; handOff?: boolean; inlineMs?: number };
  worker?: {
    enabled?: boolean; concurrency?: number; minPollMs?: number; maxPollMs?: number;
    completionFlushMs?: number; completionBatchSize?: number; leaseMarginMs?: number; prefetch?: number;
    /** How often a running worker marks its handlers as had, for the handler_unattended alert (default 60 s). */
    heartbeatMs?: number;
  };
  notifyDebounceMs?: number;
  leader?: { ttlMs?: number; renewMs?: number };
  /** How often a started bus checks the schema for a newer rea's migrations (default 60 s). */
  migrations?: { checkIntervalMs?: number };
  rescuer?: { intervalMs?: number; batchSize?: number };
  /** Leader-run VACUUM of rea's tables: by default only while the server's autovacuum is off. */
  vacuum?: { mode?: 'auto' | 'always' | 'never'; intervalMs?: number };
  /** Storage bounds; defaults in DEFAULTS.retention. Windows and intervals take -1 for keep / never. */
  retention?: {
    enabled?: boolean;
    batchSize?: number;
    pauseMs?: number;
    events?: { olderThanMs?: number; everyMs?: number; archive?: boolean; archiveOlderThanMs?: number };
    jobs?: { completedMs?: number; discardedMs?: number; cancelledMs?: number; everyMs?: number };
    consumes?: { olderThanMs?: number | 'auto'; everyMs?: number };
    appEveryMs?: number;
  };
  /** Alert thresholds; defaults in DEFAULTS.alerts; -1 turns an alert off. */
  alerts?: Partial<AlertThresholds>;
  overview?: { exactCountLimit?: number };
  logger?: Logger;
  clock?: Clock;
  /** Webhook delivery: SSRF opt-outs, timeouts, retries, endpoint health, attempt log; defaults in DEFAULTS.webhooks. */
  webhooks?: WebhookOptions;
}

export interface RecordOptions {
  /** What the event is about (an order number…): used for coalescing and filtering. */
  subject?: string | null;
  /**
   * Defaults to the active trace (a rea handler's event, or an OpenTelemetry span), else a new id.
   * Any text is rea's correlation id (stored, searchable, in every log line); only a W3C trace id
   * (32 hex digits, not all zeros; lower-cased when given in upper case) becomes the OpenTelemetry
   * parent of its handlers' spans.
   */
  traceId?: string;
  /** Who or what caused the event (a user id, a service name). */
  createdBy?: string;
  /** Payload schema version (default 1). */
  version?: number;
}

export type RecordItem<S extends EventSchemas> = {
  [T in EventType<S>]: { type: T; payload: PayloadInput<S, T> } & RecordOptions;
}[EventType<S>];

export interface Overview extends StatusCounts {
  oldestUnfannedAgeMs: number | null;
  /** Discarded jobs (the same figure as jobs.discarded): dead letters waiting for a retry or retention. */
  discarded: number;
  /** Every table in rea's schema, total size with indexes and TOAST, in bytes. */
  tables: { name: string; totalBytes: number }[];
  /** Figures that are planner estimates (exact counts stop at overview.exactCountLimit), e.g. 'jobs.completed'. */
  estimated: string[];
  /** What needs a person, most urgent first; empty when all is well. */
  alerts: Alert[];
  /** The "now" the ages and alerts were computed at. */
  at: Date;
}

type Handler<S extends EventSchemas, P extends string> = (event: ReaEvent<S, MatchingTypes<S, P>>, ctx: HandlerContext) => unknown | Promise<unknown>;

export interface Bus<S extends EventSchemas> {
  readonly schema: string;
  readonly driver: Driver;
  readonly lifecycle: Lifecycle;
  readonly instanceId: string;
  /** Apply rea's migrations; `newer`: those of a newer rea already applied (logged as a warning). */
  migrate(): Promise<{ applied: number[]; newer: number[] }>;
  /**
   * `patterns`: event types or patterns ('order.*', '*.paid', '*'). One that matches no type of the
   * catalog does not compile: the name is then typed `no event type matches '<pattern>'`, which says which.
   * A generic wrapper compiles too (`<T extends 'order.created' | 'order.paid'>(type: T) => bus.on(type, …)`):
   * its patterns are checked by T's constraint, and its handler's event is typed by that constraint.
   */
  on<P extends string>(
    patterns: P | readonly P[],
    name: HandlerName<S, P>,
    fn: Handler<S, P>,
    options?: HandlerOptions,
  ): void;
  record<T extends EventType<S>>(tx: unknown, type: T, payload: PayloadInput<S, T>, options?: RecordOptions): Promise<string>;
  recordMany(tx: unknown, items: readonly RecordItem<S>[]): Promise<string[]>;
  transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T>;
  /** Tell the relay events were committed in a transaction rea could not see (it polls otherwise). */
  wake(): void;
  start(): Promise<void>;
  stop(options?: { timeoutMs?: number }): Promise<void>;
  overview(): Promise<Overview>;
  events: {
    get(id: string): Promise<EventRow | null>;
    requeue(target: readonly string[] | { poisoned: true }): Promise<string[]>;
    /** Newest first, filtered, one page at a time (keyset on the UUIDv7 id); InvalidFilterError names a bad filter. */
    list(filter?: EventListFilter): Promise<Page<EventSummary>>;
    /** Send a stored event to one webhook endpoint again, as a new delivery (new webhook-id). */
    replay(eventId: string, options: { endpointId: string }): Promise<NewDelivery>;
    /**
     * Send a stored, fanned-out event to one in-process handler again, as a new job (a handler
     * added since, or one whose effect must be made again); the handler's consume record for it
     * is deleted, so a transactional handler runs again. Refused while a job of it for the event waits or runs.
     */
    replay(eventId: string, options: { handler: string }): Promise<HandlerReplay>;
    /**
     * Every stored, fanned-out event that matches `filter` and the handler's patterns to one
     * handler, as new jobs, oldest first, in batches of 500 (each its own transaction): history
     * for a handler added since. Events with a job of it still waiting or running are skipped.
     */
    replay(filter: EventReplayFilter, options: { handler: string }): Promise<HandlerBulkReplay>;
    /** Every webhook attempt made for the event, newest first. */
    attempts(eventId: string, options?: { limit?: number; before?: string }): Promise<WebhookAttempt[]>;
  };
  /** Webhook endpoints: create (returns the secret once), list, get, update, enable, disable, rotateSecret, delete, attempts, test. */
  endpoints: EndpointsApi;
  /** Webhook deliveries (a delivery id is its job id). */
  deliveries: DeliveriesApi;
  jobs: {
    forEvent(eventId: string): Promise<JobRow[]>;
    /** Newest first, by state, kind, handler or event, one page at a time; InvalidFilterError names a bad filter. */
    list(filter?: JobListFilter): Promise<Page<JobSummary>>;
    /** Dead-letter waiting jobs (available, retryable) by hand; returns the ids that moved. */
    discard(ids: readonly string[]): Promise<string[]>;
    /**
     * Run discarded (or cancelled) jobs again now. A retried job keeps its attempt count and gets
     * its handler's full allowance on top; jobs whose event retention removed are left alone, and
     * so is a handler's job while another of that handler for the same event waits or runs (of
     * several for one event, only the newest is retried): the handler never runs twice at once.
     * Returns the ids rescheduled; NotFoundError (listing the known ones) for a handler no bus registered.
     */
    retry(target: readonly string[] | { state: 'discarded' | 'cancelled'; handler?: string }): Promise<string[]>;
    /** Cancel waiting jobs (available, retryable); running and final jobs are left alone. Returns the ids cancelled. */
    cancel(ids: readonly string[]): Promise<string[]>;
  };
  /** The subscriptions every bus has stored (handlers table), and forgetting one no process runs any more. */
  handlers: {
    /** Each handler with its patterns, last heartbeat and waiting / running jobs (counts capped at the exact-count limit). */
    list(): Promise<HandlerSummary[]>;
    /**
     * For a handler removed or renamed in the code: delete its row, so the relay makes no more
     * jobs for it, and cancel its waiting jobs (in batches of 1,000, each its own transaction),
     * so retention can trim their events. Refused (BusStateError) while a running worker has had
     * it within the handler_unattended window, unless `force`. A name whose row is gone already
     * but whose jobs wait (retried by name since) has those cancelled. NotFoundError when there
     * is no such handler and no job of it waits.
     */
    forget(name: string, options?: { force?: boolean }): Promise<{ cancelled: number }>;
  };
  retention: {
    /** Trim an application table by the same bounded cleaner (before start()). */
    register(spec: AppTableRetention): void;
    /** One pass of every rule now; with dryRun, report what it would remove. */
    run(options?: { dryRun?: boolean }): Promise<RetentionReport>;
  };
  /** The handler registered under `name` (for rea/testing). */
  handler(name: string): RegisteredHandler | undefined;
  /**
   * For rea/testing: a payload of `type` as handlers receive it, checked as record() checks it
   * (schema, JSON, size) and read back as stored; throws what record() would.
   */
  deliveredPayload(type: string, payload: unknown): Promise<unknown>;
  /** The logger handlers' ctx.log lines go to (for rea/testing). */
  readonly logger: Logger;
  /** One relay round now (for tests and the CLI); resolves with what it did. */
  relayOnce(): Promise<'full' | 'some' | 'none'>;
  readonly isLeader: boolean;
}

/**
 * The bus calls that write to rea's tables (bus.migrate has its own check), by group: what a bus
 * that found a newer rea's breaking migration refuses, and what the CLI and the panel check before
 * each write (guardWrites).
 */
export const ADMIN_WRITES: Readonly<Record<string, readonly string[]>> = {
  events: ['requeue', 'replay'],
  jobs: ['retry', 'cancel', 'discard'],
  handlers: ['forget'],
  endpoints: ['create', 'update', 'enable', 'disable', 'rotateSecret', 'delete', 'test'],
  deliveries: ['resend'],
  retention: ['run'],
  driver: ['execScript'],
};

export function createBus<S extends EventSchemas>(options: BusOptions<S>): Bus<S> {
  const { database, events: catalog, logger, clock: givenClock, ...rest } = options;
  if (!catalog || !Array.isArray(catalog.types)) throw new OptionsError('events', 'pass the result of defineEvents({ … })');
  const o = validateWith(busOptionsSchema, rest, 'createBus');
  const log = logger === undefined ? defaultLogger() : checkLogger(logger);
  const clock = givenClock ?? databaseClock;
  const instanceId = o.instanceId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  const maxPayloadBytes = o.maxPayloadBytes ?? DEFAULTS.maxPayloadBytes;
  const relayOptions = { ...DEFAULTS.relay, ...o.relay };
  const workerOptions = { ...DEFAULTS.worker, ...o.worker };
  const leaseMarginMs = workerOptions.leaseMarginMs;
  const lifecycle = new Lifecycle((err, signal) =>
    log.error({ err: errorMessage(err), signal }, 'a lifecycle listener threw; rea carries on as if it had returned'));
  const driver = makeDriver(database, o.schema ?? DEFAULTS.schema, o.poolSize ?? DEFAULTS.poolSize, log);
  // A driver of the application's own works on its own schema, so the bus takes that one: its
  // wake-up channel must be the one a bus given a URL and that schema listens and notifies on.
  if (typeof driver.schema !== 'string' || driver.schema === '') throw new OptionsError('database.driver', 'has no schema (a Driver names the schema it works on)');
  if (o.schema !== undefined && o.schema !== driver.schema) {
    throw new OptionsError('schema', `'${o.schema}' is not the given driver's schema '${driver.schema}'; leave schema out with database.driver, or make them the same`);
  }
  const schema = driver.schema;
  const channel = notifyChannel(schema);
  const handlers = new Map<string, RegisteredHandler>();
  const known = new Set<string>(catalog.types);

  let state: 'idle' | 'started' | 'stopped' = 'idle';
  // A start() on its way (stop() lets it finish, then stops what it started) and the stop, which
  // every later stop() call waits for.
  let starting: Promise<void> | undefined;
  let stopping: Promise<void> | undefined;
  /** The first stop() call's timeoutMs (10 s), or a later call's shorter one; and whether the worker's stop has begun. */
  let stopTimeoutMs = 10_000;
  let stopBegun = false;
  let unlisten: (() => Promise<void>) | undefined;
  // While this process's worker runs its handlers, it says so (handlers.seen_at), so the overview
  // can tell a handler no process runs any more from one whose workers are merely busy.
  let heartbeat: NodeJS.Timeout | undefined;
  // A beat still on its way (waiting behind a lock on the handlers table, or for a slow server)
  // is the one that counts: a tick skips rather than queue another beside it, each holding a
  // pool connection the relay and the worker need (a lock held for six intervals held the pool).
  let beating: Promise<void> | undefined;
  const beat = () => {
    beating ??= driver.admin.handlersSeen({ names: [...handlers.keys()] })
      .catch((err) => log.warn({ err: errorMessage(err) }, 'handler heartbeat failed; will retry'))
      .finally(() => { beating = undefined; });
    return beating;
  };
  // A started bus reads the schema's migrations again every migrations.checkIntervalMs (see
  // checkSchema). `tooNew`: the newer rea's breaking migration it found; from then on this process
  // takes no work and record() refuses, and `stoppingWork` is the stop of its relay, worker and
  // leadership. `newerWarned`: the newer migrations (not breaking) already warned about.
  let schemaCheck: NodeJS.Timeout | undefined;
  let checking: Promise<void> | undefined;
  let tooNew: DatabaseError | undefined;
  let stoppingWork: Promise<void> | undefined;
  const newerWarned = new Set<number>();
  const migrationCheckMs = o.migrations?.checkIntervalMs ?? DEFAULTS.migrations.checkIntervalMs;

  // At most one NOTIFY per payload per window per process (the first at once), sent outside any
  // business transaction.
  const notifier = throttled(o.notifyDebounceMs ?? DEFAULTS.notifyDebounceMs, (payload: string) => {
    if (state !== 'stopped') driver.notify(channel, payload).catch((err) => log.warn({ err: (err as Error).message }, 'wake-up notify failed'));
  });

  const webhookOptions = { ...DEFAULTS.webhooks, ...o.webhooks };
  try {
    compileAllowlist(webhookOptions.allowlist);
  } catch (err) {
    if (err instanceof OptionsError) throw new OptionsError(`createBus.webhooks.${err.field}`, err.message.replace(/^invalid option [^:]+: /, ''));
    throw err;
  }
  const webhookSettings: WebhookSettings = {
    allowPrivateNetworks: webhookOptions.allowPrivateNetworks,
    allowlist: [...webhookOptions.allowlist],
    timeoutMs: webhookOptions.timeoutMs,
    connectTimeoutMs: webhookOptions.connectTimeoutMs,
    maxResponseBytes: webhookOptions.maxResponseBytes,
    maxRetryAfterMs: webhookOptions.maxRetryAfterMs,
    // Taken from the caller's object: a function is not data for zod to copy.
    resolve: options.webhooks?.resolve,
    // Half the worker's slots by default, at least one: deliveries to endpoints that hang until the
    // HTTP timeout would otherwise hold every slot, and in-process handlers would wait behind them.
    concurrency: webhookOptions.concurrency === 'auto' ? Math.max(1, Math.floor(workerOptions.concurrency / 2)) : webhookOptions.concurrency,
    concurrencyPerEndpoint: webhookOptions.concurrencyPerEndpoint,
    maxAttempts: webhookOptions.maxAttempts,
    // Longer than the worker's cut-off (HTTP timeout + grace), so a slow endpoint is never rescued into a duplicate.
    leaseMs: webhookOptions.timeoutMs + WEBHOOK_RUN_GRACE_MS + leaseMarginMs,
    failingDelayMs: webhookOptions.failingDelayMs,
    secretGraceMs: webhookOptions.secretGraceMs,
  };
  const webhooksRun = webhookOptions.enabled !== false;
  // Events a transactional handler records through ctx.tx wake the relay once they commit, as
  // those of bus.transaction do.
  const channels = [new HandlerChannel(driver, handlers, clock, leaseMarginMs, (events) => {
    lifecycle.emit('transaction:committed', { events });
    bus.wake();
  }), ...(webhooksRun ? [new WebhookChannel(driver, webhookSettings, { lifecycle, clock })] : [])];
  const worker = new Worker(driver, channels, workerOptions, { lifecycle, log, clock, workerId: instanceId });
  const webhookApi = createWebhookApi(driver, webhookSettings, {
    lifecycle, clock, knownTypes: catalog.types,
    onJobsInserted: () => {
      if (state === 'started' && workerOptions.enabled !== false) worker.wake();
      if (driver.capabilities.listenNotify) notifier('j');
    },
  });
  const relay = new Relay(driver, {
    ...relayOptions,
    webhook: { maxAttempts: webhookSettings.maxAttempts, leaseMs: webhookSettings.leaseMs, failingDelayMs: webhookSettings.failingDelayMs },
  }, {
    lifecycle, log, clock,
    onFanned: () => {
      worker.wake();
      if (driver.capabilities.listenNotify) notifier('j');
    },
    handOff: workerOptions.enabled !== false && relayOptions.handOff ? worker : undefined,
  });
  // The rescuer returns stuck jobs: it runs on its own, never behind a long retention pass. The
  // housekeeping passes take turns in one lane, so maintenance holds at most two connections.
  const housekeeping = new MaintenanceLane();
  const maintenance = [new ServiceRunner(new Rescuer(driver, o.rescuer?.intervalMs ?? DEFAULTS.rescuer.intervalMs, o.rescuer?.batchSize ?? DEFAULTS.rescuer.batchSize, { clock, lifecycle }), log)];
  maintenance.push(
    new ServiceRunner(new Vacuum(driver, o.vacuum?.intervalMs ?? DEFAULTS.vacuum.intervalMs, o.vacuum?.mode ?? DEFAULTS.vacuum.mode, { lifecycle, log }), log, housekeeping),
    new ServiceRunner(new EndpointHealth(driver, {
      intervalMs: webhookOptions.healthIntervalMs, disableAfterMs: webhookOptions.disableAfterMs, batchSize: 1000,
    }, { clock, lifecycle }), log, housekeeping),
  );
  const retentionSettings = {
    ...DEFAULTS.retention, ...o.retention,
    events: { ...DEFAULTS.retention.events, ...o.retention?.events },
    jobs: { ...DEFAULTS.retention.jobs, ...o.retention?.jobs },
    consumes: { ...DEFAULTS.retention.consumes, ...o.retention?.consumes },
  };
  // Like the retention rules: pauses of retention.pauseMs between full batches, and a pass ends
  // between batches once this process stops leading or stops.
  maintenance.push(new ServiceRunner(new AttemptRetention(driver, {
    intervalMs: webhookOptions.attemptRetentionIntervalMs, olderThanMs: webhookOptions.attemptRetentionMs,
    batchSize: webhookOptions.attemptRetentionBatchSize, pauseMs: retentionSettings.pauseMs,
  }, { clock, lifecycle, keepGoing: () => leader.isLeader && state === 'started' }), log, housekeeping));
  const alertThresholds: AlertThresholds = { ...DEFAULTS.alerts, ...o.alerts };
  const exactCountLimit = o.overview?.exactCountLimit ?? DEFAULTS.overview.exactCountLimit;
  const retention = new Retention(driver, retentionSettings, {
    clock, lifecycle, log,
    handlers: () => [...handlers.values()].map((h) => ({ name: h.name, maxAttempts: h.maxAttempts, leaseMs: h.timeoutMs + leaseMarginMs, backoff: h.backoff })),
    keepGoing: () => leader.isLeader && state === 'started',
  });
  // The lease names this bus, not only its instanceId: processes given the same one (the host
  // name, with several processes on a host) would each renew the other's lease and all lead.
  const leaderId = `${instanceId}#${randomBytes(3).toString('hex')}`;
  const leader = new Leader(driver, { leaderId, ttlMs: o.leader?.ttlMs ?? DEFAULTS.leader.ttlMs, renewMs: o.leader?.renewMs ?? DEFAULTS.leader.renewMs }, {
    clock, lifecycle, log,
    onChange: (leading) => {
      for (const m of maintenance) leading ? m.start() : void m.stop();
    },
    // Sent at stop, past the notifier (which no longer sends once stopping): the lease is free now.
    released: async () => {
      if (driver.capabilities.listenNotify) await driver.notify(channel, LEASE_RELEASED);
    },
  });

  /**
   * `at` names the call in errors: 'record', or 'recordMany(items)[3]'. `active`: the OpenTelemetry
   * span context where record() was called (activeSpanContext(), looked up once per call).
   */
  async function prepare(
    type: string, payload: unknown, opts: RecordOptions | undefined, active: SpanContext | null, at = 'record', keys = RECORD_OPTIONS,
  ): Promise<EventInsert> {
    checkRecordOptions(opts, at, keys);
    if (!known.has(type)) throw new UnknownEventTypeError(type, catalog.types);
    const value = await validatePayload(catalog as unknown as EventCatalog, type, payload);
    const problem = findJsonProblem(value);
    if (problem) throw new PayloadNotJsonError(type, problem.path, problem.problem);
    const payloadJson = JSON.stringify(value);
    const bytes = Buffer.byteLength(payloadJson);
    if (bytes > maxPayloadBytes) throw new PayloadTooLargeError(type, bytes, maxPayloadBytes);
    const version = opts?.version ?? 1;
    // The column is a 32-bit integer: anything else would be refused by the server, or (sent as a
    // literal with COMMIT in bus.transaction) rounded without a word.
    if (typeof version !== 'number' || !Number.isInteger(version) || version < -2147483648 || version > 2147483647) {
      throw new OptionsError(`${at}.version`, `${describe(version)} is not a 32-bit integer`);
    }
    const traceId = recordTraceId(opts?.traceId, `${at}.traceId`) ?? currentTraceId(active) ?? newTraceId();
    // The span that records it, when it is in the event's trace (given, the handler's or the span's
    // own): the parent of its handlers' spans, sampled or not as it is (see spanInTrace).
    const span = spanInTrace(active, traceId);
    return {
      id: uuidv7(),
      type,
      subject: recordText(opts?.subject, `${at}.subject`),
      payloadJson,
      traceId,
      spanId: span === null ? null : span.spanId,
      traceFlags: span === null ? null : span.traceFlags,
      createdBy: recordText(opts?.createdBy, `${at}.createdBy`),
      version,
    };
  }

  /**
   * Rejects with the driver's DatabaseError when the database cannot be used at all (down,
   * refusing, not migrated). For rea's own statements only (the admin calls, the overview, start's):
   * on a schema behind this rea, a column or table one lacks is said as not migrated, not as the
   * server's raw 42703.
   */
  const explained = <T>(work: Promise<T>): Promise<T> => work.catch((err: unknown) => Promise.reject(driver.explainError(err, { reaStatement: true })));
  /**
   * In the caller's transaction only a missing events table is rea's to explain: a lost
   * connection there is the application's error, with the code its own retry logic looks for.
   */
  const rejectNotMigrated = (err: unknown): never => {
    const explainedErr = driver.explainError(err);
    throw explainedErr instanceof DatabaseError && explainedErr.kind === 'not-migrated' ? explainedErr : err;
  };

  /** q: what driver.unwrapTransaction(tx) gave, asked before the events were prepared. */
  const recordInto = async (tx: unknown, q: Queryable, rows: EventInsert[]) => {
    // In this bus's bus.transaction the rows may wait for COMMIT and travel with it (see TransactionState).
    if (!(isReaTransaction(tx) && deferInto(tx, rows, driver))) await driver.executor.eventInsertMany(q, rows).catch(rejectNotMigrated);
    if (isReaTransaction(tx)) noteRecorded(tx, rows.length);
  };

  /** Migrations of a newer rea in the schema (none breaking, or it would have refused): said once per call. */
  const warnNewer = (newer: number[]) => {
    if (newer.length === 0) return;
    log.warn(
      { schema, newer_migrations: newer, known_up_to: LATEST_MIGRATION },
      'a newer rea has migrated this schema; this older rea runs against it (none of its migrations is marked breaking), but upgrade it soon',
    );
  };

  /** As warnNewer, for a started bus: only when the schema has a newer migration this bus has not warned about yet. */
  const noteNewer = (newer: number[]) => {
    if (newer.every((v) => newerWarned.has(v))) return;
    for (const v of newer) newerWarned.add(v);
    warnNewer(newer);
  };

  /**
   * What start() asks, asked again by a started bus: a process that was running when a newer rea
   * migrated (a rolling deploy) ran its old statements against the new schema for as long as it
   * lived, where start() would have refused it. A check still on its way is not joined by another.
   */
  const checkSchema = (): Promise<void> => (checking ??= (async () => {
    try {
      noteNewer((await driver.checkMigrated()).newer);
    } catch (err) {
      if (err instanceof DatabaseError && err.kind === 'too-new') return stopForNewerSchema(err);
      if (state !== 'started') return; // the pool closed under it at stop
      log.warn({ err: errorMessage(err) }, "checking the schema's migrations failed; will check again");
    }
  })().finally(() => { checking = undefined; }));

  /**
   * A newer rea's breaking migration: older code would misread or damage what it changed. So this
   * process takes no more work: no relay round, no claim, no maintenance (it gives the lease back),
   * no heartbeat. Running handlers finish and their outcomes are written (they started on the old
   * schema; aborting them would only run them again). record() refuses from now on, from `tooNew`:
   * a flag, not a query per record. Not undone: a breaking migration is not rolled back but by a
   * restore, and the process's next start checks again.
   */
  const stopForNewerSchema = async (err: DatabaseError): Promise<void> => {
    if (tooNew || state === 'stopped') return;
    tooNew = err;
    // A bus never started (a process that only records) has nothing to stop but its record().
    const started = state === 'started';
    if (started) {
      clearInterval(schemaCheck);
      clearInterval(heartbeat);
      stoppingWork = Promise.all([relay.stop(), worker.stopTaking(), leader.stop()]).then(
        () => {},
        (failed: unknown) => log.warn({ err: errorMessage(failed) }, 'stopping work for a newer schema failed'),
      );
    }
    const breaking = (await driver.migrationStatus?.().catch(() => undefined))?.breaking ?? [];
    log.error(
      { schema, breaking_migrations: breaking, known_up_to: LATEST_MIGRATION, err: err.message },
      'a newer rea applied a migration marked breaking to this schema while this process ran: '
        + (started ? 'it takes no more work (relay rounds, job claims, maintenance), running handlers finish, and ' : '')
        + 'its record() and admin writes refuse (DatabaseError too-new). Upgrade this process to a rea at least as new as the one that migrated the schema, and restart it',
    );
    lifecycle.emit('schema:too-new', { error: err, breaking });
  };

  /** What record() and the admin writes throw in a process that found a newer rea's breaking migration (stopForNewerSchema). */
  const refuseTooNew = () => {
    if (tooNew) throw new DatabaseError('too-new', tooNew.message);
  };

  /**
   * A bus that is not started (a process that only records) has no timer for the check: a
   * record() that worked (so the database answers) starts it, at most every
   * migrations.checkIntervalMs, and no record waits for it.
   */
  let recordCheckedAt = -Infinity;
  const checkAfterRecord = () => {
    if (state !== 'idle' || performance.now() - recordCheckedAt < migrationCheckMs) return;
    recordCheckedAt = performance.now();
    void checkSchema();
  };

  async function startBus(): Promise<void> {
    // The LISTEN connection is opened while the schema is checked: a new connection takes as long
    // as the check, and the first rounds waited for both, one after the other. It is live before
    // the relay's first round, so no commit's wake-up falls between the two.
    const listening = driver.capabilities.listenNotify
      ? driver.listen(channel, (payload) => {
        if (payload === LEASE_RELEASED) return leader.wake();
        if (payload !== 'j' && relayOptions.enabled !== false) relay.wake();
        if (payload !== 'e' && workerOptions.enabled !== false) worker.wake();
      })
      : undefined;
    // Its failure is start()'s, once the checks are done; not an unhandled rejection before that.
    listening?.catch(() => {});
    try {
      // The first statements a started bus runs: a database that is down, or a schema missing or
      // behind on migrations, is named here, not in a warning from every poll.
      noteNewer((await explained(driver.checkMigrated())).newer);
      await explained(driver.executor.handlerUpsertMany(
        [...handlers.values()].map((h) => ({
          name: h.name, patterns: h.patterns, coalesceSubject: h.coalesceSubject, maxAttempts: h.maxAttempts,
          leaseMs: h.timeoutMs + leaseMarginMs, priority: h.priority,
        })),
      ));
    } catch (err) {
      // Nothing started: the LISTEN connection, once open, is closed again (or a failed start left it open).
      await listening?.then((close) => close(), () => {});
      throw err;
    }
    state = 'started';
    if (listening) unlisten = await listening;
    // The worker first: the relay's first round offers it its jobs (hand-off, inline) only if
    // it already takes them. Its first claim waits for that round (FIRST_CLAIM_WAIT_MS at most):
    // the round then has the connection that checked the schema, whose backend has rea's tables
    // and statements warm, and a claim sent beside it on a new connection had its backend plan
    // the claim, in the same instant, on the same CPUs (the first handler came ~40 % later).
    const working = workerOptions.enabled !== false && (handlers.size > 0 || webhooksRun);
    if (working) worker.start({ claims: false });
    const relayFirstRound = relayOptions.enabled !== false ? relay.start() : undefined;
    if (working) worker.startClaims(relayFirstRound);
    if (workerOptions.enabled !== false && handlers.size > 0) {
      await beat();
      heartbeat = setInterval(() => void beat(), workerOptions.heartbeatMs);
      heartbeat.unref();
    }
    // Retention rules are known only now: retention.register() may be called until start().
    if (o.retention?.enabled !== false) for (const service of retention.services()) maintenance.push(new ServiceRunner(service, log, housekeeping));
    leader.start();
    schemaCheck = setInterval(() => void checkSchema(), migrationCheckMs);
    schemaCheck.unref();
  }

  async function stopBus(): Promise<void> {
    // A start() still on its way finishes first: stopped half way, what it went on to start (the
    // relay, the worker, the LISTEN connection) would run on a closed pool and keep the process
    // alive. A start that fails leaves nothing to stop but the pool.
    await starting?.catch(() => {});
    const wasStarted = state === 'started';
    state = 'stopped';
    clearInterval(heartbeat);
    clearInterval(schemaCheck);
    if (wasStarted) {
      // The handlers' deadline runs from here: the relay's stop may wait for a round that waits
      // for a connection, which running transactional handlers hold until they end or are aborted.
      const timeoutMs = stopTimeoutMs;
      stopBegun = true;
      if (workerOptions.enabled !== false) worker.beginStop(timeoutMs);
      // A statement stuck on a lock (a relay round, a claim, a completion, the election: a table
      // locked by a migration or by hand, a server that stopped answering) must not hold the stop
      // past its timeout (at least a second); the worker gets STOP_WRITE_GRACE_MS more to write
      // what its aborted jobs came to. Left running, they end when their queries do.
      const deadline = performance.now() + Math.max(1000, timeoutMs);
      // Past the deadline, a step still gets a moment: a resignation or a connection's goodbye takes milliseconds.
      const upTo = (what: string, work: Promise<void>, graceMs = 0) => waitAtMost(
        work.catch((err) => log.warn({ err: errorMessage(err) }, `${what} failed at stop`)),
        Math.max(STOP_STEP_MIN_MS, deadline + graceMs - performance.now()),
        (waitedMs) => log.warn({ waited_ms: waitedMs }, `${what} still running at stop (a statement waiting on a lock, or a server that does not answer); not waiting for it`),
      );
      // A newer schema's stop (stopForNewerSchema) first: it may be giving the lease back.
      if (stoppingWork) await upTo('stopping work for a newer schema', stoppingWork);
      await upTo('relay round', relay.stop());
      await upTo('worker', worker.stop(timeoutMs), STOP_WRITE_GRACE_MS);
      await upTo('leader election', leader.stop());
      await Promise.all(maintenance.map((m) => m.stop(Math.max(STOP_STEP_MIN_MS, deadline - performance.now()))));
      if (unlisten) await upTo('LISTEN connection close', unlisten());
    }
    notifier.cancel();
    // A check of the schema a record() started (a bus never started) ends before the pool does,
    // or is left to fail on it: a server gone silent must not hold the stop.
    if (checking) await waitAtMost(checking, STOP_STEP_MIN_MS, () => {});
    await driver.close();
  }

  const bus: Bus<S> = {
    schema,
    driver,
    lifecycle,
    instanceId,

    async migrate() {
      // Not `explained`: a migration that meets a column it lacks is no schema "behind" to migrate.
      const result = await driver.migrate({
        onLockWait: ({ migration, holders, retryInMs }) => log.warn(
          { schema, migration, held_by: holders, retry_in_ms: retryInMs },
          "a migration waited for a lock on rea's tables that another transaction holds; it gave up so as not to hold the application's writes up behind it, and tries again",
        ),
      }).catch((err: unknown) => Promise.reject(driver.explainError(err)));
      warnNewer(result.newer);
      return result;
    },

    on(patterns, name, fn, handlerOptions = {}) {
      if (state !== 'idle') throw new BusStateError(`bus.on('${name}') must be called before bus.start()`);
      if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$/.test(name)) {
        throw new OptionsError('bus.on(name)', `handler name ${JSON.stringify(name)} must be 1–200 letters, digits, _ . : - starting with a letter or digit`);
      }
      if (handlers.has(name)) throw new DuplicateHandlerError(name);
      if (typeof fn !== 'function') throw new OptionsError(`bus.on('${name}').fn`, 'must be a function');
      const list = (Array.isArray(patterns) ? [...patterns] : [patterns]) as string[];
      if (list.length === 0) throw new OptionsError(`bus.on('${name}').patterns`, 'give at least one event type or pattern');
      for (const p of list) {
        if (typeof p !== 'string' || !catalog.types.some((t) => patternMatches(p, t))) {
          throw new UnknownEventTypeError(String(p), catalog.types);
        }
      }
      const h = validateWith(handlerOptionsSchema, handlerOptions, `bus.on('${name}').options`);
      const timeoutMs = h.timeoutMs ?? DEFAULTS.handler.timeoutMs;
      handlers.set(name, {
        name,
        patterns: list,
        fn: fn as RegisteredHandler['fn'],
        maxAttempts: h.maxAttempts ?? DEFAULTS.handler.maxAttempts,
        backoff: (handlerOptions.backoff ?? defaultHandlerBackoff),
        timeoutMs,
        concurrency: h.concurrency ?? Number.POSITIVE_INFINITY,
        coalesceSubject: h.coalesce === 'subject',
        transactional: h.transactional === true,
        priority: h.priority ?? DEFAULTS.handler.priority,
      });
    },

    async record(tx, type, payload, opts) {
      // The handle first: record('order.created', payload), the tx forgotten, said the type was
      // '[object Object]', an unknown event type.
      const q = driver.unwrapTransaction(tx, 'record()');
      refuseTooNew();
      const row = await prepare(type, payload, opts, activeSpanContext());
      await recordInto(tx, q, [row]);
      checkAfterRecord();
      return row.id;
    },

    async recordMany(tx, items) {
      const q = driver.unwrapTransaction(tx, 'recordMany()');
      refuseTooNew();
      if (!Array.isArray(items)) throw new OptionsError('recordMany(items)', 'must be an array of { type, payload, subject? }');
      const rows: EventInsert[] = [];
      const active = activeSpanContext();
      for (const [i, item] of items.entries()) {
        if (typeof item !== 'object' || item === null) throw new OptionsError(`recordMany(items)[${i}]`, 'must be an object { type, payload, subject? }');
        rows.push(await prepare(item.type, item.payload, item, active, `recordMany(items)[${i}]`, RECORD_ITEM_KEYS));
      }
      if (rows.length > 0) await recordInto(tx, q, rows);
      checkAfterRecord();
      return rows.map((r) => r.id);
    },

    async transaction(fn) {
      if (state === 'stopped') throw new BusStateError('the bus has been stopped');
      const txState: TransactionState = { open: true, owner: driver };
      let entered = false;
      const result = await driver.transaction(async (q, raw) => {
        entered = true;
        if (driver.capabilities.deferredRecord) {
          txState.pending = [];
          txState.flush = (rows) => driver.executor.eventInsertMany(q, rows);
        }
        try {
          const value = await fn(makeTransaction(q, raw, txState));
          await txState.flushing; // events sent when fn read tx.raw: a failure fails the transaction
          return value;
        } finally {
          txState.open = false;
        }
      }, { pendingEvents: () => txState.pending?.splice(0) ?? [] }).catch((err: unknown) => {
        // Before the callback ran (no connection, a database that does not exist, a login
        // refused) nothing of the application's has happened: rea's DatabaseError says so, naming
        // the server, as start() and migrate() do; it was pg's own error, or a bare ECONNREFUSED.
        if (!entered) throw driver.explainError(err);
        return rejectNotMigrated(err);
      });
      const recorded = txState.recorded ?? 0;
      if (recorded > 0) {
        lifecycle.emit('transaction:committed', { events: recorded });
        bus.wake();
      }
      return result;
    },

    wake() {
      // New events need one relay, not every process's: when this process runs one, it is woken
      // here and fans them out, and its fan-out wakes other processes' workers ('j') for the jobs
      // they take. Waking their relays too would only set them racing it for the same rows (a
      // round or a probe each, per wake-up, per process). Otherwise other processes must hear of it.
      if (state === 'started' && relayOptions.enabled !== false) relay.wake();
      else if (driver.capabilities.listenNotify) notifier('e');
    },

    async start() {
      if (state === 'started') return;
      if (state === 'stopped' || stopping) throw new BusStateError('a stopped bus cannot be started again; create a new one');
      if (starting) return starting;
      // startBus runs once `starting` is set: a stop() called from anything its first synchronous
      // steps call (opening the LISTEN connection) then waits for the start, as any later one does.
      starting = Promise.resolve().then(startBus);
      try {
        await starting;
      } finally {
        starting = undefined;
      }
    },

    stop(stopOptions = {}) {
      // Node runs a timer longer than ~24.8 days (Infinity, a NaN from Number(env)…) after 1 ms:
      // such a timeoutMs, meant as "wait long", aborted every running handler at once.
      try {
        knownOptions(stopOptions, { timeoutMs: true }, 'stop(options)');
      } catch (err) {
        return Promise.reject(err);
      }
      const timeoutMs = (stopOptions as { timeoutMs?: unknown } | null)?.timeoutMs;
      if (timeoutMs !== undefined && (typeof timeoutMs !== 'number' || !Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_TIMER_MS)) {
        return Promise.reject(new OptionsError('stop.timeoutMs', `${describe(timeoutMs)} is not a whole number of milliseconds from 0 to ${MAX_TIMER_MS} (about 24.8 days)`));
      }
      // A later stop with less time (a second SIGTERM to rea run) aborts the running handlers
      // sooner: they go back to the queue at once, rather than stay leased to a process killed.
      if (!stopping) stopTimeoutMs = timeoutMs ?? 10_000;
      else if (typeof timeoutMs === 'number' && timeoutMs < stopTimeoutMs) {
        stopTimeoutMs = timeoutMs;
        if (stopBegun && workerOptions.enabled !== false) worker.beginStop(timeoutMs);
      }
      return (stopping ??= stopBus());
    },

    async overview() {
      const facts = await explained(driver.operations.overviewFacts({
        exactLimit: exactCountLimit, backlogThreshold: alertThresholds.eventsBacklog, handlerUnattendedMs: alertThresholds.handlerUnattendedMs,
        jobsWaitingMs: alertThresholds.jobsWaitingMs,
      }));
      // The database's clock unless one is injected: created_at comes from it, so ages never mix two clocks.
      const now = clock.now()?.getTime() ?? facts.readAt.getTime();
      const jobs = Object.fromEntries(Object.entries(facts.jobs).map(([k, f]) => [k, f.value])) as Overview['jobs'];
      const estimated = [
        ...(facts.backlog.estimated ? ['backlog'] : []),
        ...(facts.poisoned.estimated ? ['poisoned'] : []),
        ...Object.entries(facts.jobs).filter(([, f]) => f.estimated).map(([k]) => `jobs.${k}`),
      ];
      return {
        backlog: facts.backlog.value,
        poisoned: facts.poisoned.value,
        oldestUnfannedAt: facts.oldestUnfannedAt,
        oldestUnfannedAgeMs: facts.oldestUnfannedAt ? Math.max(0, now - facts.oldestUnfannedAt.getTime()) : null,
        jobs,
        discarded: jobs.discarded,
        tables: facts.tables,
        estimated,
        alerts: evaluateAlerts(facts, alertThresholds, now),
        at: new Date(now),
      };
    },

    // The admin calls reject as overview() does (see explainedCalls).
    events: explainedCalls<Bus<S>['events']>({
      // An id that is not a UUID names no event (as events.attempts has it); it used to reach the
      // database and come back as its uuid cast error.
      get: async (id) => (isUuid(id) ? driver.executor.eventGet({ id }) : null),
      async requeue(target) {
        // Anything but an array used to be taken for { poisoned: true }: a single id, or
        // { poisoned: false }, requeued every poisoned event (a bad id reached the uuid cast).
        const all = target !== null && typeof target === 'object' && !Array.isArray(target)
          && Object.keys(target).length === 1 && (target as { poisoned?: unknown }).poisoned === true;
        if (!all && !(Array.isArray(target) && target.every(isUuid))) {
          throw new OptionsError('events.requeue', 'pass an array of event ids (UUIDs), or { poisoned: true } for every poisoned event');
        }
        const ids = all
          ? await driver.executor.eventRequeue({ poisoned: true })
          : await driver.executor.eventRequeue({ ids: (target as readonly string[]).map((id) => id.toLowerCase()) });
        if (ids.length > 0) bus.wake();
        return ids;
      },
      async list(filter) {
        const p = eventListParams(filter);
        return pageOf(await driver.admin.eventList({ ...p, limit: p.limit + 1 }), p.limit);
      },
      replay: (async (target: string | EventReplayFilter, replayOptions: { endpointId: string } | { handler: string }) => {
        if (!replayOptions || typeof replayOptions !== 'object' || ('handler' in replayOptions) === ('endpointId' in replayOptions)) {
          throw new OptionsError('events.replay(options)', 'pass { endpointId } (a webhook endpoint) or { handler } (an in-process handler), one of the two');
        }
        const jobsMade = () => {
          if (state === 'started' && workerOptions.enabled !== false) worker.wake();
          if (driver.capabilities.listenNotify) notifier('j'); // workers of other processes
        };
        if ('handler' in replayOptions) knownOptions(replayOptions, { handler: true }, 'events.replay(options)');
        if (typeof target !== 'string') {
          if (!('handler' in replayOptions)) throw new OptionsError('events.replay(options)', 'a replay of many events takes { handler }; send them to an endpoint one by one');
          return replayEventsToHandler(driver, target, replayOptions.handler, () => clock.now(), jobsMade);
        }
        if ('endpointId' in replayOptions) return webhookApi.replay(target, replayOptions);
        const made = await replayToHandler(driver, target, replayOptions.handler, clock.now());
        jobsMade();
        return made;
      }) as Bus<S>['events']['replay'],
      attempts: (eventId, attemptOptions) => webhookApi.attemptsForEvent(eventId, attemptOptions),
    }, explained),

    endpoints: explainedCalls(webhookApi.endpoints, explained),
    deliveries: explainedCalls(webhookApi.deliveries, explained),

    handlers: explainedCalls<Bus<S>['handlers']>({
      list: () => driver.admin.handlerList({ countLimit: exactCountLimit }),
      async forget(name, forgetOptions = {}) {
        if (typeof name !== 'string' || name.length === 0) throw new OptionsError('handlers.forget(name)', 'give the name of a handler');
        knownOptions(forgetOptions, { force: true }, 'handlers.forget(options)');
        if (handlers.has(name)) throw new BusStateError(`handler '${name}' is registered in this very bus: it is not gone`);
        // A heartbeat may come as seldom as every heartbeatMs (one skipped or failed: twice
        // that): with the alert off, its default window alone could be shorter than that.
        const threshold = alertThresholds.handlerUnattendedMs >= 0 ? alertThresholds.handlerUnattendedMs : DEFAULTS.alerts.handlerUnattendedMs;
        const window = Math.max(threshold, 2 * workerOptions.heartbeatMs);
        const r = await driver.admin.handlerForget({ name, unseenForMs: forgetOptions.force ? null : window, now: clock.now() });
        // No row, but waiting jobs of the name: a forget cut short, or jobs retried by name since.
        if (!r.forgotten && r.seenAt === null && r.cancelled === 0) throw await unknownHandler(driver, name);
        if (!r.forgotten && r.seenAt !== null) {
          throw new HandlerInUseError(name, r.seenAt!, formatMs(window));
        }
        return { cancelled: r.cancelled };
      },
    }, explained),

    jobs: explainedCalls<Bus<S>['jobs']>({
      forEvent: async (eventId) => (isUuid(eventId) ? driver.executor.jobListForEvent({ eventId }) : []),
      async list(filter) {
        const p = jobListParams(filter);
        return pageOf(await driver.admin.jobList({ ...p, limit: p.limit + 1 }), p.limit);
      },
      async discard(ids) {
        if (!Array.isArray(ids) || !ids.every(isJobId)) {
          throw new InvalidFilterError('ids', 'must be an array of job ids');
        }
        return driver.admin.jobDiscard({ ids: [...ids], now: clock.now() });
      },
      async retry(target) {
        let ids: string[];
        if (Array.isArray(target)) {
          ids = await driver.operations.jobRetry({ ids: checkJobIds(target, 'jobs.retry(ids)'), webhookMaxAttempts: webhookSettings.maxAttempts, now: clock.now() });
        } else {
          const t = target as { state?: unknown; handler?: unknown } | null;
          // A misspelt key (handlr) was ignored: every dead letter of every handler was retried.
          if (t !== null && typeof t === 'object') rejectUnknownFilterKeys(t, RETRY_FILTER_KEYS, 'a retry');
          if (!t || (t.state !== 'discarded' && t.state !== 'cancelled')) {
            throw new OptionsError('jobs.retry', "pass job ids, or { state: 'discarded' | 'cancelled', handler? }");
          }
          if (t.handler !== undefined) checkHandlerName(t.handler, 'jobs.retry.handler');
          // A mistyped name would otherwise retry nothing, and say nothing.
          if (t.handler !== undefined && !(await driver.operations.handlerKnown({ name: t.handler as string }))) throw await unknownHandler(driver, t.handler);
          ids = await driver.operations.jobRetry({
            state: t.state, handler: t.handler as string | undefined, webhookMaxAttempts: webhookSettings.maxAttempts, now: clock.now(),
          });
        }
        if (ids.length > 0) {
          if (state === 'started' && workerOptions.enabled !== false) worker.wake();
          if (driver.capabilities.listenNotify) notifier('j'); // workers of other processes
        }
        return ids;
      },
      async cancel(ids) {
        return driver.operations.jobCancel({ ids: checkJobIds(ids, 'jobs.cancel(ids)'), now: clock.now() });
      },
    }, explained),

    retention: {
      register(spec) {
        if (state !== 'idle') throw new BusStateError('bus.retention.register() must be called before bus.start()');
        retention.register(spec);
      },
      // A misspelt dryRun (dryrun) was a real pass: what the caller meant to count was deleted.
      // Not `explained` here: runOnce explains each rule's failure, as only rea's rules are rea's statements.
      run: async (runOptions) => retention.runOnce(knownOptions(runOptions, { dryRun: true }, 'retention.run(options)')),
    },

    handler: (name) => handlers.get(name),
    deliveredPayload: async (type, payload) => JSON.parse((await prepare(type, payload, undefined, null)).payloadJson),
    logger: log,

    relayOnce: () => relay.round(),

    get isLeader() {
      return leader.isLeader;
    },
  };
  // A bus that found a newer rea's breaking migration (stopForNewerSchema) refuses its admin
  // writes too, as the CLI and the panel refuse theirs: an application's own repair calls
  // (jobs.retry, endpoints.update, …) would write with the old code's idea of the tables. Reads go on.
  for (const [group, names] of Object.entries(ADMIN_WRITES)) {
    const calls = (bus as unknown as Record<string, Record<string, (...args: unknown[]) => unknown>>)[group];
    if (!calls || group === 'driver') continue;
    for (const name of names) {
      const call = calls[name];
      if (typeof call !== 'function') continue;
      calls[name] = async (...args: unknown[]) => {
        refuseTooNew();
        return call(...args);
      };
    }
  }
  return bus;
}

const RECORD_OPTIONS = new Set(['subject', 'traceId', 'createdBy', 'version']);
const RECORD_ITEM_KEYS = new Set(['type', 'payload', ...RECORD_OPTIONS]);

/**
 * record()'s options (or a recordMany item) hold only what record() stores: a misspelt one
 * (`subjct`, `traceID`, `created_by`) was dropped without a word, and the event stored without
 * its subject (so never coalesced), trace or author, as every other option group refuses it.
 */
function checkRecordOptions(opts: unknown, at: string, keys: ReadonlySet<string>): void {
  if (opts === undefined || opts === null) return;
  if (typeof opts !== 'object' || Array.isArray(opts)) {
    throw new OptionsError(at === 'record' ? 'record(options)' : at, `must be an object { ${[...keys].map((k) => `${k}?`).join(', ')} }, not ${describe(opts)}`);
  }
  let unknown: string[] | undefined;
  for (const key of Object.keys(opts)) if (!keys.has(key)) (unknown ??= []).push(key);
  if (unknown) throw new OptionsError(at, `unknown option(s) ${unknown.join(', ')} (known: ${[...RECORD_OPTIONS].join(', ')})`);
}

/**
 * A text option of record() (subject, traceId, createdBy) as it will be stored, or null when not
 * given. PostgreSQL's text cannot hold NUL, and a lone surrogate would be stored as U+FFFD; a
 * number would become '' when the events travel with COMMIT: each is refused, naming the option.
 */
function recordText(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string') throw new OptionsError(field, `must be a string, not ${describe(value)}`);
  if (unstorableText(value)) throw new OptionsError(field, 'holds a NUL character (\\u0000) or a lone UTF-16 surrogate, which PostgreSQL text cannot store');
  return value;
}

/** record()'s traceId: any text, kept as given, but a W3C trace id in upper case is lower-cased (see normalizeTraceId). */
function recordTraceId(value: unknown, field: string): string | null {
  const text = recordText(value, field);
  return text === null ? null : normalizeTraceId(text);
}

function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return `${typeof value} ${String(value)}`;
  return value === null ? 'null' : typeof value === 'object' ? (Array.isArray(value) ? 'an array' : 'an object') : typeof value;
}

/**
 * The wake-up a stopping leader sends once it has given its lease back ('e': new events, 'j': new
 * jobs). A rea older than this takes it for both of those: a spare relay round and worker poll.
 */
const LEASE_RELEASED = 'l';

/** How long past a stop's deadline the worker may take to write the outcomes of the jobs it aborted. */
const STOP_WRITE_GRACE_MS = 1000;
/** The least a step of a stop is waited for once the deadline has passed. */
const STOP_STEP_MIN_MS = 250;

/** Waits for `work` (which must not reject) at most `ms`; `onGaveUp` says so when it did not end in time. */
async function waitAtMost(work: Promise<void>, ms: number, onGaveUp: (waitedMs: number) => void): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  // A stop's timeout may be the longest timer there is, and its steps get a grace on top: past
  // MAX_TIMER_MS Node would fire after 1 ms, and the stop would close the pool under running handlers.
  const waited = Math.min(MAX_TIMER_MS, Math.max(0, Math.round(ms)));
  const ended = await Promise.race([
    work.then(() => true),
    new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), waited))),
  ]);
  clearTimeout(timer);
  if (!ended) onGaveUp(waited);
}

/**
 * `api` with each call's rejection explained, as overview() has it: a database that is down,
 * refusing or not migrated is the driver's DatabaseError (kind not-migrated, say), not pg's raw
 * error (events.list on an unmigrated schema rejected with 42P01 "relation does not exist").
 */
function explainedCalls<T extends object>(api: T, explained: <R>(work: Promise<R>) => Promise<R>): T {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(api)) {
    // Through a promise, so a call that is not async (or throws before its first await) is explained too.
    out[name] = typeof value === 'function' ? (...args: unknown[]) => explained(Promise.resolve().then(() => (value as (...a: unknown[]) => unknown).apply(api, args))) : value;
  }
  return out as T;
}

/** What jobs.retry takes besides ids. */
const RETRY_FILTER_KEYS: Record<'state' | 'handler', true> = { state: true, handler: true };

function checkJobIds(ids: unknown, field: string): string[] {
  if (!Array.isArray(ids) || !ids.every(isJobId)) {
    throw new OptionsError(field, 'must be an array of job ids (digits, as strings)');
  }
  return [...ids];
}

function makeDriver(database: DatabaseOptions, schema: string, poolSize: number, log: Logger): Driver {
  // Refuses a key the kind does not take, and a poolSize pg would misread (a pool of -1 answered no query, ever).
  const kind = checkDatabaseOptions(database);
  if (kind === 'driver' && 'driver' in database) return database.driver;
  if (kind === 'postgres' && 'postgres' in database) {
    return new PostgresDriver({
      connection: database.postgres, schema, poolSize: database.poolSize ?? poolSize, queryTimeoutMs: database.queryTimeoutMs,
      pooler: database.pooler, listen: database.listen,
      onError: (err, where) => log.warn({ err: err.message, where }, 'database connection error'),
    });
  }
  if (kind === 'pglite' && 'pglite' in database) return new PGliteDriver({ database: database.pglite, schema });
  throw new OptionsError('database', 'pass { postgres: url }, { pglite: dir } or { driver }');
}
