// Retention: the hard caps on how rea's tables (and registered application tables) grow. Each
// rule deletes rows past its window in bounded batches with a pause between them; only the
// leader runs the rules on their intervals, and `rea retention run` runs one pass by hand.
import { backoffUpperBound, defaultHandlerBackoff, type Backoff } from '../core/backoff.js';
import type { Clock } from '../core/clock.js';
import { OptionsError } from '../core/errors.js';
import type { Lifecycle } from '../core/lifecycle.js';
import type { Logger } from '../core/logger.js';
import { MAX_WINDOW_MS, MIN_RETENTION_INTERVAL_MS } from '../core/options.js';
import type { AppTableName, RetentionTarget } from '../driver/operations.js';
import type { Driver } from '../driver/types.js';
import type { MaintenanceService } from './service.js';

export interface RetentionSettings {
  batchSize: number;
  pauseMs: number;
  events: { olderThanMs: number; everyMs: number; archive: boolean; archiveOlderThanMs: number };
  jobs: { completedMs: number; discardedMs: number; cancelledMs: number; everyMs: number };
  consumes: { olderThanMs: number | 'auto'; everyMs: number };
  appEveryMs: number;
}

/** A table of the application's own, trimmed by the same bounded cleaner (the visitor-traffic precedent). */
export interface AppTableRetention {
  /** 'visits' (resolved by search_path) or 'public.visits'. */
  table: string;
  /** A timestamp, timestamptz or date column; rows older than `olderThan` by it are deleted. */
  timeColumn: string;
  /** Milliseconds, or a duration such as '90s', '15m', '24h', '30d'. */
  olderThan: number | string;
  /** How often the leader runs it (default 1 h; at least 1 s); -1 = only by hand (`rea retention run`). */
  every?: number | string;
}

export interface RetentionRuleReport {
  rule: string;
  table: string;
  /** The window applied, or -1 when the rule keeps everything. */
  olderThanMs: number;
  /** Rows removed, or with dryRun the rows a pass would remove. */
  removed: number;
  /** Delete statements run (each removes at most batchSize rows). */
  batches: number;
  /** Rows were moved to events_archive rather than deleted. */
  archived: boolean;
  dryRun: boolean;
}

export interface RetentionReport {
  dryRun: boolean;
  removed: number;
  rules: RetentionRuleReport[];
}

/** What retention needs to know of a handler to bound how long a redelivery stays possible. */
export interface HandlerSchedule {
  name: string;
  maxAttempts: number;
  leaseMs: number;
  backoff: Backoff;
}

interface Rule {
  name: string;
  table: string;
  everyMs: number;
  archived: boolean;
  /** A table of the application's (retention.register), not one of rea's. */
  app: boolean;
  /** null: keep forever. */
  target(): Promise<RetentionTarget | null>;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;
const TIME_TYPES = /^(timestamp(\(\d\))? with(out)? time zone|date)$/;

/**
 * The longest a job of this handler can keep being delivered after its first attempt: every
 * attempt may hold its lease to the end before the rescuer frees it, and between attempts the
 * backoff waits at most its upper bound.
 */
export function handlerScheduleMs(h: Omit<HandlerSchedule, 'name'>): number {
  let ms = h.maxAttempts * h.leaseMs;
  for (let n = 1; n < h.maxAttempts; n++) ms += backoffUpperBound(h.backoff, n);
  return ms;
}

/**
 * How long consume records must be kept. A consume record can be written as late as the end of
 * its job's schedule S; the job may then end discarded (its last lease expired while the commit
 * went through); an operator may retry a discarded or cancelled job for as long as the row is
 * kept; and the retried job has a schedule of its own. Hence 2 × S + the longer of the
 * discarded and cancelled windows, or -1 (keep) when either of those keeps jobs forever.
 */
export function consumeRetentionMs(p: { scheduleMs: number; discardedMs: number; cancelledMs: number }): number {
  if (p.discardedMs < 0 || p.cancelledMs < 0) return -1;
  return 2 * p.scheduleMs + Math.max(p.discardedMs, p.cancelledMs);
}

/** A duration in ms, or -1; `minMs` bounds it from below (retention intervals: MIN_RETENTION_INTERVAL_MS). */
export function parseDuration(value: unknown, field: string, minMs = 1): number {
  if (value === -1 || value === '-1') return -1;
  let ms: number | undefined;
  if (typeof value === 'number' && Number.isInteger(value) && value > 0) ms = value;
  if (typeof value === 'string') {
    const m = /^(\d+)\s*(ms|s|m|min|h|d)$/.exec(value.trim());
    const unit = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3600_000, d: 86_400_000 } as const;
    if (m && Number(m[1]) > 0) ms = Number(m[1]) * unit[m[2] as keyof typeof unit];
  }
  if (ms === undefined) throw new OptionsError(field, `${JSON.stringify(value)} is not a duration: give milliseconds, '90s', '15m', '24h', '7d', or -1 for keep`);
  if (ms > MAX_WINDOW_MS) throw new OptionsError(field, `${JSON.stringify(value)} is longer than 100 years; use -1 to keep forever`);
  if (ms < minMs) throw new OptionsError(field, `${JSON.stringify(value)} is shorter than ${minMs} ms (a pass deletes batch after batch until one comes back short: it would keep the database busy); -1 runs it only by hand`);
  return ms;
}

