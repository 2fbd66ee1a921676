// bus.stop() called while bus.start() is still on its way (a SIGTERM during start-up, a test or
// server shutting down before start resolved): the start finishes, then everything it started
// is stopped; nothing keeps running on a closed pool or keeps the process alive.
import { expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents, OptionsError } from '../src/index.js';
import { describeTargets, testBus } from './helpers/db.js';

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
});
