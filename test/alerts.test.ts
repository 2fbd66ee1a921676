// Alert evaluation as a pure function of facts, thresholds and an injected "now": each threshold
// at and past its edge, -1 turning an alert off, how "since" is derived, and the registry.
import { describe, expect, it } from 'vitest';
import { evaluateAlerts, alertEvaluators, type AlertEvaluator, type AlertThresholds } from '../src/admin/alerts.js';
import { DEFAULTS } from '../src/core/options.js';
import type { OverviewFacts } from '../src/driver/operations.js';
import { JOB_STATES, type JobState } from '../src/driver/types.js';

const NOW = Date.parse('2026-03-01T12:00:00Z');
const at = (msAgo: number) => new Date(NOW - msAgo);
const thresholds: AlertThresholds = { ...DEFAULTS.alerts };

function facts(over: Partial<OverviewFacts> = {}, jobs: Partial<Record<JobState, number>> = {}): OverviewFacts {
  return {
    readAt: new Date(NOW),
    backlog: { value: 0, estimated: false },
    poisoned: { value: 0, estimated: false },
    oldestUnfannedAt: null,
    backlogCrossedAt: null,
    poisonedSince: null,
    jobs: Object.fromEntries(JOB_STATES.map((s) => [s, { value: jobs[s] ?? 0, estimated: false }])) as OverviewFacts['jobs'],
    discardedSince: null,
    endpointsDisabled: 0,
    endpointsDisabledSince: null,
    unattendedHandlers: [],
    waitingJobs: [],
    tables: [],
    ...over,
  };
}

const names = (f: OverviewFacts, t = thresholds) => evaluateAlerts(f, t, NOW).map((a) => a.name);

