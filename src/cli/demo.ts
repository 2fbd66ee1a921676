// rea demo: a small order service on embedded PGlite. Orders are created and paid in transactions
// that record events; a warehouse handler reserves stock (transactionally), a flaky SMS handler
// shows retries and its idempotency key, a search indexer coalesces per order. Exits by itself.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { z } from 'zod';
import { createBus } from '../bus.js';
import { badValue, checkPort, checkWholeNumber } from './settings.js';
import { defineEvents } from '../core/events.js';
import { defaultLogger } from '../core/logger.js';
import { startLocalReceiver, type LocalReceiver } from './local-receiver.js';
import { formatOverview } from './status.js';
import { listenError, servePanel } from './panel.js';
import type { AdminBus } from '../admin/route.js';
import { resolveAuth, type AdminAuth } from '../admin/auth.js';

export const demoEvents = defineEvents({
  'order.created': z.object({ orderNo: z.string(), customer: z.string(), total: z.number().int().positive() }),
  'order.paid': z.object({ orderNo: z.string(), amount: z.number().int().positive() }),
});

/** The order whose SMS fails for good: the demo's one discard, on purpose. */
const INVALID_PHONE_ORDER = 'ORD-0013';

/** A job the demo's bus gave up on, from its `job:discarded` lifecycle signal. */
export interface DemoDiscard {
  /** The order whose event it was, when the event is one the demo recorded. */
  orderNo?: string;
  eventType?: string;
  eventId: string;
  handler: string;
  attempt: number;
  error: string;
}

export interface DemoSummary {
  recorded: number;
  fanned: number;
  completed: number;
  retried: number;
  discarded: number;
  discards: DemoDiscard[];
  smsSent: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  /** Distinct webhook deliveries the local receiver accepted after verifying their signature. */
  webhooksVerified: number;
  webhooksRejected: number;
}

// Ranges of the numeric options: past MAX_RATE the pacing gap is below setTimeout's resolution
// anyway, and MIN_RATE keeps the gap (100 s) far from setTimeout's 2^31 − 1 ms ceiling.
const MIN_RATE = 0.01;
const MAX_RATE = 10_000;
const PANEL_HOST = '127.0.0.1';

function rate(field: string, raw: string | number): number {
  const n = typeof raw === 'number' ? raw : /^(\d+(\.\d*)?|\.\d+)$/.test(raw.trim()) ? Number(raw) : Number.NaN;
  if (!Number.isFinite(n) || n < MIN_RATE || n > MAX_RATE) {
    throw badValue(field, `must be a number of orders per second from ${MIN_RATE} to ${MAX_RATE}, got '${raw}'`);
  }
  return n;
}

/** A listen error on the panel's port as a usage error naming the port and --panel-port. */
const panelListenError = (err: unknown, port: number) => listenError(err, { host: PANEL_HOST, port, flag: '--panel-port' });

/**
 * Bind the panel's port now, so a port in use fails before the demo's work, not after it. A
 * connection made to it meanwhile (a browser opened early) is closed at once: close() waits for
 * open connections, so one held open would keep the panel from starting.
 */
async function reservePort(p: number): Promise<NetServer> {
  const server = createNetServer((socket) => socket.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port: p, host: PANEL_HOST, exclusive: true }, resolve);
    });
  } catch (err) {
    throw panelListenError(err, p);
  }
  return server;
}

