// Query plans that must not depend on how fresh the statistics are. A queue table's statistics
// lag behind it: analyzed while few jobs ran, it may hold thousands of running jobs by the time
// a worker finishes its batch. These tests make that state and read the plan PostgreSQL picks.
import pg from 'pg';
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { CLAIM_LOOKAHEAD, CLAIM_WALK, CLAIM_WALK_ROUNDS, postgresStatements } from '../src/drivers/postgres/sql.js';
import { PostgresExecutor } from '../src/drivers/postgres/executor.js';
import { postgresAdminStatements } from '../src/drivers/postgres/sql-admin.js';
import { postgresOperationsStatements } from '../src/drivers/postgres/sql-operations.js';
import { webhookStatements } from '../src/drivers/postgres/sql-webhooks.js';
import { describeTargets, PG_URL, testBus, type Target } from './helpers/db.js';

const events = defineEvents({ 'order.placed': z.object({ n: z.number() }) });

/**
 * A day of finished jobs (too many to read them all for a batch of 200), analyzed, then jobs 1 to
 * 2,000 set to `state` again: the statistics say almost no job is in that state.
 */
async function staleQueue(target: Target, s: string, state: 'running' | 'available'): Promise<void> {
  await target.query(`insert into ${s}.jobs (event_id, kind, target, state, attempt, max_attempts, lease_ms, finalized_at)
    select gen_random_uuid(), 'handler', 'mailer', 'completed', 1, 5, 30000, now() from generate_series(1, 30000)`);
  await target.query(`analyze ${s}.jobs`);
  const lease = state === 'running' ? `now() + interval '30 seconds'` : 'null';
  await target.query(`update ${s}.jobs set state = '${state}', finalized_at = null, lease_expires_at = ${lease} where id <= 2000`);
}

async function planOf(target: Target, text: string, params: unknown[]): Promise<string> {
  const [row] = await target.query<{ 'QUERY PLAN': unknown }>(`explain (format json) ${text}`, params);
  return JSON.stringify(row!['QUERY PLAN']);
}

/**
 * fn on one session of its own, in a transaction rolled back at the end (target.query may send
 * each statement on another pooled connection). PGlite has one session: its own query.
 */
async function rolledBack<T>(target: Target, fn: (query: Target['query']) => Promise<T>): Promise<T> {
  const client = target.name === 'postgres' ? new pg.Client(PG_URL) : null;
  const query: Target['query'] = client
    ? async (sql, params) => (await client.query(sql, params as unknown[])).rows
    : target.query;
  await client?.connect();
  try {
    await query('begin');
    try {
      return await fn(query);
    } finally {
      await query('rollback');
    }
  } finally {
    await client?.end();
  }
}

/** EXPLAIN (ANALYZE, BUFFERS) of one run of `text`: the plan's root node. */
async function analyzed(query: Target['query'], text: string, params?: unknown[]): Promise<any> {
  const [row] = await query<{ 'QUERY PLAN': any }>(`explain (analyze, buffers, format json) ${text}`, params);
  return (typeof row!['QUERY PLAN'] === 'string' ? JSON.parse(row!['QUERY PLAN']) : row!['QUERY PLAN'])[0].Plan;
}

/** The plan's reads of the jobs table (not its writes): whether each was by target, and its buffers. */
function jobReads(node: any): { byTarget: boolean; buffers: number }[] {
  const here = node['Relation Name'] === 'jobs' && node['Node Type'] !== 'ModifyTable'
    ? [{ byTarget: String(node['Index Cond'] ?? '').includes('target ='), buffers: node['Shared Hit Blocks'] + node['Shared Read Blocks'] }]
    : [];
  return [...here, ...(node.Plans ?? []).flatMap(jobReads)];
}

/**
 * EXPLAIN (ANALYZE, BUFFERS) of one run of `text` under its generic plan, as a prepared statement
 * that has run often enough is (the plan cache's choice, or force_generic_plan): the parameters'
 * types, and their values as SQL literals (ROUND_PARAMS). Inside the caller's transaction.
 */
