// Bus and handler options: every option has a named default here, and validate() names the field.
import { z } from 'zod';
import type { Backoff } from './backoff.js';
import { OptionsError } from './errors.js';

const HOUR = 3600_000;
const DAY = 24 * HOUR;

export const DEFAULTS = {
  schema: 'rea',
  maxPayloadBytes: 256 * 1024,
  poolSize: 10,
  relay: {
    /** Events claimed per relay round: the bulk-import bound. */
    batchSize: 200,
    /** Poll interval right after a round that found events. */
    minPollMs: 2,
    /** Poll interval once idle; also the fallback when a wake-up is missed. */
    maxPollMs: 1000,
    /** A row that fails fan-out this many times is poisoned. */
    maxFanAttempts: 5,
    /** Relay rounds at once in this process while a backlog drains, or beside a waiting one (ROUND_BESIDE_AFTER_MS). */
    concurrency: 2,
    /**
     * Insert the handler jobs this process's worker has room for already claimed by it, and hand
     * them over in memory: no claim statement for them, and no wait for the worker's next poll.
     * Never while an older job of that handler waits due in the queue.
     */
    handOff: true,
    /**
     * Inline delivery (PostgreSQL; needs handOff), off by default: a round runs this process's
     * plain (non-transactional) handlers itself and waits for them up to this long with its
     * transaction open. A delivery that succeeds in that time gets no job row (so no completed job
     * to list); its handler's name is kept on the event (delivered_inline). The rest get rows when
     * the round ends. While a round waits, the webhook and other jobs it made are not yet visible
     * to other workers. 50 suits fast handlers; 0 turns it off.
     */
    inlineMs: 0,
  },
  worker: {
    /** Handlers running at once in this process. */
    concurrency: 16,
    minPollMs: 2,
    maxPollMs: 1000,
    /** Completions are written in one statement per this window (or per 200 jobs). */
    completionFlushMs: 1,
    completionBatchSize: 200,
    /** Added to a handler's timeout to form its lease, so live work is never rescued. */
    leaseMarginMs: 5000,
    /**
     * Most jobs claimed ahead of free slots, held in memory so fast handlers are not bound by one
     * claim round trip per `concurrency` jobs. The buffer follows the observed completion rate
     * (about 200 ms of work), and a job that waits longer than half the lease margin is released.
     */
    prefetch: 500,
    /** How often a running worker marks its handlers as had (handlers.seen_at; see handler_unattended). */
    heartbeatMs: 60_000,
  },
  /** Debounce for the cross-process NOTIFY sent after rea sees a commit. */
  notifyDebounceMs: 3,
  leader: { ttlMs: 15_000, renewMs: 5_000 },
  migrations: {
    /**
     * How often a started bus reads the schema's migrations again, as start() did: a newer rea
     * may have migrated it since (a rolling deploy). A breaking migration stops this process's work.
     */
    checkIntervalMs: 60_000,
  },
  rescuer: { intervalMs: 5_000, batchSize: 1000 },
  /** 'auto': the leader vacuums rea's tables only while the server's autovacuum is off. */
  vacuum: { mode: 'auto' as 'auto' | 'always' | 'never', intervalMs: 60_000 },
  webhooks: {
    /** Run webhook deliveries in this process's workers. */
    enabled: true,
    /** Deliver to loopback, private, link-local, CGNAT and unique-local addresses (tests, the demo). */
    allowPrivateNetworks: false,
    /** Hosts, IPs and CIDR blocks reachable despite their address (see README). */
    allowlist: [] as string[],
    /** After rotateSecret, the previous secret keeps signing (and verifying) this long. */
    secretGraceMs: 24 * 3600_000,
    /** Attempts per delivery, the first included. */
    maxAttempts: 18,
    /** The whole HTTP attempt: DNS, connect, request, response and body read. */
    timeoutMs: 15_000,
    connectTimeoutMs: 5_000,
    /** Response bytes read at most; the attempt log keeps a 1 KiB excerpt. */
    maxResponseBytes: 64 * 1024,
    /** The longest wait a Retry-After (429, 503) may ask for. */
    maxRetryAfterMs: 24 * 3600_000,
    /**
     * Webhook deliveries running at once in this process; 'auto': half worker.concurrency, at least 1.
     * A value the schema takes, so a spread of DEFAULTS.webhooks is a valid option (a 0 here was not).
     */
    concurrency: 'auto' as number | 'auto',
    /**
     * Webhook deliveries running at once to one endpoint in this process; the rest wait in the
     * queue (not claimed, no attempt counted) for a later claim or another process. Half the
     * default `concurrency`: an endpoint that answers slowly holds at most half the delivery slots,
     * while one that is the only subscriber still gets requests in parallel.
     */
    concurrencyPerEndpoint: 4,
    /** While an endpoint is failing, its new deliveries are scheduled this far out. */
    failingDelayMs: 5 * 60_000,
    /** An endpoint failing continuously this long is disabled by the health pass. */
    disableAfterMs: 5 * 24 * 3600_000,
    /** How often the leader runs the endpoint health pass. */
    healthIntervalMs: 60_000,
    /** Attempt-log rows older than this are deleted. */
    attemptRetentionMs: 7 * 24 * 3600_000,
    /** How often the leader trims the attempt log, and how many rows per statement. */
    attemptRetentionIntervalMs: 3600_000,
    attemptRetentionBatchSize: 5_000,
  },
  /** Storage bounds. Every window (…Ms) and interval (everyMs) takes -1 for "keep forever" / "never run". */
  retention: {
    /** Rows deleted per statement, so a large backlog of old rows never holds long locks. */
    batchSize: 10_000,
    /** Pause between two full batches, leaving room for the hot path. */
    pauseMs: 100,
    events: {
      /** Fanned, unpoisoned events older than this are deleted (unfanned and poisoned rows never are). */
      olderThanMs: 7 * DAY,
      everyMs: HOUR,
      /** Move them to events_archive instead of deleting them. */
      archive: false,
      /** Archived rows older than this are deleted (default: kept; bound the archive yourself). */
      archiveOlderThanMs: -1,
    },
    jobs: {
      completedMs: DAY,
      discardedMs: 7 * DAY,
      /** Cancelled jobs are an operator's decision: kept as long as discarded ones, for the record. */
      cancelledMs: 7 * DAY,
      everyMs: 5 * 60_000,
    },
    consumes: {
      /** 'auto': derived from the handlers' retry schedules and the discarded window (see README). */
      olderThanMs: 'auto' as number | 'auto',
      everyMs: HOUR,
    },
    /** Default interval of a table registered with retention.register(). */
    appEveryMs: HOUR,
  },
  /** Alert thresholds: an alert fires when its figure exceeds the threshold; -1 turns it off. */
  alerts: {
    /** events_backlog: more unfanned events than this… */
    eventsBacklog: 1000,
    /** …or the oldest unfanned event older than this. */
    eventsBacklogAgeMs: 5 * 60_000,
    /** events_poisoned: any poisoned event. */
    eventsPoisoned: 0,
    /** jobs_discarded: any discarded job. */
    jobsDiscarded: 0,
    /** endpoint_disabled: any webhook endpoint disabled (by 410, the 5-day health rule, or its owner). */
    endpointsDisabled: 0,
    /**
     * handler_unattended: a handler with waiting jobs that no running worker has had for this long
     * (removed or renamed in the code, or every process running it is down). Several heartbeats.
     */
    handlerUnattendedMs: 15 * 60_000,
    /**
     * jobs_waiting: a handler's next job (or the next webhook delivery) due for longer than this
     * and still not taken: the workers are behind, or none runs.
     */
    jobsWaitingMs: 5 * 60_000,
  },
  overview: {
    /** Counts are exact up to this many rows, planner estimates beyond (and marked as such). */
    exactCountLimit: 10_000,
  },
  handler: {
    maxAttempts: 5,
    timeoutMs: 30_000,
    priority: 0,
  },
} as const;

