// The leader's lease, seen from the process holding it: leading ends when the lease does, even
// while a renewal is still on its way, so two processes never run maintenance at once.
import { expect, it } from 'vitest';
import { z } from 'zod';
import { createBus, defineEvents, OptionsError } from '../src/index.js';
import { describeTargets, freshSchema, postgresTarget, testBus } from './helpers/db.js';
import { counter, deferred } from './helpers/signals.js';

const events = defineEvents({ 'job.requested': z.object({ n: z.number() }) });
const target = postgresTarget;
const test = it.skipIf(!target.available);

test('a leader whose renewal waits for a pool connection past its TTL stops leading before another process takes over', async () => {
  const schema = freshSchema();
  const leader = { ttlMs: 600, renewMs: 100 };
  // Two connections, both held by transactional handlers: the renewal waits for one of them.
  const a = await testBus(target, events, { schema, instanceId: 'a', database: { postgres: (target.database() as { postgres: string }).postgres, poolSize: 2 }, leader });
  const gate = deferred();
  const holding = counter(2);
  a.on('job.requested', 'holds-a-connection', async () => {
    holding.tick();
    await gate.promise;
  }, { transactional: true, timeoutMs: 20_000 });
  const aElected = a.lifecycle.waitFor('leader:elected');
  await a.start();
  await aElected;
  // Everything a logs about leading, with the time it learnt it.
  const aLost = a.lifecycle.waitFor('leader:lost', () => true, 10_000);
  await a.transaction((tx) => a.recordMany(tx, [{ type: 'job.requested', payload: { n: 1 } }, { type: 'job.requested', payload: { n: 2 } }]));
  await holding.done;

  const b = createBus({ database: target.database(), schema, events, instanceId: 'b', leader });
  try {
    const bElected = b.lifecycle.waitFor('leader:elected', () => true, 10_000);
    await b.start();
    await bElected;
    // b holds the lease now, so a's lease has expired: a must not still believe it leads.
    expect(b.isLeader).toBe(true);
    expect(a.isLeader).toBe(false);
    await aLost;
  } finally {
    gate.resolve();
    await b.stop();
  }
});

it('a renewal interval longer than half the lease is refused, naming both options', () => {
  const make = (leader: { ttlMs?: number; renewMs?: number }) => () => createBus({ database: { postgres: 'postgres://nobody@127.0.0.1:1/none' }, events, leader });
  // Renewed every second, a 300 ms lease held only 300 ms of each second: another process took it.
  expect(make({ ttlMs: 300, renewMs: 1000 })).toThrow(new OptionsError('createBus.leader.renewMs', '1000 must be at most half of leader.ttlMs (300), or the lease lapses between renewals; about a third suits'));
  expect(make({ ttlMs: 1000, renewMs: 501 })).toThrow(OptionsError);
  // A shorter lease alone still renews at the default 5 s: said so.
  expect(make({ ttlMs: 3000 })).toThrow('invalid option createBus.leader.renewMs: 5000 (the default) must be at most half of leader.ttlMs (3000)');
  expect(make({ renewMs: 10_000 })).toThrow('10000 must be at most half of leader.ttlMs (15000, the default)');
  expect(make({ ttlMs: 1000, renewMs: 500 })).not.toThrow();
  expect(make({})).not.toThrow();
});

it('a lease and a heartbeat of a few ms are refused: every tick is a write', () => {
  // They took 1 ms: a renewal (and an election attempt by every other process) or a heartbeat
  // write about every ms, some 700 transactions a second from one idle process; a 20 ms lease
  // lapsed between renewals on an idle machine, and each new leader ran the maintenance passes anew.
  const make = (options: object) => () => createBus({ database: { postgres: 'postgres://nobody@127.0.0.1:1/none' }, events, ...options });
  expect(make({ leader: { ttlMs: 2, renewMs: 1 } })).toThrow(new OptionsError('createBus.leader.ttlMs', 'at least 100 ms: a shorter lease lapses between renewals, and every new leader starts the maintenance passes over'));
  expect(make({ leader: { ttlMs: 60_000, renewMs: 10 } })).toThrow(new OptionsError('createBus.leader.renewMs', 'at least 50 ms: the leader writes its lease, and every other process tries to take it, this often; ttlMs, not this, sets how soon another process takes over'));
  expect(make({ worker: { heartbeatMs: 1 } })).toThrow(new OptionsError('createBus.worker.heartbeatMs', "at least 50 ms: each beat writes the handlers' rows, and handler_unattended (15 min by default) needs one far less often"));
  // The shortest, which the tests use.
  expect(make({ leader: { ttlMs: 100, renewMs: 50 }, worker: { heartbeatMs: 50 } })).not.toThrow();
});

describeTargets('one lease holder on $name', (t) => {
  it.skipIf(!t.available)('two buses given the same instanceId (say, the host name, with several processes per host) do not both lead', async () => {
    const schema = freshSchema();
    const leader = { ttlMs: 60_000, renewMs: 50 };
    const a = await testBus(t, events, { schema, instanceId: 'host-1', leader });
    const b = await testBus(t, events, { schema, instanceId: 'host-1', leader });
    const aElected = a.lifecycle.waitFor('leader:elected');
    await a.start();
    await aElected;
    let bRenewals = 0;
    const elect = b.driver.executor.leaderAttemptElect.bind(b.driver.executor);
    b.driver.executor.leaderAttemptElect = async (p) => {
      const won = await elect(p);
      bRenewals++;
      return won;
    };
    await b.start();
    await expect.poll(() => bRenewals, { timeout: 5000 }).toBeGreaterThanOrEqual(3);
    expect([a.isLeader, b.isLeader]).toEqual([true, false]);
    const rows = await t.query<{ leader_id: string }>(`select leader_id from "${schema}".leader`);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.leader_id).toMatch(/^host-1#[0-9a-f]+$/);
    // The lease names the bus, not only its instanceId: a's stop gives back a's lease, and b then leads.
    const bElected = b.lifecycle.waitFor('leader:elected', () => true, 5000);
    await a.stop();
    await bElected;
  });
});
