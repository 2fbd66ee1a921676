// Webhooks end to end: endpoints, fan-out, signed delivery through real HTTP receivers, retries
// and Retry-After, endpoint health, SSRF at create and at delivery, attempt log, resend/replay.
import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { webhookIdFor } from '../src/channels/webhook/channel.js';
import { WebhookUrlRefusedError } from '../src/index.js';
import { createBus, DEFAULTS, defineEvents, ManualClock, NotFoundError, OptionsError, UnknownEventTypeError, verifyPayload, WebhookSecretError, type Bus, type Logger } from '../src/index.js';
import { CLOSE_WAIT_MS } from '../src/drivers/postgres/driver.js';
import { MAX_PREVIOUS_SECRETS } from '../src/drivers/postgres/sql-webhooks.js';
import { AttemptRetention } from '../src/maintenance/attempt-retention.js';
import { EndpointHealth } from '../src/maintenance/endpoint-health.js';
import { describeTargets, freshSchema, testBus } from './helpers/db.js';
import { receiver, type Receiver } from './helpers/http.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({
  'order.created': z.object({ orderNo: z.string() }),
  'order.paid': z.object({ orderNo: z.string(), amount: z.number() }),
  'user.signed_up': z.object({ email: z.string() }),
});

const DAY = 24 * 3600_000;
// Poll fast so tests wait on signals, not on the 1 s idle poll.
const fast = { relay: { maxPollMs: 20 }, worker: { maxPollMs: 20 } };
const local = { ...fast, webhooks: { allowPrivateNetworks: true } };

function capturingLogger(lines: string[]): Logger {
  const make = (bindings: Record<string, unknown>): Logger => {
    const write = (obj: object, msg?: string) => lines.push(JSON.stringify({ ...bindings, ...obj, msg }));
    return { debug: write, info: write, warn: write, error: write, child: (b) => make({ ...bindings, ...b }) };
  };
  return make({});
}

/** A receiver that answers `status` to the order 'X' and 200 to every other. */
async function refusingX(status: number): Promise<Receiver> {
  const r: Receiver = await receiver((_q, res, n) => {
    if (JSON.parse(r.received[n - 1]!.body).data.orderNo === 'X') res.writeHead(status).end('refused');
    else res.end('ok');
  });
  return r;
}

/** Record one order.created and wait until a webhook delivery of it completed or failed; its event id. */
async function deliverOne(bus: Bus<typeof events.schemas>, orderNo: string): Promise<string> {
  const done = bus.lifecycle.waitFor('job:completed', (e) => e.kind === 'webhook');
  const failed = bus.lifecycle.waitFor('job:failed', (e) => e.kind === 'webhook');
  const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo }));
  await Promise.race([done, failed]);
  return id;
}

