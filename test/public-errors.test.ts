// The failures rea itself gives a job's attempt are exported by 'rea', and they are the very
// classes rea throws: the worker receives instances of them, and a job's error history stores
// them under the exported class's name.
import { expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents, HandlerTransactionEndedError, LeaseLostError, MissingEventError } from '../src/index.js';
import { Worker } from '../src/worker/worker.js';
import { describeTargets, freshSchema, quickBackoff, testBus } from './helpers/db.js';

const events = defineEvents({ 'audit.logged': z.object({ note: z.string() }) });

/** What the worker's failure path receives (the thrown value, before it is reduced to a stored name and message). */
function failuresSeenByWorker(): () => unknown[] {
  const fail = vi.spyOn(Worker.prototype as unknown as { fail(job: unknown, channel: unknown, err: unknown, log: unknown): void }, 'fail');
  onTestFinished(() => fail.mockRestore());
  return () => fail.mock.calls.map((c) => c[2]);
}

describeTargets('errors rea gives a job\'s attempt, on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('a transactional handler that rolls back ctx.tx itself: HandlerTransactionEndedError', async () => {
    const seen = failuresSeenByWorker();
    const bus = await testBus(target, events);
    bus.on('audit.logged', 'self-rollback', async (_e, ctx) => {
      if (ctx.attempt === 1) await (ctx.tx!.raw as { query(sql: string): Promise<unknown> }).query('rollback');
    }, { transactional: true, backoff: quickBackoff });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    const id = await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await done).attempt).toBe(2);
    expect(seen()).toHaveLength(1);
    expect(seen()[0]).toBeInstanceOf(HandlerTransactionEndedError);
    const [job] = await bus.jobs.forEvent(id);
    expect(job!.errors.map((e) => e.name)).toEqual([HandlerTransactionEndedError.name]);
  });

  test('a job whose event retention deleted before it ran: MissingEventError, and the job is discarded', async () => {
    const seen = failuresSeenByWorker();
    const schema = freshSchema();
    // One process fans the event out and runs no worker; then the event goes; then a worker runs the job.
    const relay = await testBus(target, events, { schema, worker: { enabled: false } });
    relay.on('audit.logged', 'late', () => {});
    await relay.start();
    const fanned = relay.lifecycle.waitFor('relay:batch:fanned');
    const id = await relay.transaction((tx) => relay.record(tx, 'audit.logged', { note: 'n' }));
    await fanned;
    await relay.stop();
    await target.query(`delete from "${schema}".events where id = $1`, [id]);

    const worker = await testBus(target, events, { schema, relay: { enabled: false } });
    let called = false;
    worker.on('audit.logged', 'late', () => { called = true; });
    const discarded = worker.lifecycle.waitFor('job:discarded');
    await worker.start();
    await discarded;
    expect(called).toBe(false);
    expect(seen()).toHaveLength(1);
    expect(seen()[0]).toBeInstanceOf(MissingEventError);
    const [job] = await worker.jobs.forEvent(id);
    expect(job).toMatchObject({ state: 'discarded', attempt: 1 });
    expect(job!.errors.map((e) => e.name)).toEqual([MissingEventError.name]);
  });

  // PGlite's one connection is held by the handler's transaction: the rescue cannot come from beside it there.
  it.skipIf(!target.available || target.name !== 'postgres')('a transactional handler whose job was rescued while it ran: LeaseLostError', async () => {
    const seen = failuresSeenByWorker();
    const bus = await testBus(target, events);
    const s = bus.schema;
    bus.on('audit.logged', 'slow-writer', async (_e, ctx) => {
      // What the rescuer does to a job whose lease expired, from another connection.
      if (ctx.attempt === 1) await target.query(`update "${s}".jobs set state = 'retryable', lease_expires_at = null where id = $1`, [ctx.jobId]);
    }, { transactional: true, backoff: quickBackoff });
    await bus.start();
    const done = bus.lifecycle.waitFor('job:completed');
    await bus.transaction((tx) => bus.record(tx, 'audit.logged', { note: 'n' }));
    expect((await done).attempt).toBe(2);
    expect(seen()).toHaveLength(1);
    expect(seen()[0]).toBeInstanceOf(LeaseLostError);
  });
});