export class Retention {
  private readonly rules: Rule[] = [];
  private readonly appTables = new Set<string>();

  constructor(
    private readonly driver: Driver,
    private readonly settings: RetentionSettings,
    private readonly deps: {
      clock: Clock;
      lifecycle: Lifecycle;
      log: Logger;
      /** Handlers registered in this process (their backoff functions are only known here). */
      handlers: () => Iterable<HandlerSchedule>;
      /** Checked between batches: a pass stops early once this process stops leading. */
      keepGoing?: () => boolean;
    },
  ) {
    const { events, jobs, consumes } = settings;
    const fixed = (ms: number) => async () => ms;
    this.add('events', 'events', events.everyMs, events.archive, async () =>
      events.olderThanMs < 0 ? null : { kind: 'events', olderThanMs: events.olderThanMs, archive: events.archive });
    // The archive only exists to be kept; its rule runs only when it has a window.
    if (events.archiveOlderThanMs >= 0) {
      this.add('events_archive', 'events_archive', events.everyMs, false, async () =>
        ({ kind: 'events_archive', olderThanMs: events.archiveOlderThanMs }));
    }
    for (const [state, ms] of [['completed', jobs.completedMs], ['discarded', jobs.discardedMs], ['cancelled', jobs.cancelledMs]] as const) {
      this.add(`jobs.${state}`, 'jobs', jobs.everyMs, false, async () => (ms < 0 ? null : { kind: 'jobs', state, olderThanMs: ms }));
    }
    const consumeWindow = consumes.olderThanMs === 'auto' ? () => this.consumeWindowMs() : fixed(consumes.olderThanMs);
    this.add('consumes', 'consumes', consumes.everyMs, false, async () => {
      const ms = await consumeWindow();
      return ms < 0 ? null : { kind: 'consumes', olderThanMs: ms };
    });
  }

  private add(name: string, table: string, everyMs: number, archived: boolean, target: Rule['target'], app = false): void {
    this.rules.push({ name, table, everyMs, archived, app, target });
  }

  /** Apply the bounded cleaner to an application table. Names are checked here; the column's type on first run. */
  register(spec: AppTableRetention): void {
    if (!spec || typeof spec !== 'object') throw new OptionsError('retention.register', 'pass { table, timeColumn, olderThan, every? }');
    const table = checkTable(spec.table);
    const label = table.schema ? `${table.schema}.${table.table}` : table.table;
    const field = `retention.register(${label})`;
    if (table.schema === this.driver.schema) {
      throw new OptionsError(`${field}.table`, `rea's own tables have their own retention settings (retention.events, retention.jobs…)`);
    }
    if (this.appTables.has(label)) throw new OptionsError(`${field}.table`, 'is registered already');
    const column = checkIdentifier(`${field}.timeColumn`, spec.timeColumn);
    const olderThanMs = parseDuration(spec.olderThan, `${field}.olderThan`);
    const everyMs = spec.every === undefined ? this.settings.appEveryMs : parseDuration(spec.every, `${field}.every`, MIN_RETENTION_INTERVAL_MS);
    this.appTables.add(label);
    let checked = false;
    this.add(`app:${label}`, label, everyMs, false, async () => {
      if (olderThanMs < 0) return null;
      if (!checked) {
        const found = await this.driver.operations.appTable({ table, column });
        if (found === null) throw new OptionsError(`${field}.table`, `table ${label} does not exist`);
        // The check in register() sees only a schema that was written out: an unqualified name
        // resolves by the connection's search_path, which may list rea's schema first.
        if (found.schema === this.driver.schema) {
          throw new OptionsError(`${field}.table`, `${label} resolves to ${found.schema}.${table.table}, one of rea's own tables; they have their own retention settings (retention.events, retention.jobs…)`);
        }
        if (found.split) {
          throw new OptionsError(`${field}.table`, `${label} is partitioned or has inheritance children; register each partition (or child) on its own, or drop old partitions instead`);
        }
        const type = found.columnType;
        if (type === null) throw new OptionsError(`${field}.timeColumn`, `table ${label} has no column ${column}`);
        if (!TIME_TYPES.test(type)) throw new OptionsError(`${field}.timeColumn`, `${column} is ${type}; it must be timestamp, timestamptz or date`);
        checked = true;
      }
      return { kind: 'app', table, timeColumn: column, olderThanMs };
    }, true);
  }