/** The longest delay Node's setTimeout keeps (~24.8 days); a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;
/** The longest retention window or interval: 100 years (a longer one overflowed timestamps in SQL). */
export const MAX_WINDOW_MS = 100 * 365 * 24 * 3600_000;

const positiveInt = z.number().int().positive();
const nonNegInt = z.number().int().nonnegative();
/** A delay rea keeps in a timer of its own. */
const timerMs = positiveInt.max(MAX_TIMER_MS, `at most ${MAX_TIMER_MS} ms (about 24.8 days)`);
/** A window or interval in ms, or -1 for "keep forever" / "never". */
const windowMs = z.union([z.literal(-1), positiveInt.max(MAX_WINDOW_MS, `at most ${MAX_WINDOW_MS} ms (100 years), or -1 for keep forever`)], {
  error: `a positive number of milliseconds up to ${MAX_WINDOW_MS} (100 years), or -1 for keep forever`,
});
/**
 * The shortest retention interval. Each pass runs its delete statements back to back until a
 * batch comes back short, so an interval of a few ms kept a pass going against the database all
 * the time; a second is as often as any rule can usefully run (the bench runs them no faster).
 */
export const MIN_RETENTION_INTERVAL_MS = 1000;
/** A retention interval in ms (at least MIN_RETENTION_INTERVAL_MS), or -1 for "only by hand". */
const retentionIntervalMs = z.union([
  z.literal(-1),
  positiveInt
    .min(MIN_RETENTION_INTERVAL_MS, `at least ${MIN_RETENTION_INTERVAL_MS} ms (1 s), or -1 to run only by hand`)
    .max(MAX_WINDOW_MS, `at most ${MAX_WINDOW_MS} ms (100 years), or -1 to run only by hand`),
], { error: `a number of milliseconds from ${MIN_RETENTION_INTERVAL_MS} (1 s) up to ${MAX_WINDOW_MS} (100 years), or -1 to run only by hand` });
/**
 * The shortest interval of the leader's other housekeeping (vacuum, endpoint health, the attempt
 * log's retention): none of them has any use more often than a second (health disables after
 * days, the attempt log keeps days), and a few ms ran them back to back: VACUUM of rea's four
 * tables about 2,400 times a second where autovacuum is off. It also catches seconds given as ms.
 */