async function genericRun(query: Target['query'], text: string, [types, literals]: readonly [string, string]): Promise<any> {
  await query('set local plan_cache_mode = force_generic_plan');
  await query(`prepare generic_run (${types}) as ${text}`);
  try {
    return await analyzed(query, `execute generic_run (${literals})`);
  } finally {
    await query('deallocate generic_run');
  }
}

/**
 * The fan-out rounds' parameters for genericRun, as types and SQL literals, keyed by statement:
 * 200 events, handler `mailer` (room 200, lease 35 s, inline where the round has inline targets),
 * hand-off room 18, lease 30 s, idle limit 10 s.
 */
const HAND_OFF_LITERALS = `200, null, 18, 30000, 300000, 'w1', '{mailer}', '{200}', 200, '{35000}'`;
const ROUND_PARAMS = {
  eventFanOut: ['int, timestamptz, int, int, int', '200, null, 18, 30000, 300000'],
  eventFanOutHandOff: ['int, timestamptz, int, int, int, text, text[], int[], int, int[]', HAND_OFF_LITERALS],
  eventFanOutInline: ['int, timestamptz, int, int, int, text, text[], int[], int, int[], boolean[], text', `${HAND_OFF_LITERALS}, '{true}', '10000'`],
  eventFanOutInlineLean: ['int, timestamptz, text[], int[], int, int[], boolean[], text', `200, null, '{mailer}', '{200}', 200, '{35000}', '{true}', '10000'`],
} as const;

/** Every node of a plan. */
function nodes(node: any): any[] {
  return [node, ...(node.Plans ?? []).flatMap(nodes)];
}