  /** One service per rule that runs on an interval; the leader runs them. */
  services(): MaintenanceService[] {
    return this.rules.filter((r) => r.everyMs > 0).map((rule) => ({
      name: `retention:${rule.name}`,
      intervalMs: rule.everyMs,
      runOnce: () => this.runRule(rule, false, this.deps.keepGoing ?? (() => true)),
    }));
  }

  /**
   * One pass of every rule now (bus.retention.run, the CLI's `rea retention run`); with dryRun,
   * count instead of delete. It rejects as the bus's other calls do: a database that is down,
   * refusing or not migrated is the driver's DatabaseError, and a column or table one of rea's own
   * rules lacks (a schema behind this rea) is not-migrated, not the server's raw 42703. Per rule,
   * because a registered table's statement is the application's: a column dropped from it since
   * it was checked is its own error, not a migration of rea's that is missing.
   */
  async runOnce(options: { dryRun?: boolean } = {}): Promise<RetentionReport> {
    const dryRun = options.dryRun === true;
    const rules: RetentionRuleReport[] = [];
    for (const rule of this.rules) {
      try {
        rules.push(await this.runRule(rule, dryRun, () => true));
      } catch (err) {
        throw this.driver.explainError(err, { reaStatement: !rule.app });
      }
    }
    return { dryRun, removed: rules.reduce((n, r) => n + r.removed, 0), rules };
  }

  /** The consume-record window the 'auto' setting resolves to now (see consumeRetentionMs). */
  async consumeWindowMs(): Promise<number> {
    const schedules = new Map<string, number>();
    for (const h of this.deps.handlers()) schedules.set(h.name, handlerScheduleMs(h));
    // Handlers of other processes are in the handlers table; their backoff is not, so assume
    // the default schedule's (override consumes.olderThanMs when a remote handler waits longer).
    for (const row of await this.driver.operations.handlerSchedules()) {
      if (!schedules.has(row.name)) schedules.set(row.name, handlerScheduleMs({ ...row, backoff: defaultHandlerBackoff }));
    }
    const scheduleMs = Math.max(0, ...schedules.values());
    return consumeRetentionMs({ scheduleMs, discardedMs: this.settings.jobs.discardedMs, cancelledMs: this.settings.jobs.cancelledMs });
  }

  private async runRule(rule: Rule, dryRun: boolean, keepGoing: () => boolean): Promise<RetentionRuleReport> {
    const report: RetentionRuleReport = { rule: rule.name, table: rule.table, olderThanMs: -1, removed: 0, batches: 0, archived: rule.archived, dryRun };
    const target = await rule.target();
    if (!target) return report;
    report.olderThanMs = target.olderThanMs;
    const { lifecycle, clock } = this.deps;
    if (dryRun) {
      report.removed = await this.driver.operations.retentionCount({ target, now: clock.now() });
    } else {
      const limit = this.settings.batchSize;
      for (;;) {
        const removed = await this.driver.operations.retentionDelete({ target, limit, now: clock.now() });
        report.batches++;
        report.removed += removed;
        lifecycle.emit('retention:batch', { rule: rule.name, table: rule.table, removed, batch: report.batches });
        if (removed < limit || !keepGoing()) break;
        // Let the hot path have the table between two full batches.
        if (this.settings.pauseMs > 0) await new Promise((r) => setTimeout(r, this.settings.pauseMs));
      }
      if (report.removed > 0) this.deps.log.info({ rule: rule.name, removed: report.removed, batches: report.batches }, 'retention pass');
    }
    lifecycle.emit('retention:pass', report);
    return report;
  }
}

function checkIdentifier(field: string, value: unknown): string {
  if (typeof value !== 'string' || !IDENTIFIER.test(value) || Buffer.byteLength(value) > 63) {
    throw new OptionsError(field, `${JSON.stringify(value)} is not a plain identifier (a letter or _, then letters, digits, _ or $; at most 63 bytes)`);
  }
  return value;
}

function checkTable(value: unknown): AppTableName {
  if (typeof value !== 'string') throw new OptionsError('retention.register.table', 'must be a table name such as visits or public.visits');
  const parts = value.split('.');
  if (parts.length > 2) throw new OptionsError('retention.register.table', `'${value}' has more than one '.'; give table or schema.table`);
  const names = parts.map((p) => checkIdentifier('retention.register.table', p));
  return names.length === 2 ? { schema: names[0]!, table: names[1]! } : { schema: null, table: names[0]! };
}
