// Alerts: pure functions from the overview's facts, the thresholds and "now" to the alerts that
// hold. They are data in the overview (CLI, panel, HTTP), never email: email may be what fails.
//
// "since" is derived from the rows themselves rather than kept in a state table: the overview
// stays a read (it works on a replica and from `rea status`), every instance agrees, a restart
// forgets nothing, and there is no state to clean up. The price: "since" describes the rows that
// breach now (e.g. the oldest poisoned row still poisoned), not the first breach ever.
import type { OverviewFacts } from '../driver/operations.js';
import { plural } from '../core/format.js';

export interface Alert {
  /** events_backlog, events_poisoned, jobs_discarded, jobs_waiting, handler_unattended, endpoint_disabled. */
  name: string;
  /** The observed value that breaches the threshold. */
  figure: number;
  threshold: number;
  unit: 'events' | 'jobs' | 'ms' | 'endpoints';
  /** When the condition started to hold, as far as the rows still in breach tell. */
  since: Date | null;
  /** True when the figure is a planner estimate (see Overview.estimated). */
  estimated: boolean;
  /** One line for people. */
  message: string;
}

/** An alert fires when its figure exceeds the threshold; -1 turns it off. */
export interface AlertThresholds {
  eventsBacklog: number;
  eventsBacklogAgeMs: number;
  eventsPoisoned: number;
  jobsDiscarded: number;
  endpointsDisabled: number;
  /** ms without a heartbeat (see worker.heartbeatMs) after which a handler with waiting jobs is unattended. */
  handlerUnattendedMs: number;
  /** ms a handler's next job (or the next webhook delivery) may stay due and untaken. */
  jobsWaitingMs: number;
}

export interface AlertEvaluator {
  readonly name: string;
  evaluate(facts: OverviewFacts, thresholds: AlertThresholds, nowMs: number): Alert | null;
}

const on = (threshold: number) => threshold >= 0;

export const eventsBacklogAlert: AlertEvaluator = {
  name: 'events_backlog',
  evaluate(f, t, now) {
    const count = f.backlog.value;
    const ageMs = f.oldestUnfannedAt ? Math.max(0, now - f.oldestUnfannedAt.getTime()) : null;
    const byCount = on(t.eventsBacklog) && count > t.eventsBacklog;
    const byAge = on(t.eventsBacklogAgeMs) && ageMs !== null && ageMs > t.eventsBacklogAgeMs;
    if (!byCount && !byAge) return null;
    // Count: the moment the (threshold+1)-th oldest waiting event arrived (unknown for a threshold
    // above overview.exactCountLimit: not looked for). Age: the oldest event's arrival plus the allowed age.
    const sinces: number[] = [];
    if (byCount && f.backlogCrossedAt) sinces.push(f.backlogCrossedAt.getTime());
    if (byAge) sinces.push(f.oldestUnfannedAt!.getTime() + t.eventsBacklogAgeMs);
    const since = sinces.length ? new Date(Math.min(now, ...sinces)) : null;
    const parts = [
      `${count}${f.backlog.estimated ? ' (estimate)' : ''} unfanned event${count === 1 ? '' : 's'}${on(t.eventsBacklog) ? ` (threshold ${t.eventsBacklog})` : ''}`,
      `oldest ${ageMs === null ? '-' : formatMs(ageMs)}${on(t.eventsBacklogAgeMs) ? ` (threshold ${formatMs(t.eventsBacklogAgeMs)})` : ''}`,
    ];
    const message = `${parts.join(', ')}: the relay is behind or stopped`;
    return byCount
      ? { name: 'events_backlog', figure: count, threshold: t.eventsBacklog, unit: 'events', since, estimated: f.backlog.estimated, message }
      : { name: 'events_backlog', figure: ageMs!, threshold: t.eventsBacklogAgeMs, unit: 'ms', since, estimated: false, message };
  },
};

export const eventsPoisonedAlert: AlertEvaluator = {
  name: 'events_poisoned',
  evaluate(f, t) {
    if (!on(t.eventsPoisoned) || f.poisoned.value <= t.eventsPoisoned) return null;
    return {
      name: 'events_poisoned', figure: f.poisoned.value, threshold: t.eventsPoisoned, unit: 'events',
      since: f.poisonedSince, estimated: f.poisoned.estimated,
      message: `${plural(f.poisoned.value, 'poisoned event')}: fix the cause, then \`rea events requeue --poisoned\``,
    };
  },
};

export const jobsDiscardedAlert: AlertEvaluator = {
  name: 'jobs_discarded',
  evaluate(f, t) {
    const d = f.jobs.discarded;
    if (!on(t.jobsDiscarded) || d.value <= t.jobsDiscarded) return null;
    return {
      name: 'jobs_discarded', figure: d.value, threshold: t.jobsDiscarded, unit: 'jobs',
      since: f.discardedSince, estimated: d.estimated,
      message: `${plural(d.value, 'discarded job')}${d.estimated ? ' (estimate)' : ''}: fix the handler, then \`rea jobs retry --discarded\``,
    };
  },
};

/**
 * The registry the overview evaluates, in display order. To add an alert (webhooks' endpoint_disabled):
 * put its facts on OverviewFacts (driver/operations.ts, filled by the driver's overviewFacts),
 * its threshold on AlertThresholds (with a named default in core/options.ts), and its evaluator here.
 */
