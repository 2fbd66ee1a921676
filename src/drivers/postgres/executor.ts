// The Executor for PostgreSQL dialects (pg and PGlite share it): runs the named statements and
// maps rows to rea's own types.
import type {
  ClaimTarget, ClaimedJob, EventInsert, EventRow, Executor, FanOutHandOff, FanOutResult, HandlerSubscription, InlineJob, InlineJobRow,
  JobFailure, JobRow, Queryable, WebhookFanOut,
} from '../../driver/types.js';
import { DEFAULTS } from '../../core/options.js';
import { reaStatementFailed } from './common.js';
import { inBatches } from './batches.js';
import { patternToLike } from './patterns.js';
import { CLAIM_WALK, CLAIM_WALK_ROUNDS, type PostgresStatements } from './sql.js';
import type { EventSpan } from '../../core/trace.js';

type Row = Record<string, any>;

// Used when a caller (a test, a script) fans out without saying: the bus always passes its own.
const DEFAULT_WEBHOOK_FAN_OUT: WebhookFanOut = {
  maxAttempts: DEFAULTS.webhooks.maxAttempts,
  leaseMs: DEFAULTS.webhooks.timeoutMs + DEFAULTS.worker.leaseMarginMs,
  failingDelayMs: DEFAULTS.webhooks.failingDelayMs,
};

/**
 * About the most text one events insert carries. A bulk recordMany is split into statements of
 * this size: node-postgres builds each array parameter as one string, and a JavaScript string
 * stops at 512 MB (RangeError: Invalid string length), the server's at 1 GB.
 */
export const EVENT_INSERT_CHUNK_CHARS = 16 * 1024 * 1024;

