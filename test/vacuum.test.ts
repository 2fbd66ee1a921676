// Dead rows stay bounded even where autovacuum does not run: the leader vacuums rea's tables
// itself when the server's autovacuum is off (or on PGlite, which has no background workers).
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents, type Bus } from '../src/index.js';
import { describeTargets, testBus } from './helpers/db.js';

const events = defineEvents({ 'row.changed': z.object({ n: z.number() }) });

/** Start the bus and count vacuum passes for `ms` after it became leader (its first vacuum comes one interval after the election). */
async function passesAfterElection(bus: Bus<any>, ms: number): Promise<number> {
  let passes = 0;
  bus.lifecycle.on('tables:vacuumed', () => passes++);
  await bus.start();
  await bus.lifecycle.waitFor('leader:elected');
  await new Promise((r) => setTimeout(r, ms));
  return passes;
}

describeTargets('vacuum on $name', (target) => {
  it.skipIf(!target.available)("mode 'auto' vacuums rea's tables exactly when nothing else will", async () => {
    const bus = await testBus(target, events, { vacuum: { mode: 'auto', intervalMs: 1000 }, leader: { ttlMs: 1000, renewMs: 50 } });
    const autovacuumRuns = target.name === 'postgres'
      && (await target.query<{ on: boolean }>(`select current_setting('autovacuum') = 'on' as on`))[0]!.on;
    bus.on('row.changed', 'h', () => {});
    if (autovacuumRuns) {
      // With the daemon on, rea leaves vacuuming to it: no pass past the first interval (1 s, the shortest).
      expect(await passesAfterElection(bus, 1300)).toBe(0);
      return;
    }
    const vacuumed = bus.lifecycle.waitFor('tables:vacuumed', () => true, 10_000);
    await bus.start();
    // endpoints (a state change is never a HOT update), events_archive and admin_sessions_ended
    // (deleted rows' space is reused only once VACUUM has recorded it) grew without bound too;
    // handlers and leader, updated HOT, stay one page by pruning alone.
    const all = ['jobs', 'events', 'consumes', 'webhook_attempts', 'endpoints', 'events_archive', 'admin_sessions_ended'];
    expect((await vacuumed).tables).toEqual(all);
    if (target.name === 'postgres') {
      const rows = await target.query(`select relname from pg_stat_user_tables where schemaname = $1 and last_vacuum is not null order by relname`, [bus.schema]);
      expect(rows.map((r: { relname: string }) => r.relname)).toEqual([...all].sort());
    }
  });

  it.skipIf(!target.available)("mode 'never' never vacuums; mode 'always' does even with autovacuum on", async () => {
    const never = await testBus(target, events, { vacuum: { mode: 'never', intervalMs: 1000 }, leader: { ttlMs: 1000, renewMs: 50 } });
    expect(await passesAfterElection(never, 1300)).toBe(0);
    await never.stop();

    const always = await testBus(target, events, { vacuum: { mode: 'always', intervalMs: 1000 }, leader: { ttlMs: 1000, renewMs: 50 } });
    const vacuumed = always.lifecycle.waitFor('tables:vacuumed', () => true, 10_000);
    await always.start();
    expect((await vacuumed).tables).toContain('jobs');
  });
});