export const endpointDisabledAlert: AlertEvaluator = {
  name: 'endpoint_disabled',
  evaluate(f, t) {
    const n = f.endpointsDisabled;
    if (!on(t.endpointsDisabled) || n <= t.endpointsDisabled) return null;
    return {
      name: 'endpoint_disabled', figure: n, threshold: t.endpointsDisabled, unit: 'endpoints',
      since: f.endpointsDisabledSince, estimated: false,
      message: `${plural(n, 'disabled webhook endpoint')} (nothing is enqueued for them): fix the receiver, then \`rea endpoints enable <id>\``,
    };
  },
};

/**
 * A handler whose jobs wait while no running worker has it: removed or renamed in the code (the
 * relay keeps routing to its stored subscription, and its events can never be trimmed), or every
 * process that runs it is down; or jobs waiting for a handler no bus stores any more (forgotten,
 * then retried by name), since they came due. The facts hold only those past the threshold,
 * longest unseen first. Figure and threshold are both times: how long the longest unattended one
 * has gone without a worker, against handlerUnattendedMs; the handlers are named in the message.
 */
export const handlerUnattendedAlert: AlertEvaluator = {
  name: 'handler_unattended',
  evaluate(f, t, now) {
    const list = f.unattendedHandlers;
    if (!on(t.handlerUnattendedMs) || list.length === 0) return null;
    const first = list[0]!;
    const longestMs = Math.max(0, now - first.seenAt.getTime());
    const jobs = (n: number) => plural(n, 'waiting job');
    const gone = (h: (typeof list)[number]) => !h.stored;
    const what = list.length > 1
      ? `${list.length} handlers have waiting jobs and no running worker, the longest for ${formatMs(longestMs)} (${list.slice(0, 3).map((h) => `'${h.name}'${gone(h) ? ' (not stored)' : ''}: ${jobs(h.waiting)}`).join(', ')}${list.length > 3 ? ', …' : ''})`
      : gone(first)
        ? `${jobs(first.waiting)} of handler '${first.name}', which no bus stores (it was forgotten), ${first.waiting === 1 ? 'has' : 'have'} waited ${formatMs(longestMs)}`
        : `handler '${first.name}' has ${jobs(first.waiting)} and no running worker has had it for ${formatMs(longestMs)}`;
    const fix = list.length > 1
      ? 'start a process that runs it, or, if it is gone from the code, `rea handlers forget <name>` (cancels its waiting jobs)'
      : gone(first)
        ? `start a process that registers it, or \`rea handlers forget ${first.name}\` (cancels them)`
        : `start a process that runs it, or, if it is gone from the code, \`rea handlers forget ${first.name}\` (cancels its waiting jobs)`;
    return {
      name: 'handler_unattended', figure: longestMs, threshold: t.handlerUnattendedMs, unit: 'ms',
      since: new Date(first.seenAt.getTime() + t.handlerUnattendedMs), estimated: false,
      message: `${what}: ${fix}`,
    };
  },
};

/**
 * Jobs that are due and no worker takes: the next job in claim order of a handler (or of webhook
 * deliveries) has been due longer than jobsWaitingMs. The workers are too few or too slow for
 * the load, or none runs. events_backlog watches the relay; this watches what comes after it,
 * where a handler falling behind raised nothing (the counts are not an age). Figure and threshold
 * are times: how long the longest-waiting queue's next job has been due; the queues are named.
 */
export const jobsWaitingAlert: AlertEvaluator = {
  name: 'jobs_waiting',
  evaluate(f, t, now) {
    const list = f.waitingJobs;
    if (!on(t.jobsWaitingMs) || list.length === 0) return null;
    const first = list[0]!;
    const waitedMs = Math.max(0, now - first.dueAt.getTime());
    const queue = (w: (typeof list)[number]) => (w.kind === 'webhook' ? 'webhook deliveries' : `handler '${w.target}'`);
    const what = list.length > 1
      ? `${list.length} queues have jobs due and not taken, the longest for ${formatMs(waitedMs)} (${list.slice(0, 3).map(queue).join(', ')}${list.length > 3 ? ', …' : ''})`
      : `${queue(first)}: the next job has been due for ${formatMs(waitedMs)} and no worker has taken it`;
    return {
      name: 'jobs_waiting', figure: waitedMs, threshold: t.jobsWaitingMs, unit: 'ms',
      since: new Date(first.dueAt.getTime() + t.jobsWaitingMs), estimated: false,
      message: `${what} (threshold ${formatMs(t.jobsWaitingMs)}): the workers are behind or not running; add processes or raise their concurrency, or see which handler is slow (rea jobs list --state running)`,
    };
  },
};

export const alertEvaluators: AlertEvaluator[] = [eventsBacklogAlert, eventsPoisonedAlert, jobsDiscardedAlert, jobsWaitingAlert, handlerUnattendedAlert, endpointDisabledAlert];

export function evaluateAlerts(
  facts: OverviewFacts,
  thresholds: AlertThresholds,
  nowMs: number,
  evaluators: readonly AlertEvaluator[] = alertEvaluators,
): Alert[] {
  const alerts: Alert[] = [];
  for (const e of evaluators) {
    const a = e.evaluate(facts, thresholds, nowMs);
    if (a) alerts.push(a);
  }
  return alerts;
}

export function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  if (ms < 172_800_000) return `${(ms / 3_600_000).toFixed(1)} h`;
  return `${(ms / 86_400_000).toFixed(1)} d`;
}