export const MIN_HOUSEKEEPING_INTERVAL_MS = 1000;
const housekeepingIntervalMs = positiveInt.min(MIN_HOUSEKEEPING_INTERVAL_MS, `at least ${MIN_HOUSEKEEPING_INTERVAL_MS} ms (1 s): the leader runs this pass every interval, and more often has no use`);
/**
 * Timers whose every tick writes a row: the leader's lease (renewed, and tried by every other
 * process, each renewMs) and a worker's handler heartbeat (handlers.seen_at, each heartbeatMs).
 * Below a few tens of ms they only make writes and dead rows: 1 ms was about 700 transactions a
 * second from one idle process (12 without). The tests' own, 50 ms, is the shortest any use needs.
 */
export const MIN_WRITE_TIMER_MS = 50;
/** The shortest leader lease: twice the shortest renewal (a 20 ms lease lapsed between renewals on an idle machine). */
export const MIN_LEADER_TTL_MS = 2 * MIN_WRITE_TIMER_MS;
/**
 * The shortest migrations.checkIntervalMs. Each check is one small read of the migrations table,
 * from every started process; a few ms would only keep a connection of the pool busy with it.
 * The tests' own, 50 ms, is the shortest any use needs.
 */
export const MIN_MIGRATION_CHECK_MS = 50;
/** An alert threshold (fires above it), or -1 to turn the alert off. */
const threshold = z.union([z.literal(-1), nonNegInt], { error: 'a non-negative number, or -1 to turn the alert off' });

/** The longest handler timeout (handlerOptionsSchema's timeoutMs). */
const MAX_HANDLER_TIMEOUT_MS = 24 * 3600_000;

/**
 * A poll loop's interval grows from minPollMs to maxPollMs while idle: a floor above the ceiling
 * is a mistake (one of them was meant for the other), named rather than silently capped.
 */
const pollBounds = (defaults: { minPollMs: number; maxPollMs: number }) => (o: { minPollMs?: number; maxPollMs?: number }, ctx: z.RefinementCtx) => {
  const min = o.minPollMs ?? defaults.minPollMs;
  const max = o.maxPollMs ?? defaults.maxPollMs;
  if (min > max) {
    ctx.addIssue({
      code: 'custom', path: [o.minPollMs === undefined ? 'maxPollMs' : 'minPollMs'],
      message: `minPollMs (${min}${o.minPollMs === undefined ? ', the default' : ''}) must be at most maxPollMs (${max}${o.maxPollMs === undefined ? ', the default' : ''}): the interval grows from the one to the other while idle`,
    });
  }
};

/**
 * Connections in the pool rea creates. pg's Pool takes 0 (and NaN) for its default of 10, and
 * waits for ever for a free connection of a pool below that: every query hung, with no error.
 */
export const poolSizeSchema = positiveInt;