export async function runDemo(options: {
  orders: number; ratePerSecond: number; keepRunning?: boolean; dataDir?: string; quiet?: boolean;
  /** Port of the admin panel served while keepRunning (default 8787; 0 picks a free one). */
  panelPort?: number;
  /** Instead of waiting for Ctrl-C while keepRunning: run this (scripts/screenshot-panel.ts). */
  whileRunning?: (bus: AdminBus, panelUrl: string) => Promise<void>;
}): Promise<DemoSummary> {
  // Everything that can be refused is refused before anything starts.
  const orders = checkWholeNumber('orders', options.orders, 1);
  const gap = 1000 / rate('ratePerSecond', options.ratePerSecond);
  const panelPort = checkPort('panelPort', options.panelPort ?? 8787);
  // With REA_ADMIN_TOKEN set the panel asks for it, otherwise it needs none (loopback only).
  const panelToken = process.env.REA_ADMIN_TOKEN;
  const panelAuth: AdminAuth = options.keepRunning && panelToken ? resolveAuth({ token: panelToken }, process.env, 'REA_ADMIN_TOKEN') : 'none';
  // The panel's port is held from here until the panel takes it over (0: any free port will do).
  let reserved = options.keepRunning && panelPort !== 0 ? await reservePort(panelPort) : undefined;
  const release = async () => {
    const r = reserved;
    reserved = undefined;
    if (r) await new Promise<void>((resolve) => r.close(() => resolve()));
  };

  // Ctrl-C (or SIGTERM) stops creating orders and skips the drain; the bus, the receiver and the
  // temporary directory are cleaned up on the way out, as on success and on error.
  let interrupted = false;
  let wakeUp = () => {};
  const onSignal = () => {
    interrupted = true;
    wakeUp();
  };
  const sleep = (ms: number) => new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    wakeUp = () => {
      clearTimeout(t);
      resolve();
    };
  });
  // once: a second Ctrl-C finds no listener and ends the process the default way.
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  let tempDir: string | undefined;
  const out = (s: string) => !options.quiet && process.stdout.write(s);
  let progress: NodeJS.Timeout | undefined;
  let failed = false;
  let receiver: LocalReceiver | undefined;
  /** Distinct webhook-ids the receiver accepted. */
  const verified = new Set<string>();
  let stopBus: (() => Promise<void>) | undefined;
  try {
    const dir = options.dataDir ?? (tempDir = mkdtempSync(join(tmpdir(), 'rea-demo-')));
    out(`rea demo: embedded PostgreSQL (PGlite) in ${dir}\n`);
    const b = createBus({
      database: { pglite: dir },
      // The demo's failures are on purpose and show up in the counters; keep the log to real trouble.
      logger: defaultLogger('error'),
      events: demoEvents,
      relay: { minPollMs: 2 },
      worker: { concurrency: 8 },
      // The demo's webhook receiver listens on 127.0.0.1, which the SSRF guard refuses by default.
      webhooks: { allowPrivateNetworks: true },
    });
    stopBus = () => b.stop();
    await b.migrate();
    await b.driver.execScript(`
      create table if not exists public.orders (order_no text primary key, customer text not null, total int not null, status text not null);
      create table if not exists public.reservations (order_no text primary key, reserved_at timestamptz not null default now());
      create table if not exists public.search_index (order_no text primary key, status text not null, indexed_at timestamptz not null);`);

    const committedAt = new Map<string, number>();
    const recordedEvents = new Map<string, { orderNo: string; type: string }>();
    const latencies: number[] = [];
    const sent = new Set<string>();

    b.on('order.paid', 'warehouse', async (event, ctx) => {
      const t = committedAt.get(event.id);
      if (t !== undefined) latencies.push(performance.now() - t);
      // transactional: the reservation, the consume record and the job's completion commit together.
      await ctx.tx!.query('insert into public.reservations (order_no) values ($1) on conflict do nothing', [event.payload.orderNo]);
    }, { transactional: true });

    b.on('order.paid', 'sms', async (event, ctx) => {
      const n = Number(event.payload.orderNo.slice(4));
      // Every 7th order's SMS provider is down on the first try; order 13's number is invalid for good.
      if (event.payload.orderNo === INVALID_PHONE_ORDER) throw new Error('SMS provider: invalid phone number');
      if (n % 7 === 0 && ctx.attempt === 1) throw new Error('SMS provider timed out');
      sent.add(ctx.idempotencyKey); // a real provider would be given this key to drop duplicates
    }, { maxAttempts: 3, backoff: (attempt) => 200 * attempt });

    b.on('order.*', 'search-index', async (event, ctx) => {
      const status = event.type === 'order.paid' ? 'paid' : 'created';
      await ctx.tx!.query(
        `insert into public.search_index values ($1, $2, now()) on conflict (order_no) do update set status = excluded.status, indexed_at = now()`,
        [event.payload.orderNo, status],
      );
    }, { coalesce: 'subject', transactional: true });

    // A partner's webhook receiver: it verifies every delivery's Standard Webhooks signature with
    // the secret it was given once, at endpoint creation, and counts distinct webhook-ids.
    receiver = await startLocalReceiver('/webhooks/rea', (_body, headers) => verified.add(String(headers['webhook-id'])));
    const rx = receiver;
    const endpoint = await b.endpoints.create({ url: rx.url, eventTypes: ['order.paid'], description: 'demo partner (local receiver)' });
    rx.secret = endpoint.secret;

    const counts = { fanned: 0, completed: 0, retried: 0 };
    const discards: DemoDiscard[] = [];
    b.lifecycle.on('relay:batch:fanned', (x) => (counts.fanned += x.eventIds.length));
    b.lifecycle.on('job:completed', () => counts.completed++);
    b.lifecycle.on('job:failed', () => counts.retried++);
    b.lifecycle.on('job:discarded', (d) => {
      const ev = recordedEvents.get(d.eventId);
      discards.push({ orderNo: ev?.orderNo, eventType: ev?.type, eventId: d.eventId, handler: d.handler, attempt: d.attempt, error: d.error });
    });
    await b.start();

    let recorded = 0;
    const tty = process.stdout.isTTY === true;
    progress = setInterval(() => {
      out(`${tty ? '\r' : ''}  recorded ${recorded} · fanned ${counts.fanned} · jobs completed ${counts.completed} · retried ${counts.retried} · discarded ${discards.length}${tty ? '   ' : '\n'}`);
    }, tty ? 200 : 1000);

    const start = performance.now();
    for (let i = 1; i <= orders && !interrupted; i++) {
      const orderNo = `ORD-${String(i).padStart(4, '0')}`;
      const createdId = await b.transaction(async (tx) => {
        await tx.query('insert into public.orders values ($1, $2, $3, $4)', [orderNo, `customer-${i % 17}`, 1000 + i, 'created']);
        return b.record(tx, 'order.created', { orderNo, customer: `customer-${i % 17}`, total: 1000 + i }, { subject: orderNo, createdBy: 'demo' });
      });
      recordedEvents.set(createdId, { orderNo, type: 'order.created' });
      const paidId = await b.transaction(async (tx) => {
        await tx.query(`update public.orders set status = 'paid' where order_no = $1`, [orderNo]);
        return b.record(tx, 'order.paid', { orderNo, amount: 1000 + i }, { subject: orderNo, createdBy: 'demo' });
      });
      recordedEvents.set(paidId, { orderNo, type: 'order.paid' });
      committedAt.set(paidId, performance.now());
      recorded += 2;
      const wait = start + i * gap - performance.now();
      if (wait > 0 && !interrupted) await sleep(wait);
    }

    // Drain: every event fanned, no job waiting or running.
    while (!interrupted) {
      const o = await b.overview();
      if (o.backlog === 0 && o.jobs.available + o.jobs.running + o.jobs.retryable === 0) break;
      await sleep(100);
    }
    clearInterval(progress);
    const overview = await b.overview();
    const sorted = [...latencies].sort((x, y) => x - y);
    const pct = (p: number) => sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : 0;
    const summary: DemoSummary = {
      recorded, fanned: counts.fanned, completed: counts.completed, retried: counts.retried, discarded: discards.length, discards: [...discards],
      smsSent: sent.size, latencyP50Ms: pct(50), latencyP99Ms: pct(99),
      webhooksVerified: verified.size, webhooksRejected: rx.rejected,
    };
    if (tty) out(`\r${' '.repeat(100)}\r`);
    out(`\nsummary${interrupted ? ' (interrupted: orders stopped, the rest not drained)' : ''}\n`);
    out(`  events recorded ${summary.recorded}, fanned out ${summary.fanned}\n`);
    out(`  jobs completed ${summary.completed}, retried ${summary.retried}, discarded ${summary.discarded}${describeDiscards(summary.discards)}\n`);
    out(`  SMS sent once per order: ${summary.smsSent} distinct idempotency keys\n`);
    out(`  webhooks to the local receiver: ${summary.webhooksVerified} delivered with a valid signature, ${summary.webhooksRejected} rejected\n`);
    out(`  commit → warehouse handler: p50 ${summary.latencyP50Ms.toFixed(1)} ms, p99 ${summary.latencyP99Ms.toFixed(1)} ms\n`);
    out(`\n${formatOverview(overview)}\n`);
    // The overview's jobs_discarded alert says to run `rea jobs retry --discarded`: of the demo's
    // own discard, and on a database that is gone once it exits, unless it keeps running.
    if (summary.discarded > 0) {
      if (summary.discards.every((d) => d.orderNo === INVALID_PHONE_ORDER && d.handler === 'sms')) {
        out(`\nthe discard is on purpose: order ${INVALID_PHONE_ORDER}'s SMS fails for good (invalid phone number), to show one\n`);
      }
      if (tempDir !== undefined && !(options.keepRunning && !interrupted)) {
        out('this run\'s database is a temporary directory, removed as the demo exits: the alert\'s command has nothing left to act on;\n'
          + 'run rea demo --keep-running to retry the discarded job from the admin panel\n');
      }
    }

    if (options.keepRunning && !interrupted) {
      await release();
      const panel = await servePanel(b, { port: panelPort, host: PANEL_HOST, auth: panelAuth })
        .catch((err: unknown) => Promise.reject(panelListenError(err, panelPort)));
      try {
        out(`\nadmin panel: ${panel.url}${panelAuth !== 'none' ? ' (log in with REA_ADMIN_TOKEN)' : ''}\n`);
        out(`keeping the bus running (data in ${dir}${tempDir ? ', removed on exit' : ''}); Ctrl-C stops\n`);
        await (options.whileRunning
          ? options.whileRunning(b, panel.url)
          : new Promise<void>((resolve) => {
            wakeUp = resolve;
            if (interrupted) resolve();
          }));
      } finally {
        await panel.close();
      }
    }
    return summary;
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    clearInterval(progress);
    // Every step runs; the first failure is reported unless an error is already on its way out.
    let cleanupError: unknown;
    for (const step of [release, () => stopBus?.(), () => receiver?.close(), () => tempDir !== undefined && rmSync(tempDir, { recursive: true, force: true })]) {
      try {
        await step();
      } catch (err) {
        cleanupError ??= err;
      }
    }
    if (cleanupError !== undefined && !failed) throw cleanupError;
  }
}