describeTargets('plans on $name', (target) => {
  const test = it.skipIf(!target.available);

  test('finishing a batch probes each job by primary key, not every running job through jobs_lease_idx', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    const sql = postgresStatements(s);
    await staleQueue(target, s, 'running');

    const ids = Array.from({ length: 200 }, (_, k) => String(k + 1));
    const attempts = ids.map(() => 1);
    const now = null;
    const batches: [string, string, unknown[]][] = [
      ['jobCompleteMany', sql.jobCompleteMany, [ids, attempts, now]],
      ['jobReleaseMany', sql.jobReleaseMany, [ids, attempts]],
      ['jobFailMany', sql.jobFailMany, [ids, attempts, ids.map(() => 'retryable'), ids.map(() => null), ids.map(() => '{}'), now, ids.map(() => false), ids.map(() => null), ids.map(() => null)]],
    ];
    for (const [name, text, params] of batches) {
      const plan = await planOf(target, text, params);
      expect({ name, usesPrimaryKey: plan.includes('"jobs_pkey"'), readsLeaseIndex: plan.includes('"jobs_lease_idx"') })
        .toEqual({ name, usesPrimaryKey: true, readsLeaseIndex: false });
    }

    // And it still writes only jobs that are running at that attempt.
    await target.query(`update ${s}.jobs set attempt = 2 where id = 1`);
    await target.query(`update ${s}.jobs set state = 'available', lease_expires_at = null where id = 2`);
    await target.query(sql.jobCompleteMany, [ids, attempts, now]);
    const states = await target.query<{ state: string; n: number }>(
      `select state, count(*)::int as n from ${s}.jobs where id <= 200 group by state order by state`);
    expect(states).toEqual([{ state: 'available', n: 1 }, { state: 'completed', n: 198 }, { state: 'running', n: 1 }]);
  });

  test('an operator\'s cancel or discard by id probes those jobs, not every waiting job through jobs_claim_idx', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    await staleQueue(target, s, 'available');
    const ids = ['1', '2', '3'];
    const statements: [string, string][] = [
      ['jobCancel', postgresOperationsStatements(s).jobCancel],
      ['jobDiscard', postgresAdminStatements(s).jobDiscard],
    ];
    for (const [name, text] of statements) {
      const plan = await planOf(target, text, [ids, null]);
      expect({ name, usesPrimaryKey: plan.includes('"jobs_pkey"'), readsClaimIndex: plan.includes('"jobs_claim_idx"') })
        .toEqual({ name, usesPrimaryKey: true, readsClaimIndex: false });
    }

    // Still only waiting jobs: a running one is left as it is.
    await target.query(`update ${s}.jobs set state = 'running' where id = 3`);
    expect((await bus.jobs.cancel(['1', '2', '3'])).map(String).sort()).toEqual(['1', '2']);
    const states = await target.query<{ id: string; state: string }>(`select id::text as id, state from ${s}.jobs where id <= 3 order by id`);
    expect(states.map((r) => r.state)).toEqual(['cancelled', 'cancelled', 'running']);
  });
  test('a webhook claim with an endpoint at its cap reads around that endpoint\'s due backlog, not through it', async () => {
    // Before, the endpoints at their cap were skipped by a filter on heap rows in the
    // jobs_claim_any_idx scan: 50,000 due deliveries of the full endpoint ahead of the others
    // meant every claim read all 50,000 (about 1,100 buffers) before it reached another's.
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    const sql = postgresStatements(s);
    const backlog = 50_000;
    const jobs = (n: number, targetOf: string, from: string) => target.query(`insert into ${s}.jobs (event_id, kind, target, state, max_attempts, lease_ms, scheduled_at)
      select gen_random_uuid(), 'webhook', ${targetOf}, 'available', 18, 60000, now() - interval '${from}' + g * interval '1 ms' from generate_series(1, ${n}) g`);
    await jobs(backlog, `'full'`, '1 day');
    await jobs(6, `'other' || (g % 2)`, '1 minute');
    await target.query(`analyze ${s}.jobs`);
    // As the executor sends them: 'full' is at its cap (4), other1 holds 3 of 4.
    const claimParams = (full: string[]) => [['webhook'], ['*'], [4], 4, null, 'w1', [60000], [4], full, ['other1'], [3], ...(full.length ? [[''], [-32768]] : [])];

    const [row] = await target.query<{ 'QUERY PLAN': any }>(`explain (analyze, buffers, format json) ${sql.jobClaimCapped}`, claimParams(['full']));
    const plan = (typeof row!['QUERY PLAN'] === 'string' ? JSON.parse(row!['QUERY PLAN']) : row!['QUERY PLAN'])[0].Plan;
    const buffers = plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
    expect(buffers).toBeGreaterThan(0);
    expect(buffers).toBeLessThan(400);
    // Same plan shape whichever way round: the rows it claims are the others', other1 only to its room.
    await target.query(`update ${s}.jobs set state = 'available', attempt = 0, attempted_by = null, lease_expires_at = null where state = 'running'`);
    // (The row with no job reports where its walk of the targets ended.)
    const claimed = await target.query<{ id: string | null; target: string }>(sql.jobClaimCapped, claimParams(['full']));
    expect(claimed.filter((r) => r.id !== null).map((r) => r.target).sort()).toEqual(['other0', 'other0', 'other0', 'other1']);

    // A short backlog of the full endpoint (fewer than CLAIM_LOOKAHEAD due) is read around too.
    await target.query(`update ${s}.jobs set state = 'available', attempt = 0, attempted_by = null, lease_expires_at = null where state = 'running'`);
    await target.query(`delete from ${s}.jobs where target = 'full' and id > 10`);
    expect(CLAIM_LOOKAHEAD).toBeGreaterThan(10);
    const short = await target.query<{ id: string | null; target: string }>(sql.jobClaimCapped, claimParams(['full']));
    expect(short.filter((r) => r.id !== null).map((r) => r.target).sort()).toEqual(['other0', 'other0', 'other0', 'other1']);

    // With no endpoint at its cap the claim stays on jobs_claim_any_idx, in due order.
    const common = await planOf(target, sql.jobClaim, claimParams([]));
    expect(common.includes('"jobs_claim_any_idx"')).toBe(true);
    await target.query(`update ${s}.jobs set state = 'available', attempt = 0, attempted_by = null, lease_expires_at = null where state = 'running'`);
    expect((await target.query<{ target: string }>(sql.jobClaim, claimParams([]))).map((r) => r.target)).toEqual(['full', 'full', 'full', 'full']);
  });
  test('a capped webhook claim walks a bounded number of endpoints a claim, going on from where the last walk ended', async () => {
    // Before, the walk read the first waiting delivery of every endpoint with one: 22 ms a claim
    // with 2,000 such endpoints, 130 ms with 20,000, at every claim while an endpoint was at its cap.
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    const jobs = (n: number, targetOf: string, at: string) => target.query(`insert into ${s}.jobs (event_id, kind, target, state, max_attempts, lease_ms, scheduled_at)
      select gen_random_uuid(), 'webhook', ${targetOf}, 'available', 18, 60000, ${at} from generate_series(1, ${n}) g`);
    // The full endpoint's due backlog fills the lookahead; then more endpoints whose deliveries are
    // not due (failing ones, retrying later) than one claim's walks read, sorted first; then 6 with
    // one due delivery.
    await jobs(CLAIM_LOOKAHEAD + 50, `'full'`, `now() - interval '1 day' + g * interval '1 ms'`);
    const failing = CLAIM_WALK * (CLAIM_WALK_ROUNDS + 1);
    await jobs(failing, `'a' || lpad(g::text, 5, '0')`, `now() + interval '5 minutes'`);
    await jobs(6, `'z' || g`, `now() - interval '1 minute'`);
    await target.query(`analyze ${s}.jobs`);

    const executor = new PostgresExecutor({ query: async (text, params) => ({ rows: await target.query(text, params) }) }, postgresStatements(s));
    const claim = () => executor.jobClaim({
      workerId: 'w1', limit: 4, now: null,
      targets: [{ kind: 'webhook', target: '*', limit: 4, leaseMs: 60_000, perTarget: { limit: 4, held: [{ target: 'full', count: 4 }] } }],
    });
    const heads = async () => {
      const [row] = await target.query<{ n: number }>(`select count(*)::int as n from ${s}.jobs where state = 'running'`);
      return row!.n;
    };
    // The first claim's walks read only failing endpoints: nothing due, nothing claimed.
    expect(await claim()).toEqual([]);
    expect(await heads()).toBe(0);
    // The next goes on where it stopped instead of reading the same ones again, and reaches the
    // endpoints with due deliveries: one each (their heads), the first 4.
    expect((await claim()).map((j) => j.target)).toEqual(['z1', 'z2', 'z3', 'z4']);
    // Then it wraps round, through the failing ones again, and comes back to z5 and z6.
    const later: string[] = [];
    for (let k = 0; k < 4 && later.length < 2; k++) later.push(...(await claim()).map((j) => j.target));
    expect(later).toEqual(['z5', 'z6']);
    expect(await heads()).toBe(6);

    // However many endpoints wait, a claim reads about the same: at most CLAIM_WALK heads.
    const buffersOfOneClaim = async () => {
      const params = [['webhook'], ['*'], [4], 4, null, 'w1', [60000], [4], ['full'], [], [], [''], [-32768]];
      const [row] = await target.query<{ 'QUERY PLAN': any }>(`explain (analyze, buffers, format json) ${postgresStatements(s).jobClaimCapped}`, params);
      const plan = (typeof row!['QUERY PLAN'] === 'string' ? JSON.parse(row!['QUERY PLAN']) : row!['QUERY PLAN'])[0].Plan;
      await target.query(`update ${s}.jobs set state = 'available', attempt = 0, attempted_by = null, lease_expires_at = null where state = 'running' and target <> 'full'`);
      return plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
    };
    const few = await buffersOfOneClaim();
    await jobs(CLAIM_WALK * 20, `'b' || lpad(g::text, 6, '0')`, `now() + interval '5 minutes'`);
    await target.query(`analyze ${s}.jobs`);
    const many = await buffersOfOneClaim();
    expect(many).toBeLessThan(few * 1.5);

    // Deliveries the lookahead itself found, among the full endpoint's, are claimed whatever
    // part of the endpoints the walk reads.
    await target.query(`update ${s}.jobs set state = 'completed' where target like 'z%'`);
    await jobs(2, `'y' || g`, `now() - interval '2 days'`);
    const fresh = new PostgresExecutor({ query: async (text, params) => ({ rows: await target.query(text, params) }) }, postgresStatements(s));
    const inHand = await fresh.jobClaim({
      workerId: 'w2', limit: 4, now: null,
      targets: [{ kind: 'webhook', target: '*', limit: 4, leaseMs: 60_000, perTarget: { limit: 4, held: [{ target: 'full', count: 4 }] } }],
    });
    expect(inHand.map((j) => j.target)).toEqual(['y1', 'y2']);
  });

  test('a round\'s check for queued jobs of its handlers reads neither other handlers\' backlogs nor its own retries not yet due', async () => {
    // Before, the lean inline round joined its handlers with every due handler job: 50,000 jobs of
    // another handler waiting in the queue (a slow one's backlog) were read in every round, by a
    // sequential scan of the table (~17 ms a round) or through the index without the target. And
    // every round's check read all of its handler's waiting jobs when none was due: retries due
    // in an hour (a downstream that is down) were read in every round (~700 buffers for 100,000).
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    const sql = postgresStatements(s);
    await target.query(`insert into ${s}.handlers (name, patterns, like_patterns, max_attempts, lease_ms)
      values ('mailer', '{order.placed}', '{order.placed}', 5, 35000), ('slow', '{order.shipped}', '{order.shipped}', 5, 35000)`);
    await target.query(`insert into ${s}.jobs (event_id, kind, target, max_attempts, lease_ms, scheduled_at)
      select gen_random_uuid(), 'handler', 'slow', 5, 35000, now() - interval '1 minute' from generate_series(1, 50000)`);
    await target.query(`insert into ${s}.jobs (event_id, kind, target, state, attempt, max_attempts, lease_ms, priority, scheduled_at)
      select gen_random_uuid(), 'handler', 'mailer', 'retryable', 1, 5, 35000, (g % 2)::smallint, now() + interval '1 hour' + g * interval '1 ms'
      from generate_series(1, 50000) g`);
    await target.query(`insert into ${s}.events (id, type, payload) select gen_random_uuid(), 'order.placed', '{"n":1}' from generate_series(1, 200)`);
    await target.query(`analyze ${s}.jobs`);
    await target.query(`analyze ${s}.events`);

    const handOff = [200, null, 18, 30_000, 300_000, 'w1', ['mailer'], [200], 200, [35_000]];
    const lean = [200, null, ['mailer'], [200], 200, [35_000], [true], '10000'];
    const rounds: [string, string, unknown[]][] = [
      ['eventFanOutInlineLean', sql.eventFanOutInlineLean, lean],
      ['eventFanOutHandOff', sql.eventFanOutHandOff, handOff],
      ['eventFanOutInline', sql.eventFanOutInline, [...handOff, [true], '10000']],
    ];
    for (const [name, text, params] of rounds) {
      // The rounds write: each runs (and is rolled back) to count what its check read.
      const reads = await rolledBack(target, async (query) => jobReads(await analyzed(query, text, params)));
      expect({ name, everyReadByTarget: reads.every((r) => r.byTarget), buffersUnder40: reads.reduce((n, r) => n + r.buffers, 0) < 40 })
        .toEqual({ name, everyReadByTarget: true, buffersUnder40: true });
    }
    // An inline round's transaction plans its statements generically (BEGIN_OWN): the same holds there.
    for (const round of ['eventFanOutInlineLean', 'eventFanOutInline'] as const) {
      const name = `${round} (generic)`;
      const reads = await rolledBack(target, async (query) => jobReads(await genericRun(query, sql[round], ROUND_PARAMS[round])));
      expect({ name, everyReadByTarget: reads.every((r) => r.byTarget), buffersUnder40: reads.reduce((n, r) => n + r.buffers, 0) < 40 })
        .toEqual({ name, everyReadByTarget: true, buffersUnder40: true });
    }
    // The lean round still applies (no job of its handler is due), and no longer once one is,
    // at the handler's second priority: the check reads every priority, not only the first.
    const [leanRow] = await target.query<{ lean: boolean }>(sql.eventFanOutInlineLean, lean);
    expect(leanRow!.lean).toBe(true);
    await target.query(`update ${s}.events set fanned_out_at = null, delivered_inline = null`);
    await target.query(`update ${s}.jobs set scheduled_at = now() - interval '1 second'
      where id = (select max(id) from ${s}.jobs where target = 'mailer' and priority = 1)`);
    const [again] = await target.query<{ lean: boolean }>(sql.eventFanOutInlineLean, lean);
    expect(again!.lean).toBe(false);
  });

  test('a round marks its events fanned by their ctids, a TID scan, under a generic plan with statistics too, not by a scan of the events table', async () => {
    // The update joined the claimed events with the table on ctid. A generic plan (the plan cache's
    // choice after five runs of a prepared round) does not know the round's limit and takes it
    // for a tenth of the table: with the table analyzed, that plan was a hash join over a
    // sequential scan of every event, history included (45 ms a round at 120,000 events, growing
    // with the table), where the claimed rows' ctids name the 200 rows to write.
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    const sql = postgresStatements(s);
    await target.query(`insert into ${s}.handlers (name, patterns, like_patterns, max_attempts, lease_ms)
      values ('mailer', '{order.placed}', '{order.placed}', 5, 35000)`);
    await target.query(`insert into ${s}.events (id, type, payload, fanned_out_at)
      select gen_random_uuid(), 'order.placed', '{"n":1}', now() from generate_series(1, 20000)`);
    await target.query(`insert into ${s}.events (id, type, payload) select gen_random_uuid(), 'order.placed', '{"n":1}' from generate_series(1, 400)`);
    for (const table of ['events', 'handlers', 'jobs', 'endpoints']) await target.query(`analyze ${s}.${table}`);

    for (const name of Object.keys(ROUND_PARAMS) as (keyof typeof ROUND_PARAMS)[]) {
      const eventScans = await rolledBack(target, async (query) => nodes(await genericRun(query, sql[name], ROUND_PARAMS[name]))
        .filter((n) => n['Relation Name'] === 'events' && n['Node Type'] !== 'ModifyTable').map((n) => `${n['Node Type']}: ${n['Actual Rows']} rows`));
      // The claim's index scan of the unfanned events (200 rows), and the update's TID scan.
      expect({ name, eventScans }).toEqual({ name, eventScans: ['Index Scan: 200 rows', 'Tid Scan: 200 rows'] });
    }
  });

  test('lists sort by the id column, never by the id::text they select (a sort of every row, and 10 before 9)', async () => {
    const bus = await testBus(target, events, { relay: { enabled: false }, worker: { enabled: false } });
    const s = `"${bus.schema}"`;
    const sql = postgresStatements(s);
    const admin = postgresAdminStatements(s);
    const hooks = webhookStatements(s);
    const event = '01900000-0000-7000-8000-000000000000';
    const lists: [string, string, unknown[]][] = [
      ['eventListAll', admin.eventListAll, [null, null, null, null, null, null, 50]],
      ['eventListUnfanned (admin)', admin.eventListUnfanned, [null, null, null, null, null, null, 50]],
      ['jobList', admin.jobList, [null, null, null, null, null, 50]],
      ['eventListUnfanned (relay)', sql.eventListUnfanned, [200]],
      ['eventListInCurrentTransaction', sql.eventListInCurrentTransaction, []],
      ['jobListForEvent', sql.jobListForEvent, [event]],
      ['endpointList', hooks.endpointList, [null, 100, null]],
      ['attemptListForEndpoint', hooks.attemptListForEndpoint, [event, null, 50]],
      ['attemptListForEvent', hooks.attemptListForEvent, [event, null, 50]],
    ];
    for (const [name, text, params] of lists) {
      const plan = await planOf(target, text, params);
      const sortKeys = [...plan.matchAll(/"Sort Key":\[([^\]]*)\]/g)].map((m) => m[1]);
      expect({ name, textSort: sortKeys.filter((k) => k!.includes('::text')) }).toEqual({ name, textSort: [] });
    }
  });
});
