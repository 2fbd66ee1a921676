// Lifecycle signals are for observers: a listener that throws, or returns a promise that
// rejects, must not change what rea does or make a committed transaction look failed.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { describeTargets, testBus } from './helpers/db.js';
import { captureLogger } from './helpers/log.js';

const events = defineEvents({ 'order.paid': z.object({ orderNo: z.string() }) });

describeTargets('lifecycle listeners on $name', (target) => {
  it.skipIf(!target.available)('a listener that throws on transaction:committed: the transaction still resolves with its event, which is delivered; the throw is logged', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines) });
    const handled: string[] = [];
    bus.on('order.paid', 'warehouse', async (e) => void handled.push(e.payload.orderNo));
    bus.lifecycle.on('transaction:committed', () => {
      throw new Error('metrics exporter broke');
    });
    await bus.start();
    const completed = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'A1' }));
    expect(typeof id).toBe('string');
    await completed;
    expect(handled).toEqual(['A1']);
    const thrown = lines.filter((l) => l.signal === 'transaction:committed');
    expect(thrown).toHaveLength(1);
    expect(thrown[0]).toMatchObject({ level: 'error', err: 'metrics exporter broke' });
  });

  it.skipIf(!target.available)('listeners that throw or reject on leader:elected and job:completed change nothing: still leader, each job completed once', async () => {
    const lines: Record<string, unknown>[] = [];
    const bus = await testBus(target, events, { logger: captureLogger(lines), leader: { ttlMs: 1000, renewMs: 100 } });
    let lost = 0;
    bus.lifecycle.on('leader:lost', () => void lost++);
    bus.lifecycle.on('leader:elected', async () => {
      throw new Error('async listener failed');
    });
    const completions: string[] = [];
    bus.lifecycle.on('job:completed', (j) => {
      completions.push(j.jobId);
      throw new Error('sync listener failed');
    });
    bus.on('order.paid', 'warehouse', async () => {});
    const elected = bus.lifecycle.waitFor('leader:elected');
    await bus.start();
    await elected;
    for (const orderNo of ['A1', 'A2', 'A3']) await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo }));
    await expect.poll(() => completions.length, { timeout: 10_000 }).toBe(3);
    await new Promise((r) => setTimeout(r, 500)); // several lease renewals
    expect(lost).toBe(0);
    expect(bus.isLeader).toBe(true);
    expect(new Set(completions).size).toBe(3);
    const jobs = await bus.jobs.list({ state: 'completed' });
    expect(jobs.items).toHaveLength(3);
    expect(lines.filter((l) => l.signal === 'leader:elected')).toMatchObject([{ level: 'error', err: 'async listener failed' }]);
    expect(lines.filter((l) => l.signal === 'job:completed')).toHaveLength(3);
  });
});

describeTargets('worker:error on $name', (target) => {
  it.skipIf(!target.available)('a batched completion write that fails is told as worker:error, and the completion is written once the database takes it', async () => {
    const bus = await testBus(target, events);
    const s = `"${bus.schema}"`;
    // Completions are refused until the test drops the trigger: the job stays running meanwhile.
    await target.query(`
      create function ${s}.refuse_completion() returns trigger language plpgsql as $$
      begin
        if new.state = 'completed' then raise exception 'completions refused by the test'; end if;
        return new;
      end $$;
      create trigger refuse_completion before update on ${s}.jobs for each row execute function ${s}.refuse_completion();`);
    bus.on('order.paid', 'warehouse', async () => {});
    const reported = bus.lifecycle.waitFor('worker:error', (e) => e.error.message.includes('completions refused by the test'));
    await bus.start();
    await bus.transaction((tx) => bus.record(tx, 'order.paid', { orderNo: 'W1' }));
    const { error } = await reported;
    expect(error).toBeInstanceOf(Error);
    const running = await target.query(`select state from ${s}.jobs`);
    expect(running).toEqual([{ state: 'running' }]);
    const completed = bus.lifecycle.waitFor('job:completed');
    await target.query(`drop trigger refuse_completion on ${s}.jobs`);
    await completed;
    expect(await target.query(`select state from ${s}.jobs`)).toEqual([{ state: 'completed' }]);
  });
});