/** `events` in order, in groups of at most EVENT_INSERT_CHUNK_CHARS of text each (at least one event). */
export function eventChunks(events: EventInsert[], maxChars = EVENT_INSERT_CHUNK_CHARS): EventInsert[][] {
  const chunks: EventInsert[][] = [];
  let chunk: EventInsert[] = [];
  let chars = 0;
  for (const e of events) {
    const size = e.payloadJson.length + e.type.length + (e.subject?.length ?? 0) + (e.traceId?.length ?? 0) + (e.createdBy?.length ?? 0) + 64;
    if (chunk.length > 0 && chars + size > maxChars) {
      chunks.push(chunk);
      chunk = [];
      chars = 0;
    }
    chunk.push(e);
    chars += size;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

export class PostgresExecutor implements Executor {
  /** Per job kind, where this process's last capped claim walked its targets to (see CLAIM_WALK). */
  private readonly walkedTo = new Map<string, WalkPosition>();

  constructor(private readonly pool: Queryable, private readonly sql: PostgresStatements) {}

  // Its errors are marked as rea's (reaStatementFailed): it runs in the caller's transaction, beside
  // statements of the application's whose errors are the application's.
  async eventInsertMany(q: Queryable, events: EventInsert[]): Promise<void> {
    try {
      if (events.length === 1) {
        const e = events[0]!;
        await q.query(this.sql.eventInsertOne, [e.id, e.type, e.subject, e.payloadJson, e.traceId, e.createdBy, e.version, e.spanId, e.traceFlags]);
        return;
      }
      for (const chunk of eventChunks(events)) {
        await q.query(this.sql.eventInsertMany, [
          chunk.map((e) => e.id), chunk.map((e) => e.type), chunk.map((e) => e.subject),
          chunk.map((e) => e.payloadJson), chunk.map((e) => e.traceId), chunk.map((e) => e.createdBy),
          chunk.map((e) => e.version), chunk.map((e) => e.spanId), chunk.map((e) => e.traceFlags),
        ]);
      }
    } catch (err) {
      throw reaStatementFailed(err);
    }
  }

  async eventClaimable(): Promise<boolean> {
    const { rows } = await this.pool.query<{ claimable: boolean }>(this.sql.eventClaimable);
    return rows[0]!.claimable;
  }

  async eventFanOut(q: Queryable, p: {
    limit: number; onlyId?: string; now: Date | null; webhook?: WebhookFanOut; handOff?: FanOutHandOff; inlineIdleLimitMs?: number;
    lean?: boolean;
  }): Promise<FanOutResult> {
    const w = p.webhook ?? DEFAULT_WEBHOOK_FAN_OUT;
    const h = p.handOff && p.handOff.limit > 0 ? p.handOff : undefined;
    const inline = h?.targets.some((t) => t.inline) ?? false;
    const params = [p.limit, p.now, w.maxAttempts, w.leaseMs, w.failingDelayMs];
    if (!h || p.onlyId) {
      const { rows } = p.onlyId
        ? await q.query<Row>(this.sql.eventFanOutOne, [...params, p.onlyId])
        : await q.query<Row>(this.sql.eventFanOut, params);
      return fanOutResult(rows[0]!, false);
    }
    const targets = h.targets.map((t) => t.target);
    const room = h.targets.map((t) => t.limit);
    const leases = h.targets.map((t) => t.leaseMs);
    if (!inline) {
      const { rows } = await q.query<Row>(this.sql.eventFanOutHandOff, [...params, h.workerId, targets, room, h.limit, leases]);
      return fanOutResult(rows[0]!, false);
    }
    const inlines = h.targets.map((t) => t.inline === true);
    const idle = String(p.inlineIdleLimitMs ?? 10_000);
    if (p.lean) {
      const { rows } = await q.query<Row>(this.sql.eventFanOutInlineLean, [p.limit, p.now, targets, room, h.limit, leases, inlines, idle]);
      if (rows[0]!.lean) return { ...fanOutResult(rows[0]!, true), lean: true };
    }
    const { rows } = await q.query<Row>(this.sql.eventFanOutInline, [...params, h.workerId, targets, room, h.limit, leases, inlines, idle]);
    return fanOutResult(rows[0]!, true);
  }

  async eventInlineFinish(q: Queryable, p: {
    delivered: { eventId: string; handlers: string[] }[]; jobs: InlineJobRow[]; workerId: string; now: Date | null;
  }): Promise<{ corrected: number; converted: number; retryAt: Map<string, Date> }> {
    const sep = String.fromCharCode(31);
    const jobs = p.jobs.map((r) => ({
      id: r.job.id, event_id: r.job.event.id, target: r.job.target, state: r.state, attempt: r.attempt,
      max_attempts: r.job.maxAttempts, priority: r.job.priority, coalesced: r.job.coalesced, lease_ms: r.job.leaseMs,
      scheduled_at: r.scheduledAt?.toISOString() ?? null, retry_in_ms: r.retryInMs ?? null, error: r.error, error_age_ms: r.errorAgeMs ?? null,
    }));
    const { rows } = await q.query<Row>(this.sql.eventInlineFinish, [
      p.delivered.map((d) => d.eventId), p.delivered.map((d) => d.handlers.join(sep)), JSON.stringify(jobs), p.workerId, p.now,
    ]);
    const r = rows[0]!;
    const retryAt = new Map<string, Date>(Object.entries((r.retry_at ?? {}) as Record<string, string>).map(([id, at]) => [id, new Date(at)]));
    return { corrected: r.corrected as number, converted: r.converted as number, retryAt };
  }

  async eventListUnfanned(p: { limit: number }): Promise<string[]> {
    const { rows } = await this.pool.query<Row>(this.sql.eventListUnfanned, [p.limit]);
    return rows.map((r) => r.id as string);
  }

  async eventRecordFanFailure(p: { id: string; error: string; maxFanAttempts: number; now: Date | null }) {
    const { rows } = await this.pool.query<Row>(this.sql.eventRecordFanFailure, [p.id, p.error, p.maxFanAttempts, p.now]);
    return { poisoned: rows[0]?.poisoned === true };
  }

  async eventRequeue(p: { ids?: string[]; poisoned?: boolean }): Promise<string[]> {
    if (p.poisoned) {
      const ids = await inBatches(['-infinity', '00000000-0000-0000-0000-000000000000'], async (after, size) => {
        const r = (await this.pool.query<Row>(this.sql.eventRequeuePoisoned, [after[0], after[1], size])).rows[0]!;
        return { done: r.ids as string[], held: r.n as number, last: r.last as string[] };
      });
      return [...new Set(ids)];
    }
    const { rows } = await this.pool.query<Row>(this.sql.eventRequeueByIds, [p.ids ?? []]);
    return rows.map((r) => r.id as string);
  }

  async eventGet(p: { id: string }): Promise<EventRow | null> {
    const { rows } = await this.pool.query<Row>(this.sql.eventGet, [p.id]);
    return rows[0] ? mapEvent(rows[0]) : null;
  }

  async eventListInCurrentTransaction(q: Queryable): Promise<EventRow[]> {
    const { rows } = await q.query<Row>(this.sql.eventListInCurrentTransaction);
    return rows.map(mapEvent);
  }

  async handlerUpsertMany(handlers: HandlerSubscription[]): Promise<void> {
    if (handlers.length === 0) return;
    const sep = String.fromCharCode(31);
    await this.pool.query(this.sql.handlerUpsertMany, [
      handlers.map((h) => h.name),
      handlers.map((h) => h.patterns.join(sep)),
      handlers.map((h) => h.patterns.map(patternToLike).join(sep)),
      handlers.map((h) => h.coalesceSubject),
      handlers.map((h) => h.maxAttempts),
      handlers.map((h) => h.leaseMs),
      handlers.map((h) => h.priority),
    ]);
  }

  async jobClaim(p: { workerId: string; targets: ClaimTarget[]; limit: number; now: Date | null }): Promise<ClaimedJob[]> {
    if (p.targets.length === 0 || p.limit <= 0) return [];
    const jobs: ClaimedJob[] = [];
    // A capped claim's walk reads CLAIM_WALK of the targets: one that found nothing, and did not
    // come round to where it started, goes on at once, up to CLAIM_WALK_ROUNDS walks a claim.
    for (let round = 1; ; round++) {
      const { capped, values } = jobClaimParams({ ...p, walkedTo: this.walkedTo });
      // With a target at its cap, the statement that reads around it rather than through its backlog.
      const { rows } = await this.pool.query<Row>(capped ? this.sql.jobClaimCapped : this.sql.jobClaim, values);
      let more = false;
      for (const r of rows) {
        if (r.id === null) {
          // Not a job: where this claim's walk of a kind's targets ended; the next one goes on from there.
          this.walkedTo.set(r.walked_kind, { target: r.walked_target, priority: r.walked_priority });
          if (r.walked_steps >= CLAIM_WALK) more = true;
          continue;
        }
        jobs.push({
          id: r.id, kind: r.kind, target: r.target, attempt: r.attempt, maxAttempts: r.max_attempts,
          coalesced: r.coalesced,
          event: {
            id: r.event_id, type: r.event_found ? r.type : '', subject: r.subject ?? null, payload: r.payload ?? null,
            traceId: r.trace_id ?? null, createdBy: r.created_by ?? null, version: r.version ?? 1,
            createdAt: r.created_at_ms === null ? (null as unknown as Date) : new Date(r.created_at_ms),
          },
          eventSpan: eventSpan(r.span_id, r.trace_flags),
          eventFound: r.event_found === true,
          leaseAgeMs: r.lease_age_ms,
        });
      }
      if (jobs.length > 0 || !more || round >= CLAIM_WALK_ROUNDS) return jobs;
    }
  }

  async jobCompleteMany(q: Queryable | null, p: { jobs: { id: string; attempt: number }[]; now: Date | null }): Promise<number> {
    if (p.jobs.length === 0) return 0;
    const res = await (q ?? this.pool).query(this.sql.jobCompleteMany, [p.jobs.map((j) => j.id), p.jobs.map((j) => j.attempt), p.now]);
    return affected(res);
  }

  async jobFailMany(p: { failures: JobFailure[]; now: Date | null }): Promise<{ id: string; scheduledAt: Date }[]> {
    if (p.failures.length === 0) return [];
    const f = p.failures;
    const { rows } = await this.pool.query<Row>(this.sql.jobFailMany, [
      f.map((x) => x.id), f.map((x) => x.attempt), f.map((x) => x.state), f.map((x) => x.scheduledAt),
      f.map((x) => JSON.stringify(x.error)), p.now, f.map((x) => x.refundAttempt === true), f.map((x) => x.retryInMs ?? null),
      f.map((x) => x.errorAgeMs ?? null),
    ]);
    return rows.map((r) => ({ id: r.id as string, scheduledAt: r.scheduled_at as Date }));
  }

  async jobReleaseMany(p: { jobs: { id: string; attempt: number }[] }): Promise<string[]> {
    if (p.jobs.length === 0) return [];
    const { rows } = await this.pool.query<Row>(this.sql.jobReleaseMany, [p.jobs.map((j) => j.id), p.jobs.map((j) => j.attempt)]);
    return rows.map((r) => r.id as string);
  }

  async jobRescue(p: { limit: number; now: Date | null }) {
    const { rows } = await this.pool.query<Row>(this.sql.jobRescue, [p.limit, p.now]);
    const discarded = rows.filter((r) => r.state === 'discarded').length;
    return { rescued: rows.length - discarded, discarded };
  }

  async jobListForEvent(p: { eventId: string }): Promise<JobRow[]> {
    const { rows } = await this.pool.query<Row>(this.sql.jobListForEvent, [p.eventId]);
    return rows.map(mapJob);
  }

  async jobCompleteConsumed(q: Queryable, p: { id: string; attempt: number; eventId: string; handler: string; now: Date | null }) {
    const { rows } = await q.query<Row>(this.sql.jobCompleteConsumed, [p.id, p.attempt, p.now, p.eventId, p.handler]);
    return { consumed: rows[0]?.consumed === true, completed: Number(rows[0]?.completed ?? 0) === 1 };
  }

  async consumeInsert(q: Queryable, p: { eventId: string; handler: string; bounds?: { idleMs: number; lockMs: number } }): Promise<boolean> {
    const { rows } = p.bounds
      ? await q.query(this.sql.consumeInsertBounded, [p.eventId, p.handler, serverMs(p.bounds.idleMs), serverMs(p.bounds.lockMs)])
      : await q.query(this.sql.consumeInsert, [p.eventId, p.handler]);
    return rows.length === 1;
  }

  async leaderAttemptElect(p: { leaderId: string; ttlMs: number; now: Date | null }): Promise<boolean> {
    const { rows } = await this.pool.query<Row>(this.sql.leaderAttemptElect, [p.leaderId, p.ttlMs, p.now]);
    return rows[0]?.leader_id === p.leaderId;
  }

  async leaderResign(p: { leaderId: string; now: Date | null }): Promise<void> {
    await this.pool.query(this.sql.leaderResign, [p.leaderId, p.now]);
  }

}

function affected(res: { rowCount?: number | null; affectedRows?: number }): number {
  return res.rowCount ?? (res as { affectedRows?: number }).affectedRows ?? 0;
}

export function mapEvent(r: Row): EventRow {
  return {
    id: r.id, type: r.type, subject: r.subject, payload: r.payload, traceId: r.trace_id,
    createdBy: r.created_by, version: r.version, createdAt: r.created_at, fannedOutAt: r.fanned_out_at,
    fanAttempts: r.fan_attempts, poisonedAt: r.poisoned_at, lastError: r.last_error,
    deliveredInline: r.delivered_inline ?? [],
  };
}

export function mapJob(r: Row): JobRow {
  return {
    id: r.id, eventId: r.event_id, kind: r.kind, target: r.target, state: r.state, attempt: r.attempt,
    maxAttempts: r.max_attempts, priority: r.priority, coalesced: r.coalesced, scheduledAt: r.scheduled_at,
    attemptedAt: r.attempted_at, finalizedAt: r.finalized_at, leaseExpiresAt: r.lease_expires_at,
    createdAt: r.created_at, errors: r.errors ?? [],
  };
}

/** The span that recorded an event (span_id and trace_flags of its row), or null. Checked where it is used (runInTrace). */
function eventSpan(spanId: string | null | undefined, traceFlags: number | null | undefined): EventSpan | null {
  return spanId == null || traceFlags == null ? null : { spanId, traceFlags };
}

/** As postgresStatements' handedEvent builds them. */
type HandedEvent = [string, string, string | null, unknown, string | null, string | null, number, number, string | null, number | null];

/**
 * A round's handed events by id: in a function of its own, and by index rather than destructuring
 * each (the iterator protocol). Inside fanOutResult, as a `for … of`, V8 deoptimised and compiled
 * fanOutResult three or four times in a figure-1 run (~100 ms of compile jobs on its background
 * threads, of ~400); twice since. Measured in balanced order: the worker's background CPU ~1.6 µs
 * a job lower, the rate unchanged (docs/fan-out-cursor.md).
 */
function handedEvents(handed: HandedEvent[] | null | undefined): Map<string, { event: ClaimedJob['event']; span: EventSpan | null }> {
  const events = new Map<string, { event: ClaimedJob['event']; span: EventSpan | null }>();
  if (handed == null) return events;
  for (let i = 0; i < handed.length; i++) {
    const h = handed[i]!;
    events.set(h[0], {
      event: { id: h[0], type: h[1], subject: h[2], payload: h[3], traceId: h[4], createdBy: h[5], version: h[6], createdAt: new Date(h[7]) },
      span: eventSpan(h[8], h[9]),
    });
  }
  return events;
}

/** One row of a fan-out statement (every variant returns the same columns) as a FanOutResult. */
function fanOutResult(row: Row, inline: boolean): FanOutResult {
  const events = handedEvents(row.handed_events as HandedEvent[] | null | undefined);
  const handedOff = (row.handed_off as Row[]).map((r): ClaimedJob => {
    const e = events.get(r.event_id)!;
    return {
      id: r.id, kind: 'handler', target: r.target, attempt: r.attempt, maxAttempts: r.max_attempts,
      coalesced: r.coalesced, event: e.event, eventSpan: e.span, eventFound: true,
    };
  });
  let eventIds: string[];
  if (row.event_ids !== undefined) eventIds = row.event_ids ? (row.event_ids as string).split(',') : [];
  else {
    // The lean statement: every event it fanned out is handed, or unrouted (no handler takes it).
    eventIds = [...events.keys()];
    if (row.unrouted_ids) eventIds = [...eventIds, ...(row.unrouted_ids as string).split(',')].sort();
  }
  if (!inline) {
    const result: FanOutResult = { eventIds, jobs: row.jobs as number, handedOff, inline: [] };
    if (typeof row.lease_age_ms === 'number') result.leaseAgeMs = row.lease_age_ms;
    return result;
  }
  const perTarget = (row.inline_targets ?? {}) as Record<string, [number, number, number]>;
  const inlineJob = (id: string, target: string, coalesced: number, e: { event: ClaimedJob['event']; span: EventSpan | null }): InlineJob => {
    const [maxAttempts, leaseMs, priority] = perTarget[target]!;
    return { id, kind: 'handler', target, attempt: 1, maxAttempts, coalesced, event: e.event, eventSpan: e.span, eventFound: true, leaseMs, priority };
  };
  if (row.inline_ids !== undefined) {
    // The lean statement: the job ids alone, one per (event, handler), and each event type's
    // handlers (see fanOutInlineLean). Events run in the order they are handed: by id.
    const ids = row.inline_ids ? (row.inline_ids as string).split(',') : [];
    const names = (row.inline_names ?? {}) as Record<string, string[]>;
    const inlineJobs: InlineJob[] = [];
    let k = 0;
    for (const e of events.values()) {
      for (const target of names[e.event.type]!) inlineJobs.push(inlineJob(ids[k++]!, target, 1, e));
    }
    if (k !== ids.length) throw new Error(`lean inline round: ${ids.length} job ids for ${k} deliveries`);
    return { eventIds, jobs: row.jobs as number, handedOff, inline: inlineJobs };
  }
  const inlineJobs = (row.inline_jobs as [string, string, string, number][]).map(([id, eventId, target, coalesced]) => inlineJob(id, target, coalesced, events.get(eventId)!));
  return { eventIds, jobs: row.jobs as number, handedOff, inline: inlineJobs };
}

/**
 * jobClaim's parameters ($1-$11), and whether a target is at its cap (then the statement is
 * jobClaimCapped). Exported for the benchmark's profile, which runs the statement itself.
 */
export function jobClaimParams(p: {
  workerId: string; targets: ClaimTarget[]; limit: number; now: Date | null; walkedTo?: ReadonlyMap<string, WalkPosition>;
}): { capped: boolean; values: unknown[] } {
  // Targets held per capped '*' target, flattened: only webhooks have one (keyed by endpoint id).
  const full: string[] = [];
  const heldTargets: string[] = [];
  const heldCounts: number[] = [];
  for (const t of p.targets) {
    if (t.target !== '*' || !t.perTarget) continue;
    for (const h of t.perTarget.held) {
      if (h.count >= t.perTarget.limit) full.push(h.target);
      else if (h.count > 0) {
        heldTargets.push(h.target);
        heldCounts.push(h.count);
      }
    }
  }
  const capped = full.length > 0;
  const values: unknown[] = [
    p.targets.map((t) => t.kind), p.targets.map((t) => t.target), p.targets.map((t) => t.limit),
    p.limit, p.now, p.workerId, p.targets.map((t) => t.leaseMs),
    p.targets.map((t) => (t.target === '*' && t.perTarget ? t.perTarget.limit : null)), full, heldTargets, heldCounts,
  ];
  // Where each kind's previous walk ended (jobClaimCapped's $12, $13); from the first target at first.
  if (capped) {
    values.push(
      p.targets.map((t) => p.walkedTo?.get(t.kind)?.target ?? ''),
      p.targets.map((t) => p.walkedTo?.get(t.kind)?.priority ?? -32768),
    );
  }
  return { capped, values };
}

/** Where a capped claim's walk of one kind's targets ended (see CLAIM_WALK). */
export interface WalkPosition {
  target: string;
  priority: number;
}

/** A duration for a server setting in ms: whole, and within its int range (a longer one is 'no limit' in effect). */
function serverMs(ms: number): number {
  return Math.min(2_147_483_647, Math.max(1, Math.ceil(ms)));
}