describe('alerts', () => {
  it('all quiet: no alerts', () => {
    expect(evaluateAlerts(facts(), thresholds, NOW)).toEqual([]);
  });

  it('events_backlog by count: 1,000 unfanned is fine, 1,001 fires, since the 1,001st oldest arrived', () => {
    const oldest = at(60_000);
    expect(names(facts({ backlog: { value: 1000, estimated: false }, oldestUnfannedAt: oldest }))).toEqual([]);
    const [a] = evaluateAlerts(facts({ backlog: { value: 1001, estimated: false }, oldestUnfannedAt: oldest, backlogCrossedAt: at(5_000) }), thresholds, NOW);
    expect(a).toMatchObject({ name: 'events_backlog', figure: 1001, threshold: 1000, unit: 'events', since: at(5_000), estimated: false });
    expect(a!.message).toContain('1001 unfanned events (threshold 1000)');
  });

  it('events_backlog by age: exactly 5 min is fine, older fires, since oldest + 5 min', () => {
    expect(names(facts({ backlog: { value: 1, estimated: false }, oldestUnfannedAt: at(300_000) }))).toEqual([]);
    const [a] = evaluateAlerts(facts({ backlog: { value: 1, estimated: false }, oldestUnfannedAt: at(420_000) }), thresholds, NOW);
    expect(a).toMatchObject({ name: 'events_backlog', figure: 420_000, threshold: 300_000, unit: 'ms', since: at(120_000) });
    expect(a!.message).toContain('oldest 7 min (threshold 5 min)');
    expect(a!.message).toMatch(/^1 unfanned event \(threshold 1000\), /); // one event, not "1 unfanned events"
  });

  it('events_backlog with both conditions takes the earlier since and reports the count', () => {
    const [a] = evaluateAlerts(facts({ backlog: { value: 5000, estimated: true }, oldestUnfannedAt: at(3_600_000), backlogCrossedAt: at(600_000) }), thresholds, NOW);
    expect(a).toMatchObject({ figure: 5000, unit: 'events', since: at(3_300_000), estimated: true });
    expect(a!.message).toContain('(estimate)');
  });

  it('events_poisoned on any poisoned row, since the oldest still poisoned; clears at zero', () => {
    const [a] = evaluateAlerts(facts({ poisoned: { value: 2, estimated: false }, poisonedSince: at(90_000) }), thresholds, NOW);
    expect(a).toMatchObject({ name: 'events_poisoned', figure: 2, threshold: 0, since: at(90_000) });
    expect(a!.message).toContain('rea events requeue --poisoned');
    expect(names(facts({ poisoned: { value: 0, estimated: false } }))).toEqual([]);
  });

  it('jobs_discarded on any discarded job, since the oldest discard still kept', () => {
    const [a] = evaluateAlerts(facts({ discardedSince: at(10_000) }, { discarded: 3 }), thresholds, NOW);
    expect(a).toMatchObject({ name: 'jobs_discarded', figure: 3, threshold: 0, unit: 'jobs', since: at(10_000) });
    expect(names(facts({}, { completed: 10_000, cancelled: 4 }))).toEqual([]);
  });

  it('thresholds are configurable and -1 turns an alert off', () => {
    const f = facts({ backlog: { value: 50, estimated: false }, oldestUnfannedAt: at(3_600_000), poisoned: { value: 1, estimated: false } }, { discarded: 5 });
    expect(names(f)).toEqual(['events_backlog', 'events_poisoned', 'jobs_discarded']);
    expect(names(f, { eventsBacklog: 10, eventsBacklogAgeMs: -1, eventsPoisoned: -1, jobsDiscarded: 10, endpointsDisabled: 0, handlerUnattendedMs: -1, jobsWaitingMs: -1 })).toEqual(['events_backlog']);
    expect(names(f, { eventsBacklog: -1, eventsBacklogAgeMs: -1, eventsPoisoned: 1, jobsDiscarded: 5, endpointsDisabled: 0, handlerUnattendedMs: -1, jobsWaitingMs: -1 })).toEqual([]);
  });

  it('the registry is extensible: an extra evaluator is evaluated in order after the built-ins', () => {
    const extra: AlertEvaluator = {
      name: 'custom',
      evaluate: () => ({ name: 'custom', figure: 1, threshold: 0, unit: 'jobs', since: at(1), estimated: false, message: 'custom' }),
    };
    const alerts = evaluateAlerts(facts({ poisoned: { value: 1, estimated: false } }), thresholds, NOW, [...alertEvaluators, extra]);
    expect(alerts.map((a) => a.name)).toEqual(['events_poisoned', 'custom']);
  });

  it('handler_unattended names the handler nobody runs and how to forget it; several are listed; -1 turns it off', () => {
    const one = facts({ unattendedHandlers: [{ name: 'old-sms', seenAt: at(2 * 3_600_000), waiting: 3, stored: true }] });
    const [a] = evaluateAlerts(one, thresholds, NOW);
    // Figure and threshold in one unit: the longest time without a worker against the allowed time.
    expect(a).toMatchObject({
      name: 'handler_unattended', figure: 2 * 3_600_000, threshold: thresholds.handlerUnattendedMs, unit: 'ms',
      since: at(2 * 3_600_000 - thresholds.handlerUnattendedMs),
    });
    expect(a!.message).toBe("handler 'old-sms' has 3 waiting jobs and no running worker has had it for 2.0 h: start a process that runs it, or, if it is gone from the code, `rea handlers forget old-sms` (cancels its waiting jobs)");
    const many = facts({ unattendedHandlers: ['a', 'b', 'c', 'd'].map((name, i) => ({ name, seenAt: at(3_600_000 - i), waiting: 1, stored: i !== 1 })) });
    const [m] = evaluateAlerts(many, thresholds, NOW);
    expect(m).toMatchObject({ figure: 3_600_000, threshold: thresholds.handlerUnattendedMs, unit: 'ms' });
    expect(m!.message).toMatch(/^4 handlers have waiting jobs and no running worker, the longest for 60 min \('a': 1 waiting job, 'b' \(not stored\): 1 waiting job, 'c': 1 waiting job, …\): .*`rea handlers forget <name>`/);
    expect(names(one, { ...thresholds, handlerUnattendedMs: -1 })).toEqual([]);
  });

  it('handler_unattended also counts jobs waiting for a handler no bus stores (forgotten, then retried by name), since they came due', () => {
    const f = facts({ unattendedHandlers: [{ name: 'sms', seenAt: at(20 * 60_000), waiting: 2, stored: false }] });
    const [a] = evaluateAlerts(f, thresholds, NOW);
    expect(a).toMatchObject({
      name: 'handler_unattended', figure: 20 * 60_000, threshold: thresholds.handlerUnattendedMs, unit: 'ms',
      since: at(20 * 60_000 - thresholds.handlerUnattendedMs),
    });
    expect(a!.message).toBe("2 waiting jobs of handler 'sms', which no bus stores (it was forgotten), have waited 20 min: start a process that registers it, or `rea handlers forget sms` (cancels them)");
  });

  it('jobs_waiting names the queue whose next job has been due longest and no worker took; several are listed; -1 turns it off', () => {
    // A handler falling behind (a slow downstream, too few workers) raised nothing: the job counts
    // are not an age, and handler_unattended fires only when no worker runs the handler at all.
    const one = facts({ waitingJobs: [{ kind: 'handler', target: 'mailer', dueAt: at(7 * 60_000) }] });
    const [a] = evaluateAlerts(one, thresholds, NOW);
    expect(a).toMatchObject({
      name: 'jobs_waiting', figure: 7 * 60_000, threshold: thresholds.jobsWaitingMs, unit: 'ms',
      since: at(7 * 60_000 - thresholds.jobsWaitingMs), estimated: false,
    });
    expect(a!.message).toBe("handler 'mailer': the next job has been due for 7 min and no worker has taken it (threshold 5 min): the workers are behind or not running; add processes or raise their concurrency, or see which handler is slow (rea jobs list --state running)");
    const many = facts({ waitingJobs: [
      { kind: 'webhook', target: null, dueAt: at(3_600_000) },
      ...['a', 'b', 'c'].map((name, i) => ({ kind: 'handler' as const, target: name, dueAt: at(600_000 - i) })),
    ] });
    const [m] = evaluateAlerts(many, thresholds, NOW);
    expect(m).toMatchObject({ figure: 3_600_000, unit: 'ms' });
    expect(m!.message).toMatch(/^4 queues have jobs due and not taken, the longest for 60 min \(webhook deliveries, handler 'a', handler 'b', …\)/);
    expect(names(one, { ...thresholds, jobsWaitingMs: -1 })).toEqual([]);
  });

  it('endpoint_disabled fires for any disabled webhook endpoint, since the earliest disable; -1 turns it off', () => {
    const f = facts({ endpointsDisabled: 2, endpointsDisabledSince: at(60_000) });
    const [a] = evaluateAlerts(f, thresholds, NOW);
    expect(a).toMatchObject({ name: 'endpoint_disabled', figure: 2, threshold: 0, unit: 'endpoints', since: at(60_000), estimated: false });
    expect(a!.message).toBe('2 disabled webhook endpoints (nothing is enqueued for them): fix the receiver, then `rea endpoints enable <id>`');
    expect(names(f, { ...thresholds, endpointsDisabled: -1 })).toEqual([]);
    expect(names(f, { ...thresholds, endpointsDisabled: 2 })).toEqual([]);
  });
});