/** ` (order ORD-0013, sms: SMS provider: invalid phone number)` for the jobs that were discarded; '' for none. */
function describeDiscards(discards: DemoDiscard[]): string {
  if (discards.length === 0) return '';
  const shown = 3;
  const one = (d: DemoDiscard) => `${d.orderNo ? `order ${d.orderNo}` : `event ${d.eventId}`}, ${d.handler}: ${d.error}`;
  const more = discards.length > shown ? `; and ${discards.length - shown} more` : '';
  return ` (${discards.slice(0, shown).map(one).join('; ')}${more})`;
}

export function demoCommand(): Command {
  return new Command('demo')
    .description('run a small order service on embedded PGlite and show rea at work')
    .option('--orders <n>', 'orders to create and pay', '100')
    .option('--rate <n>', 'orders per second (PGlite is one connection: past 20–40/s, depending on the machine, a queue builds and latency grows)', '10')
    .option('--keep-running', 'keep the bus running after the summary, with the admin panel')
    .option('--panel-port <n>', 'port of the admin panel while --keep-running', '8787')
    .action(async (flags: { orders: string; rate: string; keepRunning?: boolean; panelPort: string }) => {
      // Checked before anything starts; a bad value is a usage error naming its flag (exit 2).
      const orders = checkWholeNumber('--orders', flags.orders, 1);
      const ratePerSecond = rate('--rate', flags.rate);
      const panelPort = checkPort('--panel-port', flags.panelPort);
      await runDemo({ orders, ratePerSecond, keepRunning: flags.keepRunning, panelPort });
    });
}
