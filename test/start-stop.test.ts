// bus.stop() called while bus.start() is still on its way (a SIGTERM during start-up, a test or
// server shutting down before start resolved): the start finishes, then everything it started
// is stopped; nothing keeps running on a closed pool or keeps the process alive.
import { expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents, OptionsError } from '../src/index.js';
import { FIRST_CLAIM_WAIT_MS, RESERVATION_HOLD_MS } from '../src/worker/worker.js';
import { describeTargets, freshSchema, testBus } from './helpers/db.js';

const events = defineEvents({ 'order.paid': z.object({ orderNo: z.string() }) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeTargets('start and stop on $name', (target) => {
  it.skipIf(!target.available)('stop() while start() opens its LISTEN connection: start resolves, then nothing runs and no connection stays', async () => {
    const bus = await testBus(target, events, { leader: { ttlMs: 1000, renewMs: 50 }, relay: { minPollMs: 5, maxPollMs: 20 } });
    bus.on('order.paid', 'warehouse', async () => {});
    // Every statement rea runs from here on, counted by the executor's methods.
    const calls: string[] = [];
    const executor = bus.driver.executor as unknown as Record<string, unknown>;
    for (const name of Object.getOwnPropertyNames(Object.getPrototypeOf(executor))) {
      if (name === 'constructor' || typeof executor[name] !== 'function') continue;
      const original = executor[name] as (...a: unknown[]) => unknown;
      executor[name] = function (this: unknown, ...a: unknown[]) {
        calls.push(name);
        return original.apply(this, a);
      };
    }
    let stopped: Promise<void> | undefined;
    const listen = bus.driver.listen.bind(bus.driver);
    vi.spyOn(bus.driver, 'listen').mockImplementation(async (channel, onNotify) => {
      stopped = bus.stop(); // as a SIGTERM handler would, while the start waits here
      return listen(channel, onNotify);
    });
    const started = bus.start();
    await expect(started).resolves.toBeUndefined();
    expect(stopped).toBeDefined();
    await stopped;
    await expect(bus.stop()).resolves.toBeUndefined(); // a later stop() waits for the same one
    const atStop = calls.length;
    await sleep(300); // many poll intervals and lease renewals
    expect(calls.slice(atStop)).toEqual([]);
    expect(bus.isLeader).toBe(false);
    if (target.name === 'postgres') {
      const listening = await target.query(`select count(*)::int as n from pg_stat_activity where query = $1`, [`LISTEN "rea_${bus.schema}"`]);
      expect(listening[0].n).toBe(0);
    }
    await expect(bus.start()).rejects.toThrow('a stopped bus cannot be started again');
  });

  it.skipIf(!target.available)('stop() right after an unawaited start(): both resolve, and the bus is stopped', async () => {
    const bus = await testBus(target, events);
    bus.on('order.paid', 'warehouse', async () => {});
    const started = bus.start();
    const stopped = bus.stop();
    await expect(started).resolves.toBeUndefined();
    await expect(stopped).resolves.toBeUndefined();
    await expect(bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'A1' }))).rejects.toThrow('the bus has been stopped');
  });

  it.skipIf(!target.available)('stop({ timeoutMs }) past what a timer holds is refused, not taken as 1 ms: a running handler is not aborted', async () => {
    const bus = await testBus(target, events, { relay: { minPollMs: 1, maxPollMs: 20 }, worker: { minPollMs: 1, maxPollMs: 20 } });
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    let finish!: () => void;
    const finished = new Promise<void>((resolve) => (finish = resolve));
    let aborted = false;
    bus.on('order.paid', 'warehouse', async (_event, ctx) => {
      ctx.signal.addEventListener('abort', () => (aborted = true));
      started();
      await finished;
    });
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'A1' }));
    await running;
    // "Wait as long as it takes": Node ran these timers after 1 ms, and the stop aborted the handler.
    for (const timeoutMs of [Number.POSITIVE_INFINITY, 3_000_000_000, Number.NaN, -1, 1.5, '5000']) {
      const err = await bus.stop({ timeoutMs: timeoutMs as number }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OptionsError);
      expect((err as OptionsError).field).toBe('stop.timeoutMs');
    }
    // A misspelt timeoutMs was the default 10 s, not what was meant.
    const misspelt = await bus.stop({ timeoutMS: 0 } as never).catch((e: unknown) => e);
    expect(misspelt).toMatchObject({ code: 'ERR_OPTIONS', field: 'stop(options)' });
    expect((misspelt as Error).message).toContain('unknown option(s) timeoutMS (known: timeoutMs)');
    await sleep(50); // a timer Node shortened to 1 ms would have fired
    expect(aborted).toBe(false);
    // The bus still runs, and a valid stop waits for the handler.
    let stopResolved = false;
    const stopped = bus.stop({ timeoutMs: 2_147_483_647 }).then(() => (stopResolved = true));
    await sleep(50);
    expect(stopResolved).toBe(false);
    expect(aborted).toBe(false);
    finish();
    await stopped;
    expect(aborted).toBe(false);
  });

  it.skipIf(!target.available)('the worker\'s first claim is sent once the relay\'s first round has ended, not beside it', async () => {
    const bus = await testBus(target, events);
    bus.on('order.paid', 'warehouse', async () => {});
    const calls: string[] = [];
    const executor = bus.driver.executor as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    for (const name of ['eventFanOut', 'eventClaimable', 'jobClaim']) {
      const original = executor[name]!.bind(executor);
      executor[name] = async (...a: unknown[]) => {
        calls.push(`${name} sent`);
        try {
          return await original(...a);
        } finally {
          calls.push(`${name} answered`);
        }
      };
    }
    await bus.start();
    await vi.waitFor(() => expect(calls).toContain('jobClaim sent'));
    const firstRoundEnded = calls.findIndex((c) => c === 'eventFanOut answered' || c === 'eventClaimable answered');
    expect(firstRoundEnded).toBeGreaterThanOrEqual(0);
    expect(firstRoundEnded).toBeLessThan(calls.indexOf('jobClaim sent'));
  });

  /** A schema with one job in the queue, fanned by a bus that only relays. */
  async function schemaWithQueuedJob(): Promise<string> {
    const schema = freshSchema();
    const fanner = await testBus(target, events, { schema, worker: { enabled: false } });
    fanner.on('order.paid', 'warehouse', async () => {});
    await fanner.start();
    await fanner.transaction((tx) => fanner.record(tx, 'order.paid', { orderNo: 'A1' }));
    await vi.waitFor(async () => expect((await target.query(`select count(*)::int as n from "${schema}".jobs`))[0].n).toBe(1));
    await fanner.stop();
    return schema;
  }

  /** Starts `bus` with the executor's `stuck` statements waiting (a lock held elsewhere) until the test ends; resolves with how long until its handler ran. */
  async function msUntilHandled(bus: Awaited<ReturnType<typeof testBus<typeof events.schemas>>>, stuck: string[]): Promise<number> {
    let ran!: () => void;
    const done = new Promise<void>((resolve) => (ran = resolve));
    bus.on('order.paid', 'warehouse', async () => ran());
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    onTestFinished(() => open());
    const executor = bus.driver.executor as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    for (const name of stuck) {
      const original = executor[name]!.bind(executor);
      executor[name] = async (...a: unknown[]) => {
        await gate;
        return original(...a);
      };
    }
    const t0 = performance.now();
    await bus.start();
    await done;
    return performance.now() - t0;
  }

  // On a server: PGlite's one connection is the stuck round's.
  it.skipIf(!target.available || target.name !== 'postgres')('a relay round stuck at start holds the first claim back FIRST_CLAIM_WAIT_MS at most: a queued job still runs', async () => {
    // Inline delivery: a round waiting for its statement holds none of the worker's room (a
    // hand-off round does, for RESERVATION_HOLD_MS at most: the next test).
    const bus = await testBus(target, events, { schema: await schemaWithQueuedJob(), relay: { inlineMs: 50 } });
    // Not before the cap (the round never ended), and not held for good.
    expect(await msUntilHandled(bus, ['eventFanOut', 'eventClaimable'])).toBeGreaterThanOrEqual(FIRST_CLAIM_WAIT_MS - 20);
  });

  it.skipIf(!target.available || target.name !== 'postgres')('a hand-off round stuck on a lock gives the room it reserved back after RESERVATION_HOLD_MS: a queued job still runs', async () => {
    // rea's defaults: no inline delivery, so each relay round reserves the worker's room for the
    // jobs it would hand off before its statement, which waits.
    const bus = await testBus(target, events, { schema: await schemaWithQueuedJob() });
    expect(await msUntilHandled(bus, ['eventFanOut'])).toBeGreaterThanOrEqual(RESERVATION_HOLD_MS - 20);
  });

  it.skipIf(!target.available || target.name !== 'postgres')('a start whose schema check fails closes the LISTEN connection it opened beside the check', async () => {
    const schema = freshSchema(); // never migrated
    const bus = createBus({ database: target.database(), schema, events });
    onTestFinished(() => bus.stop());
    bus.on('order.paid', 'warehouse', async () => {});
    await expect(bus.start()).rejects.toThrow(schema);
    await sleep(300); // a LISTEN left open would be connected and listening by now
    const listening = await target.query(`select count(*)::int as n from pg_stat_activity where query = $1`, [`LISTEN "rea_${schema}"`]);
    expect(listening[0].n).toBe(0);
  });
});
