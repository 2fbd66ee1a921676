// GET /metrics: Prometheus text from a private registry (never prom-client's global one, so an
// application's own metrics and two handlers never collide). Gauges are read from the overview
// at scrape time; handler durations and delivery outcomes are counted from this process's
// lifecycle signals, and left out where this process runs no handlers (processMetrics: false).
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import { alertEvaluators } from './alerts.js';
import type { AdminBus } from './route.js';

// Loaded when an admin handler is created, not when rea is imported: a worker that never serves
// /metrics should not carry prom-client.
const prom = () => createRequire(import.meta.url)('prom-client') as typeof PromClient;

export class AdminMetrics {
  private readonly p = prom();
  private readonly shared = new this.p.Registry();
  readonly registry: PromClient.Registry;
  private readonly backlog = this.gauge('rea_events_backlog', 'Unfanned, unpoisoned events waiting for the relay');
  private readonly poisoned = this.gauge('rea_events_poisoned', 'Events quarantined after repeated fan-out failures');
  private readonly oldest = this.gauge('rea_events_oldest_unfanned_age_seconds', 'Age of the oldest unfanned event (0 when none)');
  private readonly jobs = this.gauge('rea_jobs', 'Jobs by state', ['state']);
  private readonly tables = this.gauge('rea_table_size_bytes', "Total size of each rea table with indexes and TOAST", ['table']);
  private readonly alerts = this.gauge('rea_alert_active', 'Alerts currently raised by the overview (1 while active)', ['alert']);
  private readonly leader = this.gauge('rea_leader_lease_valid', '1 when some instance holds an unexpired leader lease');
  // A count past overview.exactCountLimit is the planner's estimate, never below the limit: with
  // stale statistics it read 10001 for a queue of 454,000, and nothing in the scrape said so.
  private readonly estimated = this.gauge('rea_count_estimated', "1 when that figure (backlog, poisoned, jobs.<state>) is past overview.exactCountLimit and is the planner's estimate", ['figure']);
  /** This process's own series, in a registry of their own so a process that runs no work leaves them out. */
  private readonly own = new this.p.Registry();
  private readonly durations = new this.p.Histogram({
    name: 'rea_handler_duration_seconds', help: 'Run time of jobs completed by this process, by target and kind',
    labelNames: ['handler', 'kind'], buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.own],
  });
  private readonly deliveries = new this.p.Counter({
    name: 'rea_webhook_deliveries_total', help: 'Webhook delivery attempts of events made by this process, by outcome (test deliveries not counted)',
    labelNames: ['outcome'], registers: [this.own],
  });
  private readonly offs: (() => void)[] = [];
  // Every alert rea can raise has its series from the first scrape, at 0 until it is raised:
  // before, a series appeared only once its alert had fired, so a rule such as
  // `rea_alert_active{alert="events_poisoned"} == 0` or absent() could not tell "fine" from
  // "not scraped", and a dashboard had nothing to show until the first incident.
  private readonly knownAlerts = new Set<string>(alertEvaluators.map((e) => e.name));

  /**
   * processMetrics: whether this process runs handlers or webhook deliveries. Where it does not (rea
   * panel, a web server that only records), its durations and delivery counts would be zeros that
   * read as "no failures" while the workers elsewhere fail; they are left out instead.
   */
  constructor(private readonly bus: AdminBus, processMetrics = true) {
    if (!processMetrics) {
      this.registry = this.shared;
      return;
    }
    this.registry = this.p.Registry.merge([this.shared, this.own]) as PromClient.Registry;
    // A webhook job's target is its endpoint's id: as a label value, 15 series (buckets, sum,
    // count) per endpoint in every process, however many thousands of endpoints there are. So
    // deliveries are one series (handler ""); per-endpoint figures are the attempt log's.
    this.offs.push(bus.lifecycle.on('job:completed', (e) => {
      const kind = e.kind ?? 'handler';
      this.durations.observe({ handler: kind === 'handler' ? e.handler : '', kind }, e.durationMs / 1000);
    }));
    // A test delivery (rea endpoints test, the panel's Test button; jobId null) is an operator's
    // probe, not a delivery of an event: counted, it would move failure-rate alerts.
    this.offs.push(bus.lifecycle.on('webhook:attempt', (e) => {
      if (e.jobId !== null) this.deliveries.inc({ outcome: e.outcome });
    }));
    for (const outcome of ['success', 'failure', 'gone', 'throttled', 'refused']) this.deliveries.inc({ outcome }, 0);
  }

  async render(): Promise<string> {
    const [o, lease] = await Promise.all([this.bus.overview(), this.bus.driver.admin.leaderGet()]);
    this.backlog.set(o.backlog);
    this.poisoned.set(o.poisoned);
    this.oldest.set((o.oldestUnfannedAgeMs ?? 0) / 1000);
    for (const [state, n] of Object.entries(o.jobs)) this.jobs.set({ state }, n);
    const estimated = new Set(o.estimated);
    for (const figure of ['backlog', 'poisoned', ...Object.keys(o.jobs).map((s) => `jobs.${s}`)]) this.estimated.set({ figure }, estimated.has(figure) ? 1 : 0);
    this.tables.reset();
    for (const t of o.tables) this.tables.set({ table: t.name }, t.totalBytes);
    const active = new Set(o.alerts.map((a) => a.name));
    for (const name of active) this.knownAlerts.add(name);
    for (const name of this.knownAlerts) this.alerts.set({ alert: name }, active.has(name) ? 1 : 0);
    this.leader.set(lease && lease.expiresAt.getTime() > lease.readAt.getTime() ? 1 : 0);
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  close(): void {
    for (const off of this.offs.splice(0)) off();
  }

  private gauge(name: string, help: string, labelNames: string[] = []): PromClient.Gauge {
    return new this.p.Gauge({ name, help, labelNames, registers: [this.shared] });
  }
}