/** What a value is, for a message; never a string's text (a connection string holds a password). */
function kindOf(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  if (typeof value === 'string') return 'an empty string';
  return Array.isArray(value) ? 'an array' : typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

const hasFunctions = (value: unknown, names: string[]): boolean =>
  typeof value === 'object' && value !== null && names.every((n) => typeof (value as Record<string, unknown>)[n] === 'function');

/**
 * The value of a `database` kind. `{ postgres: process.env.DATABASE_URL }` with the variable unset
 * (undefined), a pg.Client or a number went on to the driver, and createBus threw a TypeError
 * ("Cannot read properties of undefined (reading 'options')"), or, for PGlite, start() did.
 */
function databaseValue(kind: DatabaseKindName): z.ZodType<unknown> {
  return z.unknown().superRefine((value, ctx) => {
    const problem = databaseValueProblem(kind, value);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });
}

type DatabaseKindName = 'postgres' | 'pglite' | 'driver';

function databaseValueProblem(kind: DatabaseKindName, value: unknown): string | undefined {
  if (kind === 'postgres') {
    if (typeof value === 'string' && value !== '') return undefined;
    // pg.Pool: the driver reads its options (connection settings) for its LISTEN connection.
    if (hasFunctions(value, ['connect', 'query', 'end', 'on']) && typeof (value as { options?: unknown }).options === 'object') return undefined;
    const client = hasFunctions(value, ['connect', 'query', 'end']) ? ' (a pg.Client is one connection: rea needs a pg.Pool, or a URL)' : '';
    return `${kindOf(value)}${client}: pass a postgres:// connection string (when it comes from an environment variable, is that set?) or a pg.Pool`;
  }
  if (kind === 'pglite') {
    if (typeof value === 'string' && value !== '') return undefined;
    if (hasFunctions(value, ['query', 'exec', 'transaction'])) return undefined;
    return `${kindOf(value)}: pass a data directory, 'memory://' or a PGlite instance`;
  }
  // Its schema is checked by createBus, by name.
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return undefined;
  return `${kindOf(value)}: pass a Driver (an object with its schema, executors and migrate())`;
}

/**
 * `database` takes exactly one kind, each with its own keys. Strict as every other group is: a
 * misspelt key ({ postgres: url, poolsize: 5 }) was dropped without a word and its default used,
 * and { postgress: url } said only which shapes exist, not which key was wrong.
 */
const databaseKinds = {
  postgres: z.object({
    postgres: databaseValue('postgres'),
    poolSize: poolSizeSchema.optional(),
    queryTimeoutMs: nonNegInt.max(MAX_TIMER_MS).optional(),
    pooler: z.literal('transaction', { error: "'transaction' is the one value (a pooler in session mode needs no setting)" }).optional(),
    listen: z.union([z.string().min(1), z.literal(false)], { error: 'pass a postgres:// connection string straight to PostgreSQL, or false (no LISTEN: other processes\' events are found by polling)' }).optional(),
  }).strict().superRefine((o, ctx) => {
    // LISTEN through a transaction pooler is lost: the pooler hands the LISTEN's server connection
    // to the next client and the notifications go with it (or, worse, to that client). Every
    // wake-up from another process would then wait for a poll, without a word: so it is a choice.
    if (o.pooler === 'transaction' && o.listen === undefined) {
      ctx.addIssue({ code: 'custom', path: ['listen'], message: 'LISTEN does not work through a pooler in transaction mode: pass listen: a connection string straight to PostgreSQL (wake-ups within ms), or listen: false (other processes\' events are found by polling, up to maxPollMs later)' });
    }
  }),
  pglite: z.object({ pglite: databaseValue('pglite') }).strict(),
  driver: z.object({ driver: databaseValue('driver') }).strict(),
};
export type DatabaseKind = keyof typeof databaseKinds;
const DATABASE_SHAPES = 'pass { postgres: url, poolSize?, queryTimeoutMs?, pooler?, listen? }, { pglite: dir } or { driver }';

/** The kind of a createBus `database` option, or an OptionsError naming the key that is wrong. */
export function checkDatabaseOptions(database: unknown): DatabaseKind {
  if (!database || typeof database !== 'object' || Array.isArray(database)) throw new OptionsError('database', DATABASE_SHAPES);
  const kinds = (Object.keys(databaseKinds) as DatabaseKind[]).filter((kind) => kind in database);
  if (kinds.length > 1) throw new OptionsError('database', `pass one of ${kinds.join(', ')}, not ${kinds.length === 2 ? 'both' : 'several'}`);
  if (kinds.length === 0) {
    const keys = Object.keys(database);
    throw new OptionsError('database', keys.length ? `unknown option(s) ${keys.join(', ')}; ${DATABASE_SHAPES}` : DATABASE_SHAPES);
  }
  validateWith<unknown>(databaseKinds[kinds[0]!], database, 'database');
  return kinds[0]!;
}

/** PostgreSQL's largest jsonb value, in bytes (JENTRY_OFFLENMASK). */
const MAX_JSONB_BYTES = 268_435_455;

const WEBHOOK_CONCURRENCY = "a whole number from 1 to 10000, or 'auto' (half of worker.concurrency, at least 1)";

export const busOptionsSchema = z.object({
  schema: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'a plain lower-case identifier (letters, digits, _; at most 63)').optional(),
  // PostgreSQL stores a payload as jsonb, and refuses one larger than 268,435,455 bytes
  // (255 MiB); allowed here, a record() that big failed with the server's own error.
  maxPayloadBytes: positiveInt.max(MAX_JSONB_BYTES, `at most ${MAX_JSONB_BYTES} (255 MiB, the largest jsonb value PostgreSQL stores)`).optional(),
  poolSize: poolSizeSchema.optional(),
  instanceId: z.string().min(1).max(200).optional(),
  relay: z.object({
    enabled: z.boolean().optional(),
    batchSize: positiveInt.max(10_000).optional(),
    minPollMs: nonNegInt.max(MAX_TIMER_MS).optional(),
    maxPollMs: timerMs.optional(),
    maxFanAttempts: positiveInt.optional(),
    concurrency: positiveInt.max(16).optional(),
    handOff: z.boolean().optional(),
    inlineMs: nonNegInt.max(10_000).optional(),
  }).strict().superRefine(pollBounds(DEFAULTS.relay)).optional(),
  worker: z.object({
    enabled: z.boolean().optional(),
    concurrency: positiveInt.max(10_000).optional(),
    minPollMs: nonNegInt.max(MAX_TIMER_MS).optional(),
    maxPollMs: timerMs.optional(),
    completionFlushMs: nonNegInt.max(MAX_TIMER_MS).optional(),
    completionBatchSize: positiveInt.optional(),
    // The buffer gives a job back once it waited half this: below ~100 ms every claimed job would go straight back.
    // A lease is a handler's timeout plus this margin, stored as a 32-bit number of ms.
    leaseMarginMs: nonNegInt.min(100).max(MAX_TIMER_MS - MAX_HANDLER_TIMEOUT_MS, `at most ${MAX_TIMER_MS - MAX_HANDLER_TIMEOUT_MS} ms, so that a handler's timeout (up to 24 h) plus this margin still fits a lease (at most ${MAX_TIMER_MS} ms)`).optional(),
    prefetch: nonNegInt.max(100_000).optional(),
    heartbeatMs: timerMs.min(MIN_WRITE_TIMER_MS, `at least ${MIN_WRITE_TIMER_MS} ms: each beat writes the handlers' rows, and handler_unattended (15 min by default) needs one far less often`).optional(),
  }).strict().superRefine(pollBounds(DEFAULTS.worker)).optional(),
  notifyDebounceMs: nonNegInt.max(MAX_TIMER_MS).optional(),
  leader: z.object({
    ttlMs: timerMs.min(MIN_LEADER_TTL_MS, `at least ${MIN_LEADER_TTL_MS} ms: a shorter lease lapses between renewals, and every new leader starts the maintenance passes over`).optional(),
    renewMs: timerMs.min(MIN_WRITE_TIMER_MS, `at least ${MIN_WRITE_TIMER_MS} ms: the leader writes its lease, and every other process tries to take it, this often; ttlMs, not this, sets how soon another process takes over`).optional(),
  }).strict().superRefine((leader, ctx) => {
    // A lease renewed less often than it expires lapses between renewals: another process takes
    // it, and the leader steps down and back up every round. Half the TTL leaves room for one
    // renewal to fail (a connection lost) and the next to come in time.
    const ttlMs = leader.ttlMs ?? DEFAULTS.leader.ttlMs;
    const renewMs = leader.renewMs ?? DEFAULTS.leader.renewMs;
    if (renewMs * 2 > ttlMs) {
      ctx.addIssue({
        code: 'custom', path: ['renewMs'],
        message: `${renewMs}${leader.renewMs === undefined ? ' (the default)' : ''} must be at most half of leader.ttlMs (${ttlMs}${leader.ttlMs === undefined ? ', the default' : ''}), or the lease lapses between renewals; about a third suits`,
      });
    }
  }).optional(),
  migrations: z.object({
    checkIntervalMs: timerMs.min(MIN_MIGRATION_CHECK_MS, `at least ${MIN_MIGRATION_CHECK_MS} ms: each check is a read of the schema's migrations, from every started process; a newer rea's migration needs noticing within seconds, not milliseconds`).optional(),
  }).strict().optional(),
  rescuer: z.object({ intervalMs: positiveInt.optional(), batchSize: positiveInt.optional() }).strict().optional(),
  vacuum: z.object({ mode: z.enum(['auto', 'always', 'never']).optional(), intervalMs: housekeepingIntervalMs.optional() }).strict().optional(),
  webhooks: z.object({
    enabled: z.boolean().optional(),
    allowPrivateNetworks: z.boolean().optional(),
    allowlist: z.array(z.string().min(1)).optional(),
    secretGraceMs: nonNegInt.max(MAX_WINDOW_MS).optional(),
    maxAttempts: positiveInt.max(1000).optional(),
    timeoutMs: positiveInt.max(3600_000).optional(),
    connectTimeoutMs: positiveInt.max(3600_000).optional(),
    maxResponseBytes: positiveInt.optional(),
    maxRetryAfterMs: positiveInt.max(MAX_WINDOW_MS).optional(),
    concurrency: z.union([z.literal('auto'), z.number().int(WEBHOOK_CONCURRENCY).min(1, WEBHOOK_CONCURRENCY).max(10_000, WEBHOOK_CONCURRENCY)], { error: WEBHOOK_CONCURRENCY }).optional(),
    concurrencyPerEndpoint: positiveInt.max(10_000).optional(),
    failingDelayMs: nonNegInt.max(MAX_WINDOW_MS).optional(),
    disableAfterMs: positiveInt.max(MAX_WINDOW_MS).optional(),
    healthIntervalMs: housekeepingIntervalMs.optional(),
    attemptRetentionMs: positiveInt.max(MAX_WINDOW_MS).optional(),
    // A retention interval, as retention's own (MIN_RETENTION_INTERVAL_MS): a pass deletes batch after batch.
    attemptRetentionIntervalMs: positiveInt.min(MIN_RETENTION_INTERVAL_MS, `at least ${MIN_RETENTION_INTERVAL_MS} ms (1 s), as every retention interval: a pass deletes batch after batch until one comes back short`).max(MAX_WINDOW_MS).optional(),
    attemptRetentionBatchSize: positiveInt.optional(),
    resolve: z.function().optional(),
  }).strict().optional(),
  retention: z.object({
    enabled: z.boolean().optional(),
    batchSize: positiveInt.max(1_000_000).optional(),
    pauseMs: nonNegInt.max(MAX_TIMER_MS).optional(),
    events: z.object({
      olderThanMs: windowMs.optional(), everyMs: retentionIntervalMs.optional(), archive: z.boolean().optional(),
      archiveOlderThanMs: windowMs.optional(),
    }).strict().optional(),
    jobs: z.object({
      completedMs: windowMs.optional(), discardedMs: windowMs.optional(), cancelledMs: windowMs.optional(),
      everyMs: retentionIntervalMs.optional(),
    }).strict().optional(),
    consumes: z.object({ olderThanMs: z.union([windowMs, z.literal('auto')]).optional(), everyMs: retentionIntervalMs.optional() }).strict().optional(),
    appEveryMs: retentionIntervalMs.optional(),
  }).strict().optional(),
  alerts: z.object({
    eventsBacklog: threshold.optional(),
    eventsBacklogAgeMs: threshold.optional(),
    eventsPoisoned: threshold.optional(),
    jobsDiscarded: threshold.optional(),
    endpointsDisabled: threshold.optional(),
    handlerUnattendedMs: threshold.optional(),
    jobsWaitingMs: threshold.optional(),
  }).strict().optional(),
  overview: z.object({ exactCountLimit: positiveInt.max(10_000_000).optional() }).strict().optional(),
// Strict as every nested group is: a misspelt top-level option (poolsize, maxPayloadByte,
// webhook) in an options object built apart from the call, where TypeScript does not check
// excess properties, or from JavaScript, was dropped without a word and its default used.
}).strict().superRefine((o, ctx) => {
  // handler_unattended fires for a handler whose seen_at is older than handlerUnattendedMs, and
  // handlers.forget deletes one without force past that age: a heartbeat as slow as the
  // threshold had both happen to handlers a running worker has. Half of it leaves room for one
  // beat to fail (a connection lost) or be skipped (the one before still waits on a lock), as the
  // leader's renewal does for its lease. A bus that runs no worker never beats; the processes that
  // do are checked where they start.
  const unattendedMs = o.alerts?.handlerUnattendedMs ?? DEFAULTS.alerts.handlerUnattendedMs;
  const heartbeatMs = o.worker?.heartbeatMs ?? DEFAULTS.worker.heartbeatMs;
  if (o.worker?.enabled === false || unattendedMs === -1 || heartbeatMs * 2 <= unattendedMs) return;
  const heartbeat = `${heartbeatMs}${o.worker?.heartbeatMs === undefined ? ', the default' : ''}`;
  const unattended = `${unattendedMs}${o.alerts?.handlerUnattendedMs === undefined ? ', the default' : ''}`;
  const why = 'or handler_unattended fires (and handlers.forget deletes without force) for handlers a running worker has';
  ctx.addIssue(o.worker?.heartbeatMs !== undefined
    ? { code: 'custom', path: ['worker', 'heartbeatMs'], message: `${heartbeat} must be at most half of alerts.handlerUnattendedMs (${unattended}), ${why}` }
    : { code: 'custom', path: ['alerts', 'handlerUnattendedMs'], message: `${unattended} must be at least twice worker.heartbeatMs (${heartbeat}), ${why}; -1 turns the alert off` });
});

