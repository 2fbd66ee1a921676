// The overview as the admin API and panel show it: the bus's overview plus the parts issue 3
// adds (alerts, table sizes) read defensively, so the panel works against either shape.
import type { AdminBus } from './route.js';

export interface AdminAlert {
  name: string;
  figure: number;
  threshold: number;
  unit: string;
  since: Date | string | null;
  estimated?: boolean;
  message: string;
}

export interface AdminOverview {
  backlog: number;
  poisoned: number;
  oldestUnfannedAgeMs: number | null;
  jobs: Record<string, number>;
  alerts: AdminAlert[];
  tables: { name: string; totalBytes: number }[];
  /** Figures that are planner estimates (large tables), when the bus says so. */
  estimated: string[];
  raw: Record<string, unknown>;
}

const figure = (v: unknown): number => (typeof v === 'number' ? v : v && typeof v === 'object' && 'value' in v ? Number((v as { value: unknown }).value) : 0);

export async function adminOverview(bus: AdminBus): Promise<AdminOverview> {
  const o = (await bus.overview()) as unknown as Record<string, unknown>;
  const jobs: Record<string, number> = {};
  for (const [state, n] of Object.entries((o.jobs ?? {}) as Record<string, unknown>)) jobs[state] = figure(n);
  const tables = Array.isArray(o.tables)
    ? (o.tables as { name: string; totalBytes: number }[]).map((t) => ({ name: String(t.name), totalBytes: Number(t.totalBytes) }))
    : [];
  return {
    backlog: figure(o.backlog),
    poisoned: figure(o.poisoned),
    oldestUnfannedAgeMs: typeof o.oldestUnfannedAgeMs === 'number' ? o.oldestUnfannedAgeMs : null,
    jobs,
    alerts: Array.isArray(o.alerts) ? (o.alerts as AdminAlert[]) : [],
    tables,
    estimated: Array.isArray(o.estimated) ? (o.estimated as string[]) : [],
    raw: o,
  };
}
