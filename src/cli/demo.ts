// rea demo: a small order service on embedded PGlite. Orders are created and paid in transactions
// that record events; a warehouse handler reserves stock (transactionally), a flaky SMS handler
// shows retries and its idempotency key, a search indexer coalesces per order. Exits by itself.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { z } from 'zod';
import { createBus } from '../bus.js';
import { defineEvents } from '../core/events.js';
import { pino } from 'pino';
import type { Logger } from '../core/logger.js';
import { verifyPayload } from '../channels/webhook/signature.js';
import { formatOverview } from './status.js';
import { servePanel } from './panel.js';
import type { AdminBus } from '../admin/route.js';

export const demoEvents = defineEvents({
  'order.created': z.object({ orderNo: z.string(), customer: z.string(), total: z.number().int().positive() }),
  'order.paid': z.object({ orderNo: z.string(), amount: z.number().int().positive() }),
});

export interface DemoSummary {
  recorded: number;
  fanned: number;
  completed: number;
  retried: number;
  discarded: number;
  smsSent: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  /** Distinct webhook deliveries the local receiver accepted after verifying their signature. */
  webhooksVerified: number;
  webhooksRejected: number;
}

export async function runDemo(options: {
  orders: number; ratePerSecond: number; keepRunning?: boolean; dataDir?: string; quiet?: boolean;
  /** Port of the admin panel served while keepRunning (default 8787; 0 picks a free one). */
  panelPort?: number;
  /** Instead of waiting for Ctrl-C while keepRunning: run this (scripts/screenshot-panel.ts). */
  whileRunning?: (bus: AdminBus, panelUrl: string) => Promise<void>;
}): Promise<DemoSummary> {
  const dir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'rea-demo-'));
  const out = (s: string) => !options.quiet && process.stdout.write(s);
  out(`rea demo: embedded PostgreSQL (PGlite) in ${dir}\n`);
  const bus = createBus({
    database: { pglite: dir },
    // The demo's failures are on purpose and show up in the counters; keep the log to real trouble.
    logger: pino({ level: process.env.REA_LOG_LEVEL ?? 'error' }) as unknown as Logger,
    events: demoEvents,
    relay: { minPollMs: 2 },
    worker: { concurrency: 8 },
    // The demo's webhook receiver listens on 127.0.0.1, which the SSRF guard refuses by default.
    webhooks: { allowPrivateNetworks: true },
  });
  await bus.migrate();
  await bus.driver.execScript(`
    create table if not exists public.orders (order_no text primary key, customer text not null, total int not null, status text not null);
    create table if not exists public.reservations (order_no text primary key, reserved_at timestamptz not null default now());
    create table if not exists public.search_index (order_no text primary key, status text not null, indexed_at timestamptz not null);`);

  const committedAt = new Map<string, number>();
  const latencies: number[] = [];
  const sent = new Set<string>();

  bus.on('order.paid', 'warehouse', async (event, ctx) => {
    const t = committedAt.get(event.id);
    if (t !== undefined) latencies.push(performance.now() - t);
    // transactional: the reservation, the consume record and the job's completion commit together.
    await ctx.tx!.query('insert into public.reservations (order_no) values ($1) on conflict do nothing', [event.payload.orderNo]);
  }, { transactional: true });

  bus.on('order.paid', 'sms', async (event, ctx) => {
    const n = Number(event.payload.orderNo.slice(4));
    // Every 7th order's SMS provider is down on the first try; order 13's number is invalid for good.
    if (n === 13) throw new Error('SMS provider: invalid phone number');
    if (n % 7 === 0 && ctx.attempt === 1) throw new Error('SMS provider timed out');
    sent.add(ctx.idempotencyKey); // a real provider would be given this key to drop duplicates
  }, { maxAttempts: 3, backoff: (attempt) => 200 * attempt });

  bus.on('order.*', 'search-index', async (event, ctx) => {
    const status = event.type === 'order.paid' ? 'paid' : 'created';
    await ctx.tx!.query(
      `insert into public.search_index values ($1, $2, now()) on conflict (order_no) do update set status = excluded.status, indexed_at = now()`,
      [event.payload.orderNo, status],
    );
  }, { coalesce: 'subject', transactional: true });

  // A partner's webhook receiver: it verifies every delivery's Standard Webhooks signature with
  // the secret it was given once, at endpoint creation, and counts distinct webhook-ids.
  const receiver = await startReceiver();
  const endpoint = await bus.endpoints.create({ url: receiver.url, eventTypes: ['order.paid'], description: 'demo partner (local receiver)' });
  receiver.secret = endpoint.secret;

  const counts = { fanned: 0, completed: 0, retried: 0, discarded: 0 };
  bus.lifecycle.on('relay:batch:fanned', (b) => (counts.fanned += b.eventIds.length));
  bus.lifecycle.on('job:completed', () => counts.completed++);
  bus.lifecycle.on('job:failed', () => counts.retried++);
  bus.lifecycle.on('job:discarded', () => counts.discarded++);
  await bus.start();

  let recorded = 0;
  const tty = process.stdout.isTTY === true;
  const progress = setInterval(() => {
    out(`${tty ? '\r' : ''}  recorded ${recorded} · fanned ${counts.fanned} · jobs completed ${counts.completed} · retried ${counts.retried} · discarded ${counts.discarded}${tty ? '   ' : '\n'}`);
  }, tty ? 200 : 1000);

  const gap = 1000 / options.ratePerSecond;
  const start = performance.now();
  for (let i = 1; i <= options.orders; i++) {
    const orderNo = `ORD-${String(i).padStart(4, '0')}`;
    await bus.transaction(async (tx) => {
      await tx.query('insert into public.orders values ($1, $2, $3, $4)', [orderNo, `customer-${i % 17}`, 1000 + i, 'created']);
      await bus.record(tx, 'order.created', { orderNo, customer: `customer-${i % 17}`, total: 1000 + i }, { subject: orderNo, createdBy: 'demo' });
    });
    const paidId = await bus.transaction(async (tx) => {
      await tx.query(`update public.orders set status = 'paid' where order_no = $1`, [orderNo]);
      return bus.record(tx, 'order.paid', { orderNo, amount: 1000 + i }, { subject: orderNo, createdBy: 'demo' });
    });
    committedAt.set(paidId, performance.now());
    recorded += 2;
    const wait = start + i * gap - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }

  // Drain: every event fanned, no job waiting or running.
  for (;;) {
    const o = await bus.overview();
    if (o.backlog === 0 && o.jobs.available + o.jobs.running + o.jobs.retryable === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  clearInterval(progress);
  const overview = await bus.overview();
  const sorted = [...latencies].sort((a, b) => a - b);
  const pct = (p: number) => sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : 0;
  const summary: DemoSummary = {
    recorded, fanned: counts.fanned, completed: counts.completed, retried: counts.retried, discarded: counts.discarded,
    smsSent: sent.size, latencyP50Ms: pct(50), latencyP99Ms: pct(99),
    webhooksVerified: receiver.verified.size, webhooksRejected: receiver.rejected,
  };
  if (tty) out(`\r${' '.repeat(100)}\r`);
  out(`\nsummary\n`);
  out(`  events recorded ${summary.recorded}, fanned out ${summary.fanned}\n`);
  out(`  jobs completed ${summary.completed}, retried ${summary.retried}, discarded ${summary.discarded} (order ORD-0013's SMS: invalid number)\n`);
  out(`  SMS sent once per order: ${summary.smsSent} distinct idempotency keys\n`);
  out(`  webhooks to the local receiver: ${summary.webhooksVerified} delivered with a valid signature, ${summary.webhooksRejected} rejected\n`);
  out(`  commit → warehouse handler: p50 ${summary.latencyP50Ms.toFixed(1)} ms, p99 ${summary.latencyP99Ms.toFixed(1)} ms\n`);
  out(`\n${formatOverview(overview)}\n`);

  if (options.keepRunning) {
    // The panel on loopback: with REA_ADMIN_TOKEN set it asks for it, otherwise it needs none.
    const token = process.env.REA_ADMIN_TOKEN;
    const panel = await servePanel(bus as unknown as AdminBus, { port: options.panelPort ?? 8787, host: '127.0.0.1', auth: token ? { token } : 'none' });
    out(`\nadmin panel: ${panel.url}${token ? ' (log in with REA_ADMIN_TOKEN)' : ''}\n`);
    out(`keeping the bus running (data in ${dir}); Ctrl-C stops\n`);
    await (options.whileRunning
      ? options.whileRunning(bus as unknown as AdminBus, panel.url)
      : new Promise<void>((resolve) => process.once('SIGINT', () => resolve())));
    await panel.close();
  }
  await bus.stop();
  await receiver.close();
  if (!options.dataDir && !options.keepRunning) rmSync(dir, { recursive: true, force: true });
  return summary;
}

async function startReceiver() {
  const state = {
    url: '', secret: '', verified: new Set<string>(), rejected: 0,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (state.secret && verifyPayload({ headers: req.headers, body, secrets: [state.secret] })) {
        state.verified.add(String(req.headers['webhook-id']));
        res.writeHead(204).end();
      } else {
        state.rejected++;
        res.writeHead(401).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks/rea`;
  return state;
}

export function demoCommand(): Command {
  return new Command('demo')
    .description('run a small order service on embedded PGlite and show rea at work')
    .option('--orders <n>', 'orders to create and pay', '100')
    .option('--rate <n>', 'orders per second (PGlite is one connection: past 20–40/s, depending on the machine, a queue builds and latency grows)', '10')
    .option('--keep-running', 'keep the bus running after the summary, with the admin panel')
    .option('--panel-port <n>', 'port of the admin panel while --keep-running', '8787')
    .action(async (flags: { orders: string; rate: string; keepRunning?: boolean; panelPort: string }) => {
      await runDemo({ orders: Number(flags.orders), ratePerSecond: Number(flags.rate), keepRunning: flags.keepRunning, panelPort: Number(flags.panelPort) });
    });
}