export const handlerOptionsSchema = z.object({
  maxAttempts: positiveInt.max(1000).optional(),
  timeoutMs: positiveInt.max(MAX_HANDLER_TIMEOUT_MS).optional(),
  concurrency: positiveInt.optional(),
  coalesce: z.literal('subject').optional(),
  transactional: z.boolean().optional(),
  priority: z.number().int().min(-32768).max(32767).optional(),
  backoff: z.function().optional(),
}).strict();

export interface HandlerOptions {
  /** Attempts before the job is discarded (default 5). */
  maxAttempts?: number;
  /** Delay before the next attempt, given the attempt that failed (default 5 s × 5^(n-1) + 0–30 s jitter). */
  backoff?: Backoff;
  /** The handler is aborted through ctx.signal after this long (default 30 s). */
  timeoutMs?: number;
  /** At most this many jobs of this handler at once in one process (default: the worker's concurrency). */
  concurrency?: number;
  /** 'subject': one job per subject per relay round, for the newest event of that subject. */
  coalesce?: 'subject';
  /** Run in a transaction with ctx.tx: writes, consume record and completion commit together. */
  transactional?: boolean;
  /** Lower runs first (default 0). */
  priority?: number;
}

/**
 * OptionsError naming the keys of `value` that `known` lacks: a misspelt option (`descripton`,
 * `graceMS`) was dropped without a word, and the call went on as if it had not been given.
 */
export function rejectUnknownOptions(value: object, known: Readonly<Record<string, true>>, field: string): void {
  const unknown = Object.keys(value).filter((key) => !Object.hasOwn(known, key));
  if (unknown.length) throw new OptionsError(field, `unknown option(s) ${unknown.join(', ')} (known: ${Object.keys(known).join(', ')})`);
}

/** `options` of a call, when given, as an object of only the keys `known` has: an OptionsError names any other. */
export function knownOptions<T>(options: T, known: Readonly<Record<string, true>>, field: string): T {
  if (options === undefined) return options;
  if (options === null || typeof options !== 'object') throw new OptionsError(field, `pass { ${Object.keys(known).map((k) => `${k}?`).join(', ')} }`);
  rejectUnknownOptions(options, known, field);
  return options;
}

/** Parse with zod and turn the first issue into an OptionsError that names the field. */
export function validateWith<T>(schema: z.ZodType<T>, value: unknown, prefix: string): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const path = issue.path.map(String).join('.');
  const field = path ? `${prefix}.${path}` : prefix;
  throw new OptionsError(field, issue.code === 'unrecognized_keys' ? `unknown option(s) ${(issue as { keys: string[] }).keys.join(', ')}` : issue.message);
}