describeTargets('webhooks on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a delivery is a signed POST of the envelope that standardwebhooks verifies; list/get never show the secret', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const other = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], description: 'orders' });
    await bus.endpoints.create({ url: other.url, eventTypes: ['user.signed_up'] });
    expect(ep.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(ep.secretHint).toBe(ep.secret.slice(-5, -1)); // the 4 before the padding '='
    expect(ep).toMatchObject({ state: 'enabled', eventTypes: ['order.*'], failingSince: null, description: 'orders' });
    await bus.start();
    const completed = bus.lifecycle.waitFor('job:completed', (e) => e.kind === 'webhook');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A-1' }, { subject: 'A-1' }));
    const got = await r.nth(1);
    const done = await completed;

    const envelope = new Webhook(ep.secret).verify(got.body, got.headers) as Record<string, unknown>;
    const stored = (await bus.events.get(eventId))!;
    expect(envelope).toEqual({ id: eventId, type: 'order.created', subject: 'A-1', timestamp: stored.createdAt.toISOString(), data: { orderNo: 'A-1' } });
    expect(got.headers['webhook-id']).toBe(webhookIdFor(eventId, done.jobId));
    // The wire format README documents; ids receivers already stored must keep their shape.
    expect(got.headers['webhook-id']).toBe(`msg_${eventId.replaceAll('-', '')}_${done.jobId}`);
    expect(got.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}_\d+$/);
    expect(got.headers['content-type']).toBe('application/json');
    expect(other.received).toHaveLength(0); // not subscribed to order events

    const [job] = (await bus.jobs.forEvent(eventId)).filter((j) => j.kind === 'webhook');
    expect(job).toMatchObject({ target: ep.id, state: 'completed', maxAttempts: 18, coalesced: 1 });
    const leaseMs = (await target.query(`select lease_ms from "${bus.schema}".jobs where id = $1`, [job!.id]))[0].lease_ms;
    expect(leaseMs).toBeGreaterThan(15_000);

    const listed = await bus.endpoints.list();
    const fetched = await bus.endpoints.get(ep.id);
    expect(listed).toHaveLength(2);
    expect(JSON.stringify([listed, fetched])).not.toContain(ep.secret.slice(6, 30));
    expect(Object.keys(fetched!)).not.toContain('secret');
  });

  test("migration 12 gives an endpoint made before it the hint of the 4 characters before the secret's padding", async () => {
    const bus = await testBus(target, events, local);
    const ep = await bus.endpoints.create({ url: 'https://hooks.example.com/a', eventTypes: ['order.*'] });
    const given = await bus.endpoints.create({ url: 'https://hooks.example.com/b', eventTypes: ['order.*'], secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' });
    // As an older rea stored them: the last 4 characters, '=' and all.
    await target.query(`update "${bus.schema}".endpoints set secret_hint = right(secrets -> 0 ->> 'secret', 4)`);
    await target.query(`delete from "${bus.schema}".migrations where version = 12`);
    expect((await bus.endpoints.get(ep.id))!.secretHint).toBe(ep.secret.slice(-4));
    await bus.migrate();
    expect((await bus.endpoints.get(ep.id))!.secretHint).toBe(ep.secret.slice(-5, -1));
    expect((await bus.endpoints.get(given.id))!.secretHint).toBe('LaSw');
  });

  test('every event is its own delivery: no coalescing, one job per (event, endpoint)', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    await bus.endpoints.create({ url: r.url, eventTypes: ['*'] });
    const ids = await bus.transaction((tx) => bus.recordMany(tx, [1, 2, 3].map((n) => ({ type: 'order.paid' as const, payload: { orderNo: 'S', amount: n }, subject: 'S' }))));
    await bus.relayOnce();
    for (const id of ids) expect((await bus.jobs.forEvent(id)).map((j) => [j.kind, j.coalesced])).toEqual([['webhook', 1]]);
  });

  test('rotateSecret: two signatures during the grace period, each verifying alone; then only the new one', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const rotated = await bus.endpoints.rotateSecret(ep.id);
    expect(rotated.secret).not.toBe(ep.secret);
    expect(rotated.secretHint).toBe(rotated.secret.slice(-5, -1));
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'R' }));
    const first = await r.nth(1);
    expect(first.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(new Webhook(ep.secret).verify(first.body, first.headers)).toMatchObject({ type: 'order.created' });
    expect(new Webhook(rotated.secret).verify(first.body, first.headers)).toMatchObject({ type: 'order.created' });

    const again = await bus.endpoints.rotateSecret(rotated.id, { graceMs: 0 });
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'R2' }));
    const second = await r.nth(2);
    expect(second.headers['webhook-signature']!.split(' ')).toHaveLength(1);
    expect(new Webhook(again.secret).verify(second.body, second.headers)).toBeTruthy();
    expect(() => new Webhook(rotated.secret).verify(second.body, second.headers)).toThrow();
  });

  test('endpoints.list pages by id: oldest first, the next page after the last id; a bad cursor is named', async () => {
    // Before, it stopped at the oldest 1,000 and nothing reached the ones after.
    const bus = await testBus(target, events, local);
    const made: string[] = [];
    for (let i = 0; i < 5; i++) made.push((await bus.endpoints.create({ url: `http://127.0.0.1:9/${i}`, eventTypes: ['order.created'] })).id);
    const pages: string[][] = [];
    let after: string | undefined;
    for (;;) {
      const page = await bus.endpoints.list({ limit: 2, ...(after ? { after } : {}) });
      pages.push(page.map((e) => e.id));
      if (page.length < 2) break;
      after = page.at(-1)!.id;
    }
    expect(pages).toEqual([made.slice(0, 2), made.slice(2, 4), made.slice(4)]);
    await bus.endpoints.disable(made[3]!);
    expect((await bus.endpoints.list({ state: 'enabled', after: made[1]! })).map((e) => e.id)).toEqual([made[2], made[4]]);
    const err = await bus.endpoints.list({ after: 'page-2' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OptionsError);
    expect((err as OptionsError).message).toContain('endpoints.list.after');
  });

  test('endpoints.page says whether a next page exists: a full last page has no nextCursor', async () => {
    // Before, only a short page told the end: a caller (the CLI, the API, the panel) took a full
    // page for "more", and following it gave an empty page.
    const bus = await testBus(target, events, local);
    const made: string[] = [];
    for (let i = 0; i < 4; i++) made.push((await bus.endpoints.create({ url: `http://127.0.0.1:9/${i}`, eventTypes: ['order.created'] })).id);
    const first = await bus.endpoints.page({ limit: 2 });
    expect(first).toEqual({ items: (await bus.endpoints.list({ limit: 2 })), nextCursor: made[1] });
    const second = await bus.endpoints.page({ limit: 2, after: first.nextCursor! });
    expect(second.items.map((e) => e.id)).toEqual(made.slice(2));
    expect(second.nextCursor).toBeNull();
    expect((await bus.endpoints.page()).nextCursor).toBeNull();
    expect((await bus.endpoints.page({ limit: 4 })).nextCursor).toBeNull();
    await bus.endpoints.disable(made[3]!);
    expect(await bus.endpoints.page({ state: 'enabled', limit: 3 })).toMatchObject({ nextCursor: null });
    expect(await bus.endpoints.page({ state: 'enabled', limit: 2 })).toMatchObject({ nextCursor: made[1] });
    await expect(bus.endpoints.page({ limit: 0 })).rejects.toThrow(/endpoints\.page\.limit/);
  });

  test("a failing endpoint's backlog steps aside for the others' deliveries, and comes back when it recovers", async () => {
    // Claims go in order of due time across endpoints: before, the five deliveries of an endpoint
    // that is down were each tried (a timeout each, for one that hangs) on the only webhook slot,
    // and the other endpoint's delivery waited behind all of them.
    let healthy = false;
    const down = await receiver((_q, res) => {
      if (healthy) return res.end('ok');
      res.writeHead(503, { 'retry-after': '600' }); // its own retry stays out of this test's way
      res.end();
    });
    const other = await receiver();
    const bus = await testBus(target, events, {
      ...fast, worker: { ...fast.worker, prefetch: 0 }, webhooks: { allowPrivateNetworks: true, concurrency: 1 },
    });
    const a = await bus.endpoints.create({ url: down.url, eventTypes: ['order.paid'] });
    await bus.endpoints.create({ url: other.url, eventTypes: ['order.created'] });
    await bus.start();
    // Emitted once the failure is written (the slot is free before that).
    const failed = bus.lifecycle.waitFor('job:failed', (f) => f.kind === 'webhook' && f.handler === a.id);
    await bus.transaction(async (tx) => {
      for (let i = 1; i <= 5; i++) await bus.record(tx, 'order.paid', { orderNo: `P${i}`, amount: i });
    });
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'C' }));
    await Promise.all([other.nth(1), failed]);
    expect(down.received).toHaveLength(1);
    const waiting = await target.query(
      `select id, attempt, scheduled_at > now() + interval '4 minutes' as moved from "${bus.schema}".jobs
       where kind = 'webhook' and target = $1 and state in ('available', 'retryable') order by id`, [a.id]);
    // The one that failed waits its Retry-After; the four behind it were moved 5 minutes out.
    expect(waiting.map((j) => [j.attempt, j.moved])).toEqual([[1, true], [0, true], [0, true], [0, true], [0, true]]);

    healthy = true;
    const recovered = Promise.all([2, 3, 4, 5, 6].map((n) => down.nth(n)));
    // Its retry comes (made due here): it succeeds, the endpoint is enabled, and the other four come back now.
    await target.query(`update "${bus.schema}".jobs set scheduled_at = now() where id = $1`, [waiting[0].id]);
    await Promise.race([recovered, new Promise((_r, reject) => setTimeout(() => reject(new Error('the moved deliveries did not come back')), 10_000))]);
    expect(new Set(down.received.slice(1).map((r) => JSON.parse(r.body).data.orderNo))).toEqual(new Set(['P1', 'P2', 'P3', 'P4', 'P5']));
  });

  test("the success that ends a failing spell brings back only the deliveries the failing delay held, never one waiting for its Retry-After (injected clock)", async () => {
    // Before, it brought back every delivery of the endpoint due within failingDelayMs: A's retry,
    // which its receiver had asked to come in 120 s, went out at the next success of another one.
    const clock = new ManualClock(Date.UTC(2025, 6, 1, 9));
    const t0 = clock.now().getTime();
    const bus = await testBus(target, events, { ...local, clock });
    const r = await receiver((_q, res, n) => {
      if (JSON.parse(r.received[n - 1]!.body).data.orderNo === 'A') res.writeHead(429, { 'retry-after': '120' }).end();
      else res.end('ok');
    });
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const a = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'A' }));
    expect((await failed).retryAt!.getTime()).toBe(t0 + 120_000);
    expect((await bus.endpoints.get(ep.id))!.state).toBe('failing');

    // B and C are made while the endpoint fails: the failing delay holds them 5 minutes out.
    const fanned = bus.lifecycle.waitFor('relay:batch:fanned');
    const [b, c] = await bus.transaction(async (tx) => [
      await bus.record(tx, 'order.created', { orderNo: 'B' }), await bus.record(tx, 'order.created', { orderNo: 'C' }),
    ]);
    await fanned;
    for (const id of [b, c]) expect((await bus.jobs.forEvent(id))[0]!.scheduledAt.getTime()).toBe(t0 + 5 * 60_000);

    // B comes due (as by hand) and succeeds: the endpoint is enabled, C comes back now, A stays.
    const enabled = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'enabled');
    await target.query(`update "${bus.schema}".jobs set scheduled_at = $2 where event_id = $1`, [b, clock.now()]);
    await enabled;
    expect(JSON.parse((await r.nth(3)).body).data.orderNo).toBe('C');
    const [jobA] = await bus.jobs.forEvent(a);
    expect(jobA).toMatchObject({ state: 'retryable', attempt: 1 });
    expect(jobA!.scheduledAt.getTime()).toBe(t0 + 120_000);
    expect(r.received.map((x) => JSON.parse(x.body).data.orderNo)).toEqual(['A', 'B', 'C']);
  });

  test('an endpoint that answers slowly holds at most concurrencyPerEndpoint slots; the others are delivered meanwhile', async () => {
    // Before, a claim took deliveries in due order across endpoints: the slow endpoint's backlog,
    // due first, took every webhook slot (and prefetch filled the buffer with more of it), so the
    // other endpoint's deliveries waited until the slow requests ended.
    let released = false;
    let inFlight = 0;
    let maxInFlight = 0;
    const holding: (() => void)[] = [];
    const slow = await receiver((_q, res) => {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      res.on('finish', () => void inFlight--);
      if (released) res.end('ok');
      else holding.push(() => res.end('ok'));
    });
    const quick = await receiver();
    const bus = await testBus(target, events, { ...fast, webhooks: { allowPrivateNetworks: true, concurrency: 4, concurrencyPerEndpoint: 2 } });
    const s = await bus.endpoints.create({ url: slow.url, eventTypes: ['order.paid'] });
    const q = await bus.endpoints.create({ url: quick.url, eventTypes: ['order.created'] });
    const done = { [s.id]: counter(6), [q.id]: counter(3) };
    bus.lifecycle.on('job:completed', (e) => void (e.kind === 'webhook' && done[e.handler]?.tick()));
    await bus.start();
    await bus.transaction(async (tx) => {
      for (let i = 1; i <= 6; i++) await bus.record(tx, 'order.paid', { orderNo: `S${i}`, amount: i });
    });
    await slow.nth(2); // the slow endpoint's first two deliveries are out, and hang
    await bus.transaction(async (tx) => {
      for (let i = 1; i <= 3; i++) await bus.record(tx, 'order.created', { orderNo: `Q${i}` });
    });
    const deadline = (what: string) => new Promise<never>((_r, reject) => setTimeout(() => reject(new Error(what)), 10_000));
    await Promise.race([done[q.id]!.done, deadline('the quick endpoint was not delivered to while the slow one hung')]);
    expect(released).toBe(false);
    expect(quick.received).toHaveLength(3);
    expect([inFlight, maxInFlight, slow.received.length]).toEqual([2, 2, 2]);
    // The four beyond the cap wait in the queue as they were: not claimed, no attempt, not pushed later.
    const rows = await target.query(
      `select state, attempt, scheduled_at <= now() as due from "${bus.schema}".jobs where kind = 'webhook' and target = $1 order by id`, [s.id]);
    expect(rows.map((r) => [r.state, r.attempt, r.due])).toEqual([
      ['running', 1, true], ['running', 1, true],
      ['available', 0, true], ['available', 0, true], ['available', 0, true], ['available', 0, true],
    ]);

    released = true;
    for (const answer of holding.splice(0)) answer();
    await Promise.race([done[s.id]!.done, deadline('the slow endpoint\'s deliveries did not all go out once it answered')]);
    expect(slow.received).toHaveLength(6);
    expect(maxInFlight).toBe(2);
  });

  test('webhooks.concurrencyPerEndpoint must be a positive integer, named in the error', async () => {
    for (const bad of [0, 1.5, -1]) {
      expect(() => createBus({ database: target.database(), events, webhooks: { concurrencyPerEndpoint: bad } }))
        .toThrow(/invalid option createBus\.webhooks\.concurrencyPerEndpoint: /);
    }
  });

  test('rotateSecret refuses a grace period too long to store, by name', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    // Before, 1e20 ms reached PostgreSQL, which answered "interval out of range" (a raw DatabaseError).
    for (const graceMs of [1e20, 101 * 365 * DAY]) {
      const err = await bus.endpoints.rotateSecret(ep.id, { graceMs }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OptionsError);
      expect((err as OptionsError).message).toMatch(/endpoints\.rotateSecret\.graceMs: must be an integer from 0 to \d+ \(ms, 100 years\)/);
    }
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ secretHint: ep.secretHint });
    // 100 years is still a grace period rea stores and honours.
    const rotated = await bus.endpoints.rotateSecret(ep.id, { graceMs: 100 * 365 * DAY });
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('success');
    const seen = await r.nth(1);
    expect(seen.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(new Webhook(ep.secret).verify(seen.body, seen.headers)).toBeTruthy();
    expect(new Webhook(rotated.secret).verify(seen.body, seen.headers)).toBeTruthy();
  });

  test('rotateSecret within the grace period keeps the 3 newest previous secrets: the oldest stop verifying', async () => {
    // Before, every rotation within one grace period added one more secret that verified (and one
    // more signature on every request), with no bound: five rotations, six signatures.
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const secrets = [ep.secret];
    for (let i = 0; i < 5; i++) secrets.push((await bus.endpoints.rotateSecret(ep.id)).secret);
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('success');
    const seen = await r.nth(1);
    expect(seen.headers['webhook-signature']!.split(' ')).toHaveLength(1 + MAX_PREVIOUS_SECRETS);
    // The newest and the three before it verify; the first two (the original and the first rotation) no longer do.
    for (const s of secrets.slice(2)) expect(new Webhook(s).verify(seen.body, seen.headers)).toBeTruthy();
    for (const s of secrets.slice(0, 2)) expect(() => new Webhook(s).verify(seen.body, seen.headers)).toThrow();
  });

  test('a failure retries after attempt⁴ s ±10 % with the same webhook-id; the endpoint turns failing, then enabled on success', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver((_q, res, n) => res.writeHead(n === 1 ? 500 : 200).end(n === 1 ? 'db down' : 'ok'));
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const toFailing = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'failing');
    const completed = bus.lifecycle.waitFor('job:completed', undefined, 15_000);
    const toEnabled = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'enabled', 15_000);
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'F' }));
    const f = await failed;
    const failedAt = Date.now();
    expect(f.error).toBe('HTTP 500');
    const delay = f.retryAt!.getTime() - failedAt;
    expect(delay).toBeGreaterThan(900 - 200);
    expect(delay).toBeLessThanOrEqual(1100);
    expect((await toFailing).endpointId).toBe(ep.id);
    const failing = (await bus.endpoints.get(ep.id))!;
    expect(failing.state).toBe('failing');
    expect(failing.failingSince).toBeInstanceOf(Date);

    expect((await completed).attempt).toBe(2);
    await toEnabled;
    expect(r.received.map((x) => x.headers['webhook-id'])).toEqual([webhookIdFor(eventId, f.jobId), webhookIdFor(eventId, f.jobId)]);
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ state: 'enabled', failingSince: null });

    const attempts = await bus.endpoints.attempts(ep.id);
    expect(attempts.map((a) => [a.attempt, a.outcome, a.status, a.responseExcerpt])).toEqual([[2, 'success', 200, 'ok'], [1, 'failure', 500, 'db down']]);
    expect(attempts.every((a) => a.deliveryId === f.jobId && a.eventId === eventId && a.durationMs >= 0)).toBe(true);
    expect((await bus.events.attempts(eventId)).map((a) => a.id)).toEqual(attempts.map((a) => a.id));
  });

  test('the attempt log is newest first by number across a digit boundary, and paging loses none (and an event\'s jobs are oldest first)', async () => {
    const bus = await testBus(target, events, local);
    const s = `"${bus.schema}"`;
    const ep = await bus.endpoints.create({ url: 'http://127.0.0.1:9/hooks', eventTypes: ['order.created'] });
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D' }));
    // Twelve attempts, ids 1 … 12: sorted as text they came 9, 8, …, 2, 12, 11, 10, 1.
    await target.query(`insert into ${s}.webhook_attempts (endpoint_id, event_id, webhook_id, attempt, at, status, duration_ms, outcome)
      select $1::uuid, $2::uuid, 'msg_x', n, now(), 500, 1, 'failure' from generate_series(1, 12) n`, [ep.id, eventId]);
    const newestFirst = Array.from({ length: 12 }, (_, k) => 12 - k);

    expect((await bus.endpoints.attempts(ep.id)).map((a) => a.attempt)).toEqual(newestFirst);
    expect((await bus.events.attempts(eventId)).map((a) => a.attempt)).toEqual(newestFirst);

    const byEndpoint: number[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 5; page++) {
      const got = await bus.endpoints.attemptPage(ep.id, { limit: 5, ...(cursor ? { before: cursor } : {}) });
      byEndpoint.push(...got.items.map((a) => a.attempt));
      if (!got.nextCursor) break;
      cursor = got.nextCursor;
    }
    expect(byEndpoint).toEqual(newestFirst);

    const byEvent: number[] = [];
    let before: string | undefined;
    for (let page = 0; page < 5; page++) {
      const got = await bus.events.attempts(eventId, { limit: 5, ...(before ? { before } : {}) });
      byEvent.push(...got.map((a) => a.attempt));
      if (got.length < 5) break;
      before = got.at(-1)!.id;
    }
    expect(byEvent).toEqual(newestFirst);

    // jobs.forEvent had the same text sort: job 10 came before job 9.
    await target.query(`insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms)
      select $1::uuid, 'webhook', $2, 18, 30000 from generate_series(1, 12)`, [eventId, ep.id]);
    const jobIds = (await bus.jobs.forEvent(eventId)).map((j) => Number(j.id));
    expect(jobIds).toHaveLength(12);
    expect(jobIds).toEqual([...jobIds].sort((a, b) => a - b));
  });

  test('429 with Retry-After schedules the next attempt then, and says so in the job', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver((_q, res) => res.writeHead(429, { 'retry-after': '120' }).end());
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'T' }));
    const f = await failed;
    const delay = f.retryAt!.getTime() - Date.now();
    expect(delay).toBeGreaterThan(115_000);
    expect(delay).toBeLessThanOrEqual(120_000);
    const [job] = await bus.jobs.forEvent(eventId);
    expect(job!.state).toBe('retryable');
    expect(job!.scheduledAt.getTime()).toBe(f.retryAt!.getTime());
    expect(job!.errors[0]!.message).toBe('HTTP 429; Retry-After 120 s');
  });

  test('Retry-After can only delay a retry: 0, a past date or 1 s still wait the attempt⁴ schedule (injected clock)', async () => {
    const clock = new ManualClock(Date.UTC(2025, 5, 1, 8));
    const bus = await testBus(target, events, { ...local, clock });
    // Each throttled answer asks for less than the schedule; before, it was taken as the delay, so a
    // receiver always answering "429, Retry-After: 0" used up all 18 attempts in under a second.
    const answers = [
      { status: 429, retryAfter: () => '0' },
      { status: 503, retryAfter: () => new Date(clock.now().getTime() - 60_000).toUTCString() },
      { status: 429, retryAfter: () => '1' },
    ];
    const r = await receiver((_q, res, n) => {
      const a = answers[n - 1];
      if (a) res.writeHead(a.status, { 'retry-after': a.retryAfter() }).end();
      else res.end('ok');
    });
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const completed = bus.lifecycle.waitFor('job:completed', (e) => e.kind === 'webhook');
    // Attempt n waits n⁴ s ±10 %: 1 s, 16 s, 81 s.
    const windows = [[900, 1_100], [14_400, 17_600], [72_900, 89_100]] as const;
    let failed = bus.lifecycle.waitFor('job:failed');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'RA0' }));
    for (const [n, [low, high]] of windows.entries()) {
      const f = await failed;
      expect(f.attempt).toBe(n + 1);
      const delay = f.retryAt!.getTime() - clock.now().getTime();
      expect(delay, `attempt ${n + 1}`).toBeGreaterThanOrEqual(low);
      expect(delay, `attempt ${n + 1}`).toBeLessThanOrEqual(high);
      expect(r.received).toHaveLength(n + 1); // nothing sent before the clock reaches the retry
      // The fourth attempt succeeds: no failure to wait for after the third.
      if (n < windows.length - 1) failed = bus.lifecycle.waitFor('job:failed');
      clock.advance(delay);
    }
    expect((await completed).attempt).toBe(4);
    const [job] = await bus.jobs.forEvent(eventId);
    expect(job!.errors.map((e) => e.message)).toEqual(['HTTP 429; Retry-After 0 s', 'HTTP 503; Retry-After 0 s', 'HTTP 429; Retry-After 1 s']);
  });

  test('a retried delivery gets webhooks.maxAttempts more attempts on the attempt⁴ schedule from its start, however often it is retried (injected clock)', async () => {
    const clock = new ManualClock(Date.UTC(2025, 5, 1, 8));
    const bus = await testBus(target, events, { ...local, clock, webhooks: { allowPrivateNetworks: true, maxAttempts: 2 } });
    const r = await receiver((_q, res) => res.writeHead(500).end('still down'));
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    // Attempt 1 of an allowance waits 1 s ±10 %, attempt 2 of 2 is the last.
    const runAllowance = async (first: number, max: number) => {
      const failed = bus.lifecycle.waitFor('job:failed', (e) => e.attempt === first);
      const discarded = bus.lifecycle.waitFor('job:discarded', (e) => e.attempt === first + 1);
      const f = await failed;
      const delay = f.retryAt!.getTime() - clock.now().getTime();
      expect(delay, `attempt ${first} of ${max}`).toBeGreaterThanOrEqual(900);
      expect(delay, `attempt ${first} of ${max}`).toBeLessThanOrEqual(1_100);
      clock.advance(delay);
      return discarded;
    };
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'RT' }));
    const first = await runAllowance(1, 2);
    // Before, the retried job's next wait was attempt⁴ of its running count (3⁴ s = 81 s, then 5⁴ s…,
    // 19⁴ s = 36 h with the default 18), and each retry doubled the allowance (2, 4, 8…).
    for (const [from, max] of [[3, 4], [5, 6]] as const) {
      expect(await bus.jobs.retry([first.jobId])).toEqual([first.jobId]);
      await runAllowance(from, max);
      const [job] = await bus.jobs.forEvent(eventId);
      expect(job).toMatchObject({ state: 'discarded', attempt: max, maxAttempts: max });
    }
    expect(r.received).toHaveLength(6);
  });

  test('410 Gone disables the endpoint at once, discards the delivery, and fan-out skips it afterwards', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver((_q, res) => res.writeHead(410).end('unsubscribed'));
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const disabled = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'disabled');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'G' }));
    expect((await discarded).attempt).toBe(1);
    expect(await disabled).toMatchObject({ endpointId: ep.id, reason: 'the endpoint answered 410 Gone' });
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ state: 'disabled', disabledReason: 'the endpoint answered 410 Gone' });
    expect((await bus.endpoints.list({ state: 'disabled' })).map((e) => e.id)).toEqual([ep.id]);
    const alert = (await bus.overview()).alerts.find((a) => a.name === 'endpoint_disabled');
    expect(alert).toMatchObject({ figure: 1, threshold: 0, unit: 'endpoints', estimated: false });
    expect(alert!.since).toBeInstanceOf(Date);
    expect(alert!.message).toMatch(/^1 disabled webhook endpoint \(nothing is enqueued for them\)/);

    const fanned = bus.lifecycle.waitFor('relay:batch:fanned');
    const later = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'G', amount: 1 }));
    expect((await fanned).jobs).toBe(0);
    expect(await bus.jobs.forEvent(later)).toEqual([]);
  });

  test('disabled endpoints get no new jobs, queued ones are discarded, and enable() brings deliveries back', async () => {
    const bus = await testBus(target, events, { ...local, worker: { enabled: false } });
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const queued = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'Q' }));
    await bus.relayOnce();
    expect(await bus.jobs.forEvent(queued)).toHaveLength(1);
    const off = await bus.endpoints.disable(ep.id, { reason: 'maintenance window' });
    expect(off).toMatchObject({ state: 'disabled', disabledReason: 'maintenance window' });
    expect(off.disabledAt).toBeInstanceOf(Date);
    // Disabling it again keeps the first time and reason, and is no state change.
    const changes: unknown[] = [];
    bus.lifecycle.on('endpoint:state', (e) => void changes.push(e));
    const again = await bus.endpoints.disable(ep.id, { reason: 'second thoughts' });
    expect(again).toMatchObject({ state: 'disabled', disabledReason: 'maintenance window', disabledAt: off.disabledAt, updatedAt: off.updatedAt });
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ disabledReason: 'maintenance window', disabledAt: off.disabledAt });
    expect(changes).toEqual([]);
    await expect(bus.endpoints.disable('00000000-0000-7000-8000-000000000000')).rejects.toBeInstanceOf(NotFoundError);
    const skipped = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'Q2' }));
    await bus.relayOnce();
    expect(await bus.jobs.forEvent(skipped)).toEqual([]);
    await expect(bus.events.replay(skipped, { endpointId: ep.id })).rejects.toThrow(/is disabled; enable it/);

    const on = await bus.endpoints.enable(ep.id);
    expect(on).toMatchObject({ state: 'enabled', disabledAt: null, disabledReason: null, failingSince: null });
    const back = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'Q3' }));
    await bus.relayOnce();
    expect(await bus.jobs.forEvent(back)).toHaveLength(1);
  });

  test('enable() on an endpoint already enabled changes nothing and emits no endpoint:state; a real change still does', async () => {
    // Before, every enable() emitted endpoint:state 'enabled' and rewrote updatedAt, so a listener
    // (an audit trail, a dashboard) saw a state change that never happened.
    const bus = await testBus(target, events, { ...local, worker: { enabled: false } });
    const ep = await bus.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['order.created'] });
    const changes: { endpointId: string; state: string }[] = [];
    bus.lifecycle.on('endpoint:state', (e) => void changes.push({ endpointId: e.endpointId, state: e.state }));
    const same = await bus.endpoints.enable(ep.id);
    expect(same).toMatchObject({ state: 'enabled', updatedAt: ep.updatedAt });
    expect(changes).toEqual([]);

    // Failing (as a failed attempt leaves it) to enabled is a change: it clears failing_since and says so.
    await target.query(`update "${bus.schema}".endpoints set state = 'failing', failing_since = now() where id = $1`, [ep.id]);
    expect(await bus.endpoints.enable(ep.id)).toMatchObject({ state: 'enabled', failingSince: null });
    await bus.endpoints.disable(ep.id);
    expect(await bus.endpoints.enable(ep.id)).toMatchObject({ state: 'enabled', disabledAt: null, disabledReason: null });
    expect(await bus.endpoints.enable(ep.id)).toMatchObject({ state: 'enabled' });
    expect(changes).toEqual([
      { endpointId: ep.id, state: 'enabled' }, { endpointId: ep.id, state: 'disabled' }, { endpointId: ep.id, state: 'enabled' },
    ]);
    await expect(bus.endpoints.enable('00000000-0000-7000-8000-000000000000')).rejects.toBeInstanceOf(NotFoundError);
  });

  test('a job queued before its endpoint was disabled is discarded without a request', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D' }));
    await bus.relayOnce();
    await bus.endpoints.disable(ep.id);
    const discarded = bus.lifecycle.waitFor('job:discarded');
    await bus.start();
    expect((await discarded).error).toBe(`endpoint ${ep.id} is disabled`);
    expect(r.received).toHaveLength(0);
    expect(await bus.events.attempts(eventId)).toEqual([]);
  });

  test('a job queued before its endpoint stopped subscribing to the type is discarded without a request', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    const [created, paid] = await bus.transaction((tx) => bus.recordMany(tx, [
      { type: 'order.created' as const, payload: { orderNo: 'N' } },
      { type: 'order.paid' as const, payload: { orderNo: 'N', amount: 1 } },
    ]));
    await bus.relayOnce();
    // The receiver must not get order.created any more; before, its queued delivery still went out.
    await bus.endpoints.update(ep.id, { eventTypes: ['order.paid'] });
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const completed = bus.lifecycle.waitFor('job:completed', (e) => e.kind === 'webhook');
    await bus.start();
    expect(await discarded).toMatchObject({ eventId: created, error: `endpoint ${ep.id} no longer subscribes to 'order.created'` });
    expect((await completed).eventId).toBe(paid);
    expect(r.received.map((x) => JSON.parse(x.body).type)).toEqual(['order.paid']);
    expect(await bus.events.attempts(created!)).toEqual([]);
  });

  test('while an endpoint is failing, its new deliveries are scheduled 5 minutes out', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver((_q, res) => res.writeHead(500).end());
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    await bus.start();
    const failing = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'failing');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'W' }));
    await failing;
    const fanned = bus.lifecycle.waitFor('relay:batch:fanned');
    const before = Date.now();
    const next = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'W', amount: 2 }));
    await fanned;
    const [job] = await bus.jobs.forEvent(next);
    expect(job).toMatchObject({ target: ep.id, state: 'available', attempt: 0 });
    const wait = job!.scheduledAt.getTime() - before;
    expect(wait).toBeGreaterThan(5 * 60_000 - 2000);
    expect(wait).toBeLessThan(5 * 60_000 + 5000);
  });

  test('one message the receiver refuses leaves its endpoint enabled while others succeed; failing once no success in failingDelayMs (injected clock)', async () => {
    // Before, every failure of X (400 to it, 200 to all others) turned the endpoint failing and
    // held every other delivery 5 minutes out, again at each of X's retries.
    const clock = new ManualClock(Date.UTC(2025, 6, 2, 9));
    const t0 = clock.now().getTime();
    const bus = await testBus(target, events, { ...local, clock });
    const r = await refusingX(400);
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const states: string[] = [];
    bus.lifecycle.on('endpoint:state', (e) => states.push(e.state));
    await bus.start();
    const send = (orderNo: string) => deliverOne(bus, orderNo);
    await send('G1');
    const x = await send('X');
    expect((await bus.endpoints.get(ep.id))!.state).toBe('enabled');
    const g2 = await send('G2');
    expect((await bus.jobs.forEvent(g2))[0]).toMatchObject({ state: 'completed' });
    expect((await bus.jobs.forEvent(g2))[0]!.scheduledAt.getTime()).toBe(t0); // not held 5 minutes out
    expect(states).toEqual([]);

    // No success for longer than failingDelayMs: X's next failure turns the endpoint failing.
    const failing = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'failing');
    const retried = bus.lifecycle.waitFor('job:failed', (e) => e.eventId === x);
    clock.advance(6 * 60_000);
    expect((await failing).endpointId).toBe(ep.id);
    expect((await retried).attempt).toBe(2);
    expect((await bus.endpoints.get(ep.id))!.failingSince!.getTime()).toBe(t0 + 6 * 60_000);
  });

  test('get and list show when a delivery last succeeded (lastSuccessAt), noted to within a tenth of failingDelayMs; a failing endpoint keeps it (injected clock)', async () => {
    const clock = new ManualClock(Date.UTC(2025, 6, 3, 9));
    const t0 = clock.now().getTime();
    const bus = await testBus(target, events, { ...local, clock });
    const r = await refusingX(500);
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    expect(ep.lastSuccessAt).toBeNull();
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ lastSuccessAt: null });
    await bus.start();
    const send = (orderNo: string) => deliverOne(bus, orderNo);
    const lastSuccess = async () => (await bus.endpoints.get(ep.id))!.lastSuccessAt?.getTime() ?? null;

    await send('A');
    expect(await lastSuccess()).toBe(t0);
    // Within a tenth of failingDelayMs (30 s of 5 min) a success is not noted again: no row write per delivery.
    clock.advance(20_000);
    await send('B');
    expect(await lastSuccess()).toBe(t0);
    clock.advance(15_000);
    await send('C');
    expect(await lastSuccess()).toBe(t0 + 35_000);
    // A test delivery says nothing about the endpoint, its last success included.
    clock.advance(60_000);
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('success');
    expect(await lastSuccess()).toBe(t0 + 35_000);

    // Failing: the time of its last success is what its owner asks first.
    clock.advance(6 * 60_000);
    const failing = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'failing');
    await send('X');
    await failing;
    const [listed] = await bus.endpoints.list({ state: 'failing' });
    expect(listed).toMatchObject({ id: ep.id, state: 'failing', lastSuccessAt: new Date(t0 + 35_000) });
  });

  test('a failure without an answer turns an endpoint failing at once, even right after a success', async () => {
    // A timeout or a dropped connection costs a slot per delivery: the failing delay must start at once.
    const r = await receiver((_q, res, n) => (n === 1 ? res.end('ok') : res.socket!.destroy()));
    const bus = await testBus(target, events, local);
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed', (e) => e.kind === 'webhook');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'G' }));
    await done;
    const failing = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'failing');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'D' }));
    expect((await failing).endpointId).toBe(ep.id);
    const [last] = await bus.endpoints.attempts(ep.id);
    expect(last).toMatchObject({ outcome: 'failure', status: null });
  });

  test("a gateway's 502 or 504, or a 503 without Retry-After, is no answer: failing at once, even right after a success; a 503 with Retry-After, like a 500, is the receiver's", async () => {
    // A proxy's 502/504 says the receiver behind it did not answer: before, it counted as the
    // receiver's own answer, and the endpoint stayed enabled for failingDelayMs after its last success.
    const bus = await testBus(target, events, local);
    const answers = [
      { status: 502, failing: true }, { status: 504, failing: true }, { status: 503, failing: true },
      { status: 503, retryAfter: '120', failing: false }, { status: 500, failing: false },
    ];
    const eps = await Promise.all(answers.map(async (a) => {
      const r = await receiver((_q, res, n) => (n === 1 ? res.end('ok') : res.writeHead(a.status, a.retryAfter ? { 'retry-after': a.retryAfter } : {}).end('gateway')));
      return (await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] })).id;
    }));
    await bus.start();
    const send = async (orderNo: string) => {
      const all = counter(eps.length);
      const off = bus.lifecycle.on('webhook:attempt', (e) => { if (e.attempt === 1) all.tick(); });
      await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo }));
      await all.done;
      off();
    };
    await send('G');
    await send('D');
    const states = await Promise.all(eps.map(async (id) => (await bus.endpoints.get(id))!.state));
    expect(states).toEqual(answers.map((a) => (a.failing ? 'failing' : 'enabled')));
    const last = await Promise.all(eps.map(async (id) => (await bus.endpoints.attempts(id, { limit: 1 }))[0]!));
    // The attempt log keeps the status the gateway sent; only the endpoint's state reads it as no answer.
    expect(last.map((a) => [a.status, a.outcome])).toEqual([[502, 'failure'], [504, 'failure'], [503, 'failure'], [503, 'throttled'], [500, 'failure']]);
  });

  test('an endpoint failing for 5 days is disabled by the health pass, with its reason (injected clock)', async () => {
    const clock = new ManualClock(Date.UTC(2025, 2, 1, 12));
    const bus = await testBus(target, events, { ...local, clock, webhooks: { allowPrivateNetworks: true, healthIntervalMs: 1000 } });
    const r = await receiver((_q, res) => res.writeHead(502).end());
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const failing = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'failing');
    await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'H' }));
    await failing;
    expect((await bus.endpoints.get(ep.id))!.failingSince!.getTime()).toBe(clock.now().getTime());

    // A pass run by hand just before the 5 days are up leaves it alone.
    const health = new EndpointHealth(bus.driver, { intervalMs: 60_000, disableAfterMs: 5 * DAY, batchSize: 10 }, { clock, lifecycle: bus.lifecycle });
    clock.advance(5 * DAY - 60_000);
    expect(await health.runOnce()).toEqual({ disabled: [] });
    expect((await bus.endpoints.get(ep.id))!.state).toBe('failing');

    // The leader's own pass (every second here, the shortest interval it takes) disables it once they are.
    const disabled = bus.lifecycle.waitFor('endpoint:state', (e) => e.state === 'disabled');
    clock.advance(120_000);
    expect((await disabled).endpointId).toBe(ep.id);
    const row = (await bus.endpoints.get(ep.id))!;
    expect(row).toMatchObject({ state: 'disabled', disabledReason: 'no successful delivery for 5 days; re-enable it once the receiver works' });
    expect(row.disabledAt!.getTime()).toBe(clock.now().getTime());
    // A person disabling it afterwards does not hide why it stopped.
    clock.advance(60_000);
    expect(await bus.endpoints.disable(ep.id, { reason: 'turned off by hand' })).toMatchObject({ disabledReason: row.disabledReason, disabledAt: row.disabledAt });
  });

  test('an endpoint that hangs is cut at the timeout; its lease outlives the cut, so no rescue sends it twice', async () => {
    const bus = await testBus(target, events, {
      ...local, worker: { maxPollMs: 20, leaseMarginMs: 100 }, rescuer: { intervalMs: 20 },
      webhooks: { allowPrivateNetworks: true, timeoutMs: 400 },
    });
    const r = await receiver(() => {}); // never answers
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    let rescued = 0;
    bus.lifecycle.on('jobs:rescued', (e) => (rescued += e.rescued));
    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const started = Date.now();
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'slow' }));
    const f = await failed;
    expect(Date.now() - started).toBeGreaterThanOrEqual(390);
    expect(f.error).toBe('timed out after 400 ms');
    expect(r.received).toHaveLength(1);
    expect(rescued).toBe(0);
    const lease = (await target.query(`select lease_ms from "${bus.schema}".jobs where event_id = $1`, [eventId]))[0].lease_ms;
    expect(lease).toBeGreaterThan(400 + 2000);
    const [attempt] = await bus.events.attempts(eventId);
    expect(attempt).toMatchObject({ outcome: 'failure', status: null, error: 'timed out after 400 ms' });
  });

  test('a delivery is leased for the HTTP timeout of the worker sending it, not that of the process that fanned it out', async () => {
    const schema = freshSchema();
    const common = { database: target.database(), schema, events, rescuer: { intervalMs: 50 } } as const;
    // v2 fans out (relay only) with a 100 ms HTTP timeout; v1 delivers with 5 s.
    const v1 = createBus({ ...common, relay: { enabled: false }, worker: { maxPollMs: 20, leaseMarginMs: 200 },
      webhooks: { allowPrivateNetworks: true, timeoutMs: 5000 } });
    const v2 = createBus({ ...common, relay: { maxPollMs: 20 }, worker: { enabled: false, leaseMarginMs: 200 },
      webhooks: { allowPrivateNetworks: true, timeoutMs: 100 } });
    onTestFinished(async () => {
      await v1.stop({ timeoutMs: 2000 });
      await v2.stop();
      await target.query(`drop schema if exists "${schema}" cascade`);
    });
    await v1.migrate();
    const release = deferred();
    const r = await receiver((_q, res) => void release.promise.then(() => res.end('ok')));
    await v1.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await v1.start();
    await v2.start();
    const completed = v1.lifecycle.waitFor('job:completed', (e) => e.kind === 'webhook');

    const eventId = await v1.transaction((tx) => v1.record(tx, 'order.created', { orderNo: 'slow-v2' }));
    await r.nth(1);
    const [row] = await target.query(
      `select attempted_at, lease_ms, extract(epoch from lease_expires_at - attempted_at) * 1000 as leased_for
       from "${schema}".jobs where event_id = $1`, [eventId]);
    expect(Number(row.leased_for)).toBe(5000 + 2000 + 200);
    expect(row.lease_ms).toBe(5000 + 2000 + 200);
    // The rescuer's statement past the lease v2 would have given (100 + 2000 + 200 ms), mid-request.
    const later = new Date(row.attempted_at.getTime() + 3000);
    expect(await v1.driver.executor.jobRescue({ limit: 10, now: later })).toEqual({ rescued: 0, discarded: 0 });
    release.resolve();
    expect((await completed).attempt).toBe(1);
    expect(r.received).toHaveLength(1);
  });

  test('endpoints that never answer leave in-process handlers room: webhooks take half the worker slots by default', async () => {
    // DEFAULTS.webhooks spread in: its concurrency is 'auto', half the worker's slots.
    const bus = await testBus(target, events, { ...local, worker: { maxPollMs: 20, concurrency: 4 }, webhooks: { ...DEFAULTS.webhooks, allowPrivateNetworks: true, timeoutMs: 5_000 } });
    const r = await receiver(() => {}); // never answers
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    let handledAt = 0;
    bus.on('user.signed_up', 'welcome', async () => void (handledAt = Date.now()));
    await bus.start();
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: 8 }, (_, i) => ({ type: 'order.created' as const, payload: { orderNo: `HANG-${i}` } }))));
    await r.nth(2); // the webhook slots (2 of 4) are taken, the other six deliveries wait their turn
    const completed = bus.lifecycle.waitFor('job:completed', (e) => e.kind !== 'webhook', 10_000);
    const recordedAt = Date.now();
    await bus.transaction((tx) => bus.record(tx, 'user.signed_up', { email: 'a@example.com' }));
    await completed;
    // Before, deliveries could take all 4 slots, and the handler waited for one to time out (5 s).
    expect(handledAt - recordedAt).toBeLessThan(2_000);
    expect(r.received.length).toBe(2);
  });

  test('a huge response is cut at 64 KiB: the delivery succeeds and the receiver sees the connection dropped', async () => {
    const bus = await testBus(target, events, local);
    let finished: boolean | undefined;
    let onClose!: () => void;
    const closed = new Promise<void>((resolve) => (onClose = resolve));
    const r = await receiver((_q, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      let sent = 0;
      const pump = () => {
        while (sent < 10 * 1024 * 1024 && !res.destroyed) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        if (!res.destroyed) res.end();
      };
      res.on('close', () => {
        finished = res.writableFinished;
        onClose();
      });
      pump();
    });
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const completed = bus.lifecycle.waitFor('job:completed');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'big' }));
    await completed;
    await closed;
    expect(finished).toBe(false); // 10 MiB offered, the connection dropped long before
    const [attempt] = await bus.events.attempts(eventId);
    expect(attempt!.outcome).toBe('success');
    expect(attempt!.responseExcerpt).toBe('x'.repeat(1024));
  });

  test('SSRF: literal refused URLs are typed errors at create; a name resolving to a private address fails for good without a request', async () => {
    const lines: string[] = [];
    const bus = await testBus(target, events, {
      ...fast, logger: capturingLogger(lines),
      webhooks: { resolve: async () => [{ address: '10.1.2.3', family: 4 }] },
    });
    for (const url of ['http://127.0.0.1/hook', 'http://2130706433/', 'http://0x7f.1/', 'http://[::ffff:127.0.0.1]/', 'http://169.254.169.254/latest', 'http://localhost:8080/', 'ftp://example.com/', 'http://user:pw@example.com/']) {
      await expect(bus.endpoints.create({ url, eventTypes: ['order.created'] }), url).rejects.toBeInstanceOf(WebhookUrlRefusedError);
    }
    expect(await bus.endpoints.list()).toEqual([]);

    const ep = await bus.endpoints.create({ url: 'http://hooks.example.test/in', eventTypes: ['order.created'] });
    await bus.start();
    const discarded = bus.lifecycle.waitFor('job:discarded');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'S' }));
    const d = await discarded;
    expect(d.attempt).toBe(1);
    expect(d.error).toMatch(/refused.*private address 10\.1\.2\.3/);
    const [attempt] = await bus.events.attempts(eventId);
    expect(attempt).toMatchObject({ outcome: 'refused', status: null, endpointId: ep.id });
    expect((await bus.endpoints.get(ep.id))!.state).toBe('failing');
    expect(lines.join('\n')).not.toContain(ep.secret.slice(6, 30));
  });

  test('resend and replay are new deliveries with a new webhook-id and the same event id', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    await bus.start();
    const completed = bus.lifecycle.waitFor('job:completed');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'RS' }));
    const first = await completed;

    const resent = await bus.deliveries.resend(first.jobId);
    expect(resent).toMatchObject({ eventId, endpointId: ep.id });
    expect(resent.deliveryId).not.toBe(first.jobId);
    const second = await r.nth(2);
    expect(second.headers['webhook-id']).toBe(resent.webhookId);

    const replayed = await bus.events.replay(eventId, { endpointId: ep.id });
    const third = await r.nth(3);
    expect(third.headers['webhook-id']).toBe(replayed.webhookId);
    const ids = r.received.map((x) => x.headers['webhook-id']);
    expect(new Set(ids).size).toBe(3);
    expect(r.received.map((x) => (JSON.parse(x.body) as { id: string }).id)).toEqual([eventId, eventId, eventId]);

    const other = await bus.endpoints.create({ url: r.url, eventTypes: ['user.*'] });
    await expect(bus.events.replay(eventId, { endpointId: other.id })).rejects.toThrow(/does not subscribe to 'order.created'/);
    await expect(bus.deliveries.resend('999999999')).rejects.toBeInstanceOf(NotFoundError);
    await expect(bus.events.replay('0190a4b2-0000-7000-8000-000000000000', { endpointId: ep.id })).rejects.toBeInstanceOf(NotFoundError);
  });

  test('resend, like replay, refuses an endpoint that no longer subscribes to the event type', async () => {
    const bus = await testBus(target, events, { ...local, worker: { enabled: false } });
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'NARROW' }));
    await bus.relayOnce();
    const [delivery] = await bus.jobs.forEvent(eventId);
    await bus.endpoints.update(ep.id, { eventTypes: ['user.*'] });
    // Before, resend skipped the check replay makes and queued the event for the endpoint anyway.
    const refused = await bus.deliveries.resend(delivery!.id).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OptionsError);
    expect(refused).toMatchObject({ field: 'deliveries.resend(deliveryId)' });
    expect((refused as Error).message).toBe(`invalid option deliveries.resend(deliveryId): endpoint ${ep.id} does not subscribe to 'order.created' (it takes user.*)`);
    await expect(bus.events.replay(eventId, { endpointId: ep.id })).rejects.toThrow(
      `invalid option events.replay.endpointId: endpoint ${ep.id} does not subscribe to 'order.created' (it takes user.*)`);
    expect((await bus.jobs.forEvent(eventId)).map((j) => j.id)).toEqual([delivery!.id]);
    // Subscribed again, it resends.
    await bus.endpoints.update(ep.id, { eventTypes: ['order.created'] });
    expect(await bus.deliveries.resend(delivery!.id)).toMatchObject({ eventId, endpointId: ep.id });
  });

  test('attempt log retention deletes attempts older than 7 days, in batches (injected clock)', async () => {
    const clock = new ManualClock(Date.UTC(2025, 5, 1));
    const bus = await testBus(target, events, { ...local, clock });
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.start();
    const done = new Promise<void>((resolve) => {
      let n = 0;
      bus.lifecycle.on('job:completed', () => ++n === 3 && resolve());
    });
    await bus.transaction((tx) => bus.recordMany(tx, ['a', 'b', 'c'].map((o) => ({ type: 'order.created' as const, payload: { orderNo: o } }))));
    await done;
    expect(await bus.endpoints.attempts(ep.id)).toHaveLength(3);
    let leading = false;
    const retention = new AttemptRetention(bus.driver, { intervalMs: 60_000, olderThanMs: 7 * DAY, batchSize: 2, pauseMs: 0 }, { clock, lifecycle: bus.lifecycle, keepGoing: () => leading });
    clock.advance(7 * DAY - 1000);
    expect(await retention.runOnce()).toEqual({ deleted: 0 });
    clock.advance(2000);
    // A process that no longer leads (or stops) ends its pass after the batch at hand.
    expect(await retention.runOnce()).toEqual({ deleted: 2 });
    leading = true;
    expect(await retention.runOnce()).toEqual({ deleted: 1 });
    expect(await bus.endpoints.attempts(ep.id)).toEqual([]);
  });

  test('endpoint input errors are typed and name the field; secrets never appear in logs, errors or job history', async () => {
    const lines: string[] = [];
    const bus = await testBus(target, events, { ...local, logger: capturingLogger(lines) });
    const r = await receiver((_q, res) => res.writeHead(500).end('nope'));
    await expect(bus.endpoints.create({ url: r.url, eventTypes: [] })).rejects.toThrow(OptionsError);
    await expect(bus.endpoints.create({ url: r.url, eventTypes: ['ordr.*'] })).rejects.toBeInstanceOf(UnknownEventTypeError);
    await expect(bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], secret: 'whsec_c2hvcnQ=' })).rejects.toThrow(/invalid webhook secret: decodes to \d+ bytes/);
    await expect(bus.endpoints.update('not-an-id', { description: 'x' })).rejects.toBeInstanceOf(NotFoundError);
    // Text PostgreSQL cannot store is refused by name (before, the database refused it: a 500 in the API).
    await expect(bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], description: 'a\u0000b' })).rejects.toThrow(/invalid option endpoints\.create\.description: must not contain a NUL character/);
    const given = `whsec_${Buffer.alloc(24, 7).toString('base64')}`;
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], secret: given });
    expect(ep.secret).toBe(given);
    const updated = await bus.endpoints.update(ep.id, { description: 'renamed', eventTypes: ['order.created'] });
    expect(updated).toMatchObject({ description: 'renamed', eventTypes: ['order.created'] });
    await expect(bus.endpoints.disable(ep.id, { reason: 'x\uD800' })).rejects.toThrow(/endpoints\.disable\.reason: must not contain/);

    await bus.start();
    const failed = bus.lifecycle.waitFor('job:failed');
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'X' }));
    await failed;
    const everything = JSON.stringify([lines, await bus.jobs.forEvent(eventId), await bus.events.attempts(eventId), await bus.endpoints.list()]);
    expect(everything).not.toContain(given.slice(6));
    // Deleting it cancels its waiting delivery (the failed one, retryable), which would otherwise be
    // discarded when it came up and raise jobs_discarded for a deliberate act.
    expect(await bus.endpoints.delete(ep.id)).toEqual({ cancelled: 1 });
    expect(await bus.endpoints.get(ep.id)).toBeNull();
    const [job] = await bus.jobs.forEvent(eventId);
    expect(job).toMatchObject({ kind: 'webhook', state: 'cancelled' });
    expect(job!.errors.at(-1)).toMatchObject({ name: 'EndpointDeleted', message: 'cancelled: its endpoint was deleted' });
    expect((await bus.overview()).alerts.map((a) => a.name)).not.toContain('jobs_discarded');
    expect(await bus.endpoints.delete(ep.id)).toBeNull();
  });

  test('create and rotateSecret take a bare base64 secret, as verifyPayload and the Standard Webhooks libraries do: stored as whsec_ + it, verifying in either form; a short or non-base64 one is refused by name, never shown', async () => {
    const lines: string[] = [];
    const bus = await testBus(target, events, { ...local, logger: capturingLogger(lines) });
    const r = await receiver();
    const bare = randomBytes(32).toString('base64'); // padded
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], secret: bare });
    expect(ep.secret).toBe(`whsec_${bare}`);
    const prefixed = await bus.endpoints.create({ url: r.url, eventTypes: ['user.signed_up'], secret: `whsec_${bare}` });
    expect(prefixed.secretHint).toBe(ep.secretHint);
    // One normal form: the bare secret is stored exactly as the prefixed one is.
    const stored = await target.query(`select secrets -> 0 ->> 'secret' as secret from "${bus.schema}".endpoints order by id`);
    expect(stored.map((row) => row.secret)).toEqual([`whsec_${bare}`, `whsec_${bare}`]);

    await bus.start();
    const eventId = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'S' }));
    const got = await r.nth(1);
    for (const secret of [bare, `whsec_${bare}`]) {
      expect(new Webhook(secret).verify(got.body, got.headers)).toMatchObject({ id: eventId });
      expect(verifyPayload({ headers: got.headers, body: got.body, secrets: [secret] })).toBe(true);
    }

    const bare2 = randomBytes(24).toString('base64'); // 32 characters, no padding
    const rotated = await bus.endpoints.rotateSecret(ep.id, { secret: bare2 });
    expect(rotated.secret).toBe(`whsec_${bare2}`);
    expect(rotated.secretHint).toBe(bare2.slice(-4));
    expect((await bus.endpoints.test(ep.id)).outcome).toBe('success');
    const seen = await r.nth(2);
    expect(seen.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(verifyPayload({ headers: seen.headers, body: seen.body, secrets: [bare2] })).toBe(true);
    expect(verifyPayload({ headers: seen.headers, body: seen.body, secrets: [bare] })).toBe(true);

    // Still refused, with the typed error naming the problem and never the secret.
    const short = randomBytes(16).toString('base64');
    const notBase64 = `${randomBytes(32).toString('base64url')}!`;
    const refusals = [
      [() => bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], secret: short }), short, /^invalid webhook secret: decodes to 16 bytes; at least 24 are required$/],
      [() => bus.endpoints.create({ url: r.url, eventTypes: ['order.*'], secret: notBase64 }), notBase64, /^invalid webhook secret: must be 'whsec_' and standard base64, or the base64 alone$/],
      [() => bus.endpoints.rotateSecret(ep.id, { secret: short }), short, /decodes to 16 bytes/],
      [() => bus.endpoints.rotateSecret(ep.id, { secret: `whsec_${notBase64}` }), notBase64, /^invalid webhook secret: the part after 'whsec_' must be standard base64$/],
    ] as const;
    for (const [call, secret, message] of refusals) {
      const err = await call().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WebhookSecretError);
      expect(err).toMatchObject({ code: 'ERR_WEBHOOK_SECRET', message: expect.stringMatching(message) });
      expect(`${String(err)} ${JSON.stringify(err)} ${(err as Error).stack}`).not.toContain(secret);
    }
    expect((await bus.endpoints.get(ep.id))!.secretHint).toBe(rotated.secretHint); // no refused rotation took
    expect(await bus.endpoints.list()).toHaveLength(2);

    const everything = JSON.stringify([lines, await bus.jobs.forEvent(eventId), await bus.events.attempts(eventId), await bus.endpoints.list()]);
    for (const secret of [bare, bare2]) expect(everything).not.toContain(secret.replace(/=+$/, '').slice(0, -4));
  });

  // A misspelt key was dropped: update resolved, bumped updatedAt and changed nothing; create stored no description.
  test('endpoints: a key a call does not take, or an update that changes nothing, is an OptionsError naming it', async () => {
    const bus = await testBus(target, events, local);
    const url = 'http://127.0.0.1:9/hook';
    await expect(bus.endpoints.create({ url, eventTypes: ['order.*'], descripton: 'x' } as never)).rejects
      .toThrow('invalid option endpoints.create(input): unknown option(s) descripton (known: url, eventTypes, description, secret)');
    expect(await bus.endpoints.list()).toEqual([]);
    const ep = await bus.endpoints.create({ url, eventTypes: ['order.*'] });
    const typo = await bus.endpoints.update(ep.id, { eventType: ['order.paid'] } as never).catch((e: unknown) => e);
    expect(typo).toBeInstanceOf(OptionsError);
    expect(typo).toMatchObject({ field: 'endpoints.update(changes)', message: 'invalid option endpoints.update(changes): unknown option(s) eventType (known: url, eventTypes, description)' });
    await expect(bus.endpoints.update(ep.id, {})).rejects.toThrow('invalid option endpoints.update(changes): give at least one of url, eventTypes, description');
    await expect(bus.endpoints.update(ep.id, { description: undefined })).rejects.toThrow(/give at least one of url, eventTypes, description/);
    const { secret: _secret, ...row } = ep;
    expect(await bus.endpoints.get(ep.id)).toEqual(row); // updatedAt included
    // The other option objects of bus.endpoints likewise: a misspelt graceMS kept the old secret signing a day.
    await expect(bus.endpoints.rotateSecret(ep.id, { graceMS: 0 } as never)).rejects.toThrow(/endpoints\.rotateSecret\(options\): unknown option\(s\) graceMS/);
    await expect(bus.endpoints.disable(ep.id, { reasn: 'x' } as never)).rejects.toThrow(/unknown option\(s\) reasn/);
    await expect(bus.endpoints.list({ stat: 'disabled' } as never)).rejects.toThrow(/endpoints\.list\(filter\): unknown option\(s\) stat/);
    await expect(bus.endpoints.attempts(ep.id, { limt: 5 } as never)).rejects.toThrow(/unknown option\(s\) limt/);
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ state: 'enabled', secretHint: ep.secretHint });
  });

  test('a delivery cut short by bus.stop() is logged and retried, but does not count against the endpoint', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver((_q, res) => setTimeout(() => res.end('ok'), 3000).unref());
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    await bus.start();
    const id = await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'STOP-1' }));
    await r.nth(1);
    await bus.stop({ timeoutMs: 100 });
    const [row] = await target.query(`select state, failing_since from "${bus.schema}".endpoints where id = $1`, [ep.id]);
    expect(row).toEqual({ state: 'enabled', failing_since: null });
    const attempts = await target.query(`select outcome, error from "${bus.schema}".webhook_attempts where endpoint_id = $1`, [ep.id]);
    expect(attempts).toEqual([{ outcome: 'failure', error: 'aborted before the endpoint answered' }]);
    const [job] = await target.query(`select state, attempt from "${bus.schema}".jobs where event_id = $1 and kind = 'webhook'`, [id]);
    expect(job).toEqual({ state: 'retryable', attempt: 0 });
  });

  // Needs a second session to hold the lock: PostgreSQL only.
  it.skipIf(!target.available || target.name !== 'postgres')('bus.stop() is not held by an attempt-log write stuck on a lock (the delivery is retried later)', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    await bus.endpoints.create({ url: r.url, eventTypes: ['order.*'] });
    const pg = (await import('pg')).default;
    const locker = new pg.Client({ connectionString: (target.database() as { postgres: string }).postgres });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query(`lock table "${bus.schema}".webhook_attempts in access exclusive mode`);
      await bus.start();
      await bus.transaction((tx) => bus.record(tx, 'order.created', { orderNo: 'LOCK-1' }));
      await r.nth(1);
      const t0 = Date.now();
      await bus.stop({ timeoutMs: 200 });
      // The stop timeout, a second's grace for the delivery's attempt-log write, a second for the
      // maintenance pass stuck on the same lock (attempt-log retention), then at most
      // CLOSE_WAIT_MS for the connections stuck on it; before, stop() waited for the lock.
      expect(Date.now() - t0).toBeLessThan(200 + 1_000 + 1_000 + CLOSE_WAIT_MS + 1_500);
    } finally {
      await locker.query('rollback').catch(() => {});
      // The statements the stop left waiting on the lock now run and end. Until they have, the
      // schema's cleanup (drop … cascade) could deadlock with them: wait for them first.
      const busy = `select count(*)::int as n from pg_stat_activity
                    where pid <> pg_backend_pid() and state <> 'idle' and query like '%"${bus.schema}".%'`;
      const deadline = Date.now() + 10_000;
      while ((await locker.query(busy)).rows[0].n > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await locker.end();
    }
  });

  test('endpoints.test sends one signed test delivery, logs it, and leaves the state alone', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver((_q, res) => res.writeHead(503).end('down'));
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const result = await bus.endpoints.test(ep.id);
    expect(result).toMatchObject({ outcome: 'failure', status: 503, responseExcerpt: 'down', error: 'HTTP 503' });
    const got = await r.nth(1);
    expect(new Webhook(ep.secret).verify(got.body, got.headers)).toMatchObject({ type: 'rea.endpoint.test' });
    expect(got.headers['webhook-id']).toBe(result.webhookId);
    expect((await bus.endpoints.get(ep.id))!.state).toBe('enabled');
    expect((await bus.endpoints.attempts(ep.id)).map((a) => [a.deliveryId, a.outcome])).toEqual([[null, 'failure']]);
  });

  test('endpoints.test sends to a disabled endpoint too (its owner tries the fixed receiver before enable); a 2xx leaves it disabled', async () => {
    const bus = await testBus(target, events, local);
    const r = await receiver();
    const ep = await bus.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    await bus.endpoints.disable(ep.id, { reason: 'receiver answered 410' });
    expect(await bus.endpoints.test(ep.id)).toMatchObject({ outcome: 'success', status: 200 });
    expect(r.received).toHaveLength(1);
    expect(await bus.endpoints.get(ep.id)).toMatchObject({ state: 'disabled', disabledReason: 'receiver answered 410' });
  });
});

describe('webhook options', () => {
  it('a bad allowlist entry is an OptionsError naming the field', async () => {
    const { createBus } = await import('../src/index.js');
    expect(() => createBus({ database: { pglite: 'memory://' }, events, webhooks: { allowlist: ['10.0.0.0/99'] } })).toThrow(/createBus\.webhooks\.allowlist\[0\]/);
    expect(() => createBus({ database: { pglite: 'memory://' }, events, webhooks: { timeoutMs: -1 } as never })).toThrow(/webhooks\.timeoutMs/);
  });
});
