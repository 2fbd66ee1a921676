// The operations commands through main(), as `rea` runs them: status (alerts first, --json,
// --check), retention run (--dry-run), events requeue, jobs retry and jobs cancel, each saying
// what it changed. PostgreSQL by URL, and status once on a PGlite data directory.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { main } from '../src/cli/main.js';
import { formatBytes } from '../src/core/format.js';
import { createBus, defineEvents } from '../src/index.js';
import { PG_URL, postgresTarget, testBus } from './helpers/db.js';

const events = defineEvents({ 'note.saved': z.object({ n: z.number() }) });
const quiet = { relay: { enabled: false }, worker: { enabled: false }, retention: { enabled: false } } as const;

async function rea(...args: string[]): Promise<{ out: string; code: number }> {
  const lines: string[] = [];
  const spy = vi.spyOn(console, 'log').mockImplementation((...m: unknown[]) => {
    lines.push(m.join(' '));
  });
  const before = process.exitCode;
  process.exitCode = undefined;
  try {
    await main(['node', 'rea', ...args]);
    return { out: lines.join('\n'), code: Number(process.exitCode ?? 0) };
  } finally {
    spy.mockRestore();
    process.exitCode = before;
  }
}

afterEach(() => vi.restoreAllMocks());

describe.skipIf(!postgresTarget.available)('operations CLI on postgres', () => {
  const target = postgresTarget;

  it('sizes are in binary units named as such, the same in the CLI and the panel', () => {
    expect([1023, 1024, 8 * 1024 + 100, 152 * 1024, 1.5 * 1024 ** 2, 3 * 1024 ** 3].map(formatBytes))
      .toEqual(['1023 B', '1.0 KiB', '8.1 KiB', '152 KiB', '1.5 MiB', '3.0 GiB']);
  });

  it('status prints alerts first for people, JSON for scripts, and --check exits 1 while an alert holds', async () => {
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    const [id] = await bus.transaction((tx) => bus.recordMany(tx, [{ type: 'note.saved', payload: { n: 1 } }]));
    await target.query(`update "${s}".events set poisoned_at = now(), fan_attempts = 5 where id = $1`, [id]);

    const { out, code } = await rea('status', '--database-url', PG_URL, '--schema', s, '--check');
    const lines = out.split('\n');
    expect(lines[0]).toBe('alerts   1');
    expect(lines[1]).toMatch(/^ {2}! events_poisoned: 1 poisoned event: fix the cause, then `rea events requeue --poisoned` \(since .+ ago\)$/);
    expect(out).toMatch(/events {3}backlog 0 unfanned · oldest - · poisoned 1/);
    // pg_total_relation_size is in bytes; shown in binary units, named as such (not kB for KiB).
    expect(out).toMatch(/tables {3}.*events \d+(\.\d)? KiB/);
    expect(code).toBe(1);

    const json = JSON.parse((await rea('status', '--database-url', PG_URL, '--schema', s, '--json')).out);
    expect(json).toMatchObject({ backlog: 0, poisoned: 1, discarded: 0, estimated: [], alerts: [{ name: 'events_poisoned', figure: 1, threshold: 0 }] });

    const requeue = await rea('events', 'requeue', '--database-url', PG_URL, '--schema', s, '--poisoned');
    expect(requeue.out).toBe(`requeued 1 event:\n  ${id}`);
    expect(requeue.code).toBe(0);
    const clear = await rea('status', '--database-url', PG_URL, '--schema', s, '--check');
    expect(clear.out.split('\n')[0]).toBe('alerts   none');
    expect(clear.code).toBe(0);
    const again = await rea('events', 'requeue', '--database-url', PG_URL, '--schema', s, id!);
    expect(again.out).toBe(`requeued 0 events\nleft alone 1 (not poisoned, or no such event):\n  ${id}`);
    // An id the command was given and did not requeue fails the command, for scripts.
    expect(again.code).toBe(1);
  });

  it('events replay --handler runs a handler on a stored event again, as a new job; a refusal fails the command', async () => {
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    bus.on('note.saved', 'indexer', () => {});
    await bus.start(); // stores the handler; nothing runs (quiet)
    const id = await bus.transaction((tx) => bus.record(tx, 'note.saved', { n: 1 }));
    await bus.relayOnce();
    await target.query(`update "${s}".jobs set state = 'completed', finalized_at = now() where event_id = $1`, [id]);

    const r = await rea('events', 'replay', id!, '--handler', 'indexer', '--database-url', PG_URL, '--schema', s);
    expect(r.code).toBe(0);
    const jobId = /^replayed event ([0-9a-f-]{36}) to handler indexer: job (\d+)$/.exec(r.out);
    expect(jobId?.[1]).toBe(id);
    expect((await bus.jobs.forEvent(id!)).map((j) => [j.id, j.state])).toContainEqual([jobId![2], 'available']);
    // That job still waits: a second replay is refused, and nothing more is made.
    const again = await rea('events', 'replay', id!, '--handler', 'indexer', '--database-url', PG_URL, '--schema', s, '--json');
    // The command line was right; the work was refused: exit 1, as the README's exit codes say (not 2).
    expect(again.code).toBe(1);
    expect(await bus.jobs.forEvent(id!)).toHaveLength(2);
    // Where to send it, one of the two.
    const neither = await rea('events', 'replay', id!, '--database-url', PG_URL, '--schema', s);
    expect(neither.code).not.toBe(0);

    // Without an id: every fanned event the filters and the handler take.
    const more = await bus.transaction((tx) => bus.recordMany(tx, [1, 2, 3].map((n) => ({ type: 'note.saved' as const, payload: { n }, subject: n === 2 ? 'two' : null }))));
    await bus.relayOnce();
    await target.query(`update "${s}".jobs set state = 'completed', finalized_at = now()`);
    const bulk = await rea('events', 'replay', '--handler', 'indexer', '--subject', 'two', '--database-url', PG_URL, '--schema', s);
    expect(bulk).toEqual({ out: 'replayed 1 event to handler indexer', code: 0 });
    expect((await bus.jobs.forEvent(more[1]!)).map((j) => j.state).sort()).toEqual(['available', 'completed']);
    const all = await rea('events', 'replay', '--handler', 'indexer', '--since', '2020-01-01', '--json', '--database-url', PG_URL, '--schema', s);
    expect(JSON.parse(all.out)).toEqual({ handler: 'indexer', replayed: 3, skipped: 1 });
    // A filter with an id, or a bad one, is a usage error naming the flag; nothing more is made.
    expect((await rea('events', 'replay', id!, '--handler', 'indexer', '--type', 'note.saved', '--database-url', PG_URL, '--schema', s)).code).toBe(2);
    expect((await rea('events', 'replay', '--handler', 'indexer', '--since', 'soon', '--database-url', PG_URL, '--schema', s)).code).toBe(2);
    expect((await target.query(`select count(*)::int as n from "${s}".jobs`))[0].n).toBe(9);
  });

  it('retention run --dry-run says what it would remove and removes nothing; run removes it', async () => {
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    const [eventId] = await bus.transaction((tx) => bus.recordMany(tx, [{ type: 'note.saved', payload: { n: 1 } }]));
    await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, finalized_at)
       values ($1, 'handler', 'h', 5, 1000, 'completed', now() - interval '2 days'),
              ($1, 'handler', 'h', 5, 1000, 'completed', now() - interval '2 days'),
              ($1, 'handler', 'h', 5, 1000, 'discarded', now() - interval '2 days')`, [eventId]);
    const dry = await rea('retention', 'run', '--database-url', PG_URL, '--schema', s, '--dry-run');
    expect(dry.out).toContain('retention dry run: nothing was deleted');
    expect(dry.out).toMatch(/jobs\.completed +older than 24\.0 h +would remove 2 rows/);
    expect(dry.out).toMatch(/jobs\.discarded +older than 7\.0 d +would remove 0 rows/);
    expect(dry.out).toMatch(/total: would remove 2 rows$/);
    expect((await target.query(`select count(*)::int as n from "${s}".jobs`))[0].n).toBe(3);

    // A pass that deletes by rea's defaults, not an application's settings, says so: --defaults.
    // Without it (or --module) it deleted by the defaults all the same, an app's 30-day events at 7.
    const said = vi.spyOn(console, 'error').mockImplementation(() => {});
    const unasked = await rea('retention', 'run', '--database-url', PG_URL, '--schema', s, '--json');
    expect(unasked.code).toBe(2);
    const { error } = JSON.parse(said.mock.calls.flat().join(' ')) as { error: { code: string; field: string; message: string } };
    expect(error).toMatchObject({ code: 'ERR_USAGE', field: '--module' });
    expect(error.message).toContain("invalid option --module: without it the pass would delete by rea's default windows, not your application's retention settings");
    expect((await target.query(`select count(*)::int as n from "${s}".jobs`))[0].n).toBe(3);
    said.mockClear();
    expect((await rea('retention', 'run', '--module', './bus.js', '--defaults')).code).toBe(2);
    expect(said.mock.calls.flat().join(' ')).toContain('invalid option --defaults: --module runs the pass with the settings of the bus it builds');
    said.mockRestore();

    const real = await rea('retention', 'run', '--database-url', PG_URL, '--schema', s, '--defaults', '--json');
    const report = JSON.parse(real.out);
    expect(report).toMatchObject({ dryRun: false, removed: 2 });
    expect(report.rules.find((r: any) => r.rule === 'jobs.completed')).toMatchObject({ removed: 2, batches: 1 });
    expect((await target.query(`select state from "${s}".jobs`)).map((r: any) => r.state)).toEqual(['discarded']);
  });

  it('jobs retry and jobs cancel confirm what changed and say why the rest did not', async () => {
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    const [eventId] = await bus.transaction((tx) => bus.recordMany(tx, [{ type: 'note.saved', payload: { n: 1 } }]));
    const jobs = await target.query<{ id: string }>(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at, lease_expires_at)
       values ($1, 'handler', 'a', 5, 1000, 'discarded', 5, now(), null),
              ($1, 'handler', 'b', 5, 1000, 'completed', 1, now(), null),
              ($1, 'handler', 'c', 5, 1000, 'available', 0, null, null),
              ($1, 'handler', 'd', 5, 1000, 'running', 1, null, now() + interval '1 hour'),
              ($1, 'handler', 'd', 5, 1000, 'discarded', 5, now(), null)
       returning id::text as id`, [eventId]);
    const [discarded, completed, available, running, twin] = jobs.map((j) => j.id);

    const retry = await rea('jobs', 'retry', '--database-url', PG_URL, '--schema', s, discarded!, completed!, twin!, '999999');
    expect(retry.out).toBe([
      `retried 1 job: ${discarded}`,
      `  left alone ${completed}: completed: only discarded or cancelled jobs are retried`,
      `  left alone ${twin}: discarded, but job ${running} of its handler for the same event waits or runs`,
      '  left alone 999999: no such job',
    ].join('\n'));
    expect(retry.code).toBe(1);

    const cancel = await rea('jobs', 'cancel', '--database-url', PG_URL, '--schema', s, available!, running!, discarded!);
    expect(cancel.out).toBe([
      `cancelled 2 jobs: ${discarded}, ${available}`,
      `  left alone ${running}: running: its handler may already have acted; let it finish`,
    ].join('\n'));
    expect(cancel.code).toBe(1);
    const cancelAgain = await rea('jobs', 'cancel', '--database-url', PG_URL, '--schema', s, available!, '--json');
    expect(JSON.parse(cancelAgain.out)).toEqual({ action: 'cancelled', changed: [], unchanged: [{ id: available, reason: 'cancelled: only waiting jobs are cancelled' }] });
    expect(cancelAgain.code).toBe(1);

    const byStateRun = await rea('jobs', 'retry', '--database-url', PG_URL, '--schema', s, '--cancelled', '--json');
    expect(JSON.parse(byStateRun.out)).toEqual({ action: 'retried', changed: [discarded, available], unchanged: [] });
    expect(byStateRun.code).toBe(0);

    const bad = vi.spyOn(console, 'error').mockImplementation(() => {});
    await rea('jobs', 'retry', '--database-url', PG_URL, '--schema', s);
    expect(bad.mock.calls.flat().join(' ')).toMatch(/give job ids, or one of --discarded/);
    // A mistyped handler name is an error, not "retried 0 jobs".
    bad.mockClear();
    const unknown = await rea('jobs', 'retry', '--database-url', PG_URL, '--schema', s, '--discarded', '--handler', 'nosuch');
    expect(unknown).toEqual({ out: '', code: 2 });
    expect(bad.mock.calls.flat().join(' ')).toBe('rea: handler "nosuch" not found; known handlers: (none registered)');
  });

  it('events list and jobs list find the ids the repair commands take, a page at a time; a bad filter names the flag', async () => {
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    const db = ['--database-url', PG_URL, '--schema', s];
    const ids = await bus.transaction((tx) => bus.recordMany(tx, [1, 2, 3].map((n) => ({ type: 'note.saved' as const, payload: { n }, subject: `S${n}` }))));
    await target.query(`update "${s}".events set poisoned_at = now(), fan_attempts = 5, last_error = 'no route' where id = $1`, [ids[0]]);
    const [job] = await target.query<{ id: string }>(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at, errors)
       values ($1, 'handler', 'mailer', 5, 1000, 'discarded', 5, now(), '[{"at":"2026-01-01T00:00:00Z","attempt":5,"message":"SMTP 550\\nmailbox gone"}]')
       returning id::text as id`, [ids[1]]);

    const poisoned = await rea('events', 'list', ...db, '--state', 'poisoned');
    expect(poisoned.out).toMatch(new RegExp(`^${ids[0]}  poisoned \\S+Z  note\\.saved S1  no route$`));
    const page1 = await rea('events', 'list', ...db, '--limit', '2');
    const lines = page1.out.split('\n');
    expect(lines.slice(0, 2).map((l) => l.split(' ')[0])).toEqual([ids[2], ids[1]]); // newest first
    expect(lines[2]).toBe(`(more: --cursor ${ids[1]})`);
    const page2 = JSON.parse((await rea('events', 'list', ...db, '--limit', '2', '--cursor', ids[1]!, '--json')).out);
    expect(page2).toMatchObject({ items: [{ id: ids[0], state: 'poisoned' }], nextCursor: null });

    const discarded = await rea('jobs', 'list', ...db, '--state', 'discarded');
    expect(discarded.out).toBe(`${job!.id.padStart(6)}  discarded handler mailer  attempt 5/5  event ${ids[1]}  last error: SMTP 550 mailbox gone`);
    expect(JSON.parse((await rea('jobs', 'list', ...db, '--handler', 'nobody', '--json')).out)).toEqual({ items: [], nextCursor: null });

    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    const bad = await rea('jobs', 'list', ...db, '--state', 'finished');
    expect(bad.code).toBe(2);
    expect(err.mock.calls.flat().join(' ')).toMatch(/^rea: invalid option --state: must be one of available/);
    await rea('events', 'list', ...db, '--since', 'yesterday');
    expect(err.mock.calls.flat().join(' ')).toMatch(/invalid option --since: /);
  });

  it('events list and jobs list show control characters from stored data as ·, never send them to the terminal', async () => {
    const bus = await testBus(target, events, quiet);
    const s = bus.schema;
    const db = ['--database-url', PG_URL, '--schema', s];
    // Stored data is not rea's to trust: a capture trigger or another application writes the
    // rows, a handler's exception the errors. ESC ]0;…BEL retitles the window, ESC [2J clears it.
    const evil = '\u001b]0;pwned\u0007\u001b[2J\u009b31m';
    const [id] = await bus.transaction((tx) => bus.recordMany(tx, [{ type: 'note.saved' as const, payload: { n: 1 } }]));
    await target.query(`update "${s}".events set type = $2, subject = $3, poisoned_at = now(), fan_attempts = 5, last_error = $4 where id = $1`,
      [id, `note.${evil}`, `S${evil}`, `boom${evil}`]);
    await target.query(
      `insert into "${s}".jobs (event_id, kind, target, max_attempts, lease_ms, state, attempt, finalized_at, errors)
       values ($1, 'handler', $2, 5, 1000, 'discarded', 5, now(), jsonb_build_array(jsonb_build_object('at', '2026-01-01T00:00:00Z', 'attempt', 5, 'message', $3::text)))`,
      [id, `mailer${evil}`, `SMTP${evil}`]);

    const shown = '·]0;pwned··[2J·31m';
    const listed = (await rea('events', 'list', ...db)).out;
    expect(listed).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(listed).toContain(`note.${shown} S${shown}  boom${shown}`);
    const jobs = (await rea('jobs', 'list', ...db)).out;
    expect(jobs).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(jobs).toContain(`handler mailer${shown}  attempt 5/5`);
    expect(jobs).toContain(`last error: SMTP${shown}`);
    // --json is for scripts: the data as stored, escaped by JSON.
    expect(JSON.parse((await rea('events', 'list', ...db, '--json')).out).items[0].subject).toBe(`S${evil}`);
  });
});

describe('operations CLI on a PGlite data directory', () => {
  it('status reads the same overview from an embedded database', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rea-cli-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const bus = createBus({ database: { pglite: dir }, events, ...quiet });
    await bus.migrate();
    await bus.transaction((tx) => bus.recordMany(tx, Array.from({ length: 3 }, (_, n) => ({ type: 'note.saved' as const, payload: { n } }))));
    await bus.stop();
    const json = JSON.parse((await rea('status', '--pglite', dir, '--json')).out);
    expect(json).toMatchObject({ backlog: 3, poisoned: 0, alerts: [] });
    expect(json.tables.map((t: any) => t.name)).toContain('events_archive');
  }, 60_000);
});
