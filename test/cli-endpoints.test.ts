// `rea endpoints …` through main(), as people and scripts run it: add prints the secret once,
// list never does, enable/disable/rotate say what changed, test delivers a signed test event.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { defineEvents } from '../src/index.js';
import { PG_URL, postgresTarget, testBus } from './helpers/db.js';
import { receiver } from './helpers/http.js';
import { rea } from './helpers/cli.js';

const events = defineEvents({ 'order.created': z.object({ orderNo: z.string() }) });
const quiet = { relay: { enabled: false }, worker: { enabled: false } } as const;


afterEach(() => vi.restoreAllMocks());

describe.skipIf(!postgresTarget.available)('endpoints CLI on postgres', () => {
  it('add, list, disable, enable, rotate, test and attempts, for people and with --json', async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema];
    const r = await receiver();

    const refused = await rea('endpoints', 'add', r.url, '--events', 'order.*', ...db);
    expect(refused.code).toBe(2);
    expect(refused.err).toMatch(/^rea: webhook URL refused \(host 127\.0\.0\.1\): resolves to loopback address 127\.0\.0\.1/);

    const added = await rea('endpoints', 'add', r.url, '--events', 'order.*, order.created', '--description', 'warehouse', '--allow-private-networks', ...db);
    expect(added.code).toBe(0);
    const secret = /secret: (whsec_\S+)/.exec(added.out)![1]!;
    const id = added.out.split(/\s+/)[0]!;
    expect(added.out).toContain(`${id}  enabled  ${r.url}`);
    expect(added.out).toContain(`events order.*, order.created · secret …${secret.slice(-5, -1)} · warehouse`);
    expect(added.out).toContain('(shown once: store it now');

    const listed = await rea('endpoints', 'list', ...db);
    expect(listed.out).toBe(`${id}  enabled  ${r.url}\n  events order.*, order.created · secret …${secret.slice(-5, -1)} · warehouse\n  last success -`);
    const json = await rea('endpoints', 'list', '--json', ...db);
    expect(JSON.parse(json.out)).toMatchObject({ items: [{ id, state: 'enabled', eventTypes: ['order.*', 'order.created'], secretHint: secret.slice(-5, -1), lastSuccessAt: null }], nextCursor: null });
    expect(json.out + listed.out).not.toContain(secret.slice(6));

    // As a delivery notes it (this bus delivers nothing): every listing, --json too, says when it last worked.
    await postgresTarget.query(`update "${bus.schema}".endpoints set last_success_at = '2025-07-03T09:00:00Z' where id = $1`, [id]);
    expect((await rea('endpoints', 'list', ...db)).out.split('\n').at(-1)).toBe('  last success 2025-07-03T09:00:00.000Z');
    expect(JSON.parse((await rea('endpoints', 'list', '--json', ...db)).out).items[0].lastSuccessAt).toBe('2025-07-03T09:00:00.000Z');

    const off = await rea('endpoints', 'disable', id, '--reason', 'receiver migration', ...db);
    expect(off.out).toMatch(new RegExp(`^${id}  disabled  .*\\n.*\\n  disabled \\d{4}-.*Z: receiver migration\\n  last success 2025-07-03T09:00:00\\.000Z$`));
    expect(JSON.parse((await rea('endpoints', 'disable', id, '--json', ...db)).out)).toMatchObject({ state: 'disabled', lastSuccessAt: '2025-07-03T09:00:00.000Z' });
    expect((await rea('endpoints', 'list', '--state', 'disabled', '--json', ...db)).out).toContain(id);
    expect((await rea('endpoints', 'enable', id, ...db)).out).toMatch(new RegExp(`^${id}  enabled  `));

    const rotated = await rea('endpoints', 'rotate', id, '--json', ...db);
    const after = JSON.parse(rotated.out) as { secret: string; secretHint: string };
    expect(after.secret).toMatch(/^whsec_/);
    expect(after.secret).not.toBe(secret);
    expect(after.secretHint).toBe(after.secret.slice(-5, -1));

    const tested = await rea('endpoints', 'test', id, '--allow-private-networks', ...db);
    expect(tested.code).toBe(0);
    expect(tested.out).toMatch(/^success: HTTP 200 in \d+ ms\nresponse: ok\nwebhook-id msg_test_[0-9a-f]{32}$/);
    const got = await r.nth(1);
    // During the grace period both secrets sign; each verifies on its own.
    expect(new Webhook(after.secret).verify(got.body, got.headers)).toMatchObject({ type: 'rea.endpoint.test' });
    expect(new Webhook(secret).verify(got.body, got.headers)).toMatchObject({ type: 'rea.endpoint.test' });

    const attempts = await rea('endpoints', 'attempts', id, ...db);
    expect(attempts.out).toMatch(/^\d{4}-\S+Z {2}success {3}200 +\d+ ms {2}#1 test {2}ok$/);

    const missing = await rea('endpoints', 'enable', '0190a4b2-0000-7000-8000-000000000000', ...db);
    expect(missing).toMatchObject({ code: 2, err: 'rea: endpoint 0190a4b2-0000-7000-8000-000000000000 not found' });
  });

  it("add --secret takes a bare base64 secret as well as whsec_…, printing it with its prefix; a short one is refused by name, never echoed", async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema, '--allow-private-networks'];
    const bare = randomBytes(32).toString('base64');
    const added = await rea('endpoints', 'add', 'http://127.0.0.1:9/a', '--events', 'order.*', '--secret', bare, '--json', ...db);
    expect(added.code).toBe(0);
    expect(JSON.parse(added.out)).toMatchObject({ secret: `whsec_${bare}`, secretHint: bare.replace(/=+$/, '').slice(-4) });
    const short = randomBytes(16).toString('base64');
    const refused = await rea('endpoints', 'add', 'http://127.0.0.1:9/b', '--events', 'order.*', '--secret', short, ...db);
    expect(refused).toMatchObject({ code: 2, err: 'rea: invalid webhook secret: decodes to 16 bytes; at least 24 are required' });
    expect(refused.out + refused.err).not.toContain(short);
    expect(JSON.parse((await rea('endpoints', 'list', '--json', ...db)).out).items).toHaveLength(1);
  });

  it('rotate --secret takes the receiver\'s own secret (bare base64 or whsec_…); a short one is refused by name, never echoed, and the secret stays', async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema, '--allow-private-networks'];
    const added = await rea('endpoints', 'add', 'http://127.0.0.1:9/a', '--events', 'order.*', '--json', ...db);
    const { id, secret: first } = JSON.parse(added.out) as { id: string; secret: string };
    const bare = randomBytes(32).toString('base64');
    const rotated = await rea('endpoints', 'rotate', id, '--secret', bare, '--grace-ms', '0', '--json', ...db);
    expect(rotated.code).toBe(0);
    expect(JSON.parse(rotated.out)).toMatchObject({ secret: `whsec_${bare}`, secretHint: bare.replace(/=+$/, '').slice(-4) });
    const short = randomBytes(16).toString('base64');
    const refused = await rea('endpoints', 'rotate', id, '--secret', short, ...db);
    expect(refused).toMatchObject({ code: 2, err: 'rea: invalid webhook secret: decodes to 16 bytes; at least 24 are required' });
    expect(refused.out + refused.err).not.toContain(short);
    const stored = await postgresTarget.query<{ secrets: { secret: string }[] }>(`select secrets from "${bus.schema}".endpoints where id = $1`, [id]);
    expect(stored[0]!.secrets.map((x) => x.secret)).toContain(`whsec_${bare}`);
    expect(stored[0]!.secrets.map((x) => x.secret)).not.toContain(`whsec_${short}`);
    expect(first).not.toBe(`whsec_${bare}`);
  });

  it('update changes the URL, event types and description; delete needs --yes and removes the endpoint', async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema, '--allow-private-networks'];
    const added = await rea('endpoints', 'add', 'http://127.0.0.1:9/a', '--events', 'order.*', '--description', 'old', ...db);
    const id = added.out.split(/\s+/)[0]!;

    const none = await rea('endpoints', 'update', id, ...db);
    expect(none).toMatchObject({ code: 2, err: expect.stringContaining('give at least one of --url, --events, --description') });

    const updated = await rea('endpoints', 'update', id, '--url', 'http://127.0.0.1:9/b', '--events', 'order.created', '--description', 'new', '--json', ...db);
    expect(updated.code).toBe(0);
    expect(JSON.parse(updated.out)).toMatchObject({ id, url: 'http://127.0.0.1:9/b', eventTypes: ['order.created'], description: 'new', state: 'enabled' });
    expect(updated.out).not.toContain('whsec_');
    const partial = await rea('endpoints', 'update', id, '--description', 'newer', ...db);
    expect(partial.out).toContain(`${id}  enabled  http://127.0.0.1:9/b`);
    expect(partial.out).toContain('events order.created · secret …');
    expect(partial.out).toContain('· newer');

    const badUrl = await rea('endpoints', 'update', id, '--url', 'ftp://x', ...db);
    expect(badUrl.code).toBe(2);
    expect(JSON.parse((await rea('endpoints', 'list', '--json', ...db)).out).items[0].url).toBe('http://127.0.0.1:9/b');

    const unconfirmed = await rea('endpoints', 'delete', id, ...db);
    expect(unconfirmed).toMatchObject({ code: 2, err: expect.stringContaining('cannot be undone: add --yes') });
    expect(JSON.parse((await rea('endpoints', 'list', '--json', ...db)).out).items).toHaveLength(1);

    expect(await rea('endpoints', 'delete', id, '--yes', ...db)).toMatchObject({ code: 0, out: `deleted endpoint ${id}; cancelled 0 waiting deliveries` });
    expect((await rea('endpoints', 'list', ...db)).out).toBe('no endpoints');
    const again = await rea('endpoints', 'delete', id, '--yes', ...db);
    expect(again).toMatchObject({ code: 2, err: `rea: endpoint ${id} not found` });
  });

  it('attempts of an id that is neither an endpoint nor in the attempt log is not found; a deleted endpoint\'s log is still listed', async () => {
    // Before, an unknown id printed "no attempts" and exited 0, like a real endpoint never called.
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema, '--allow-private-networks'];
    const r = await receiver();
    const called = (await rea('endpoints', 'add', r.url, '--events', 'order.*', ...db)).out.split(/\s+/)[0]!;
    const quietOne = (await rea('endpoints', 'add', r.url, '--events', 'order.*', ...db)).out.split(/\s+/)[0]!;
    expect((await rea('endpoints', 'test', called, ...db)).code).toBe(0);

    expect(await rea('endpoints', 'attempts', quietOne, ...db)).toMatchObject({ code: 0, out: 'no attempts' });
    expect(await rea('endpoints', 'attempts', quietOne, '--json', ...db)).toMatchObject({ code: 0, out: '{"items":[],"nextCursor":null}' });

    expect((await rea('endpoints', 'delete', called, '--yes', ...db)).code).toBe(0);
    const kept = await rea('endpoints', 'attempts', called, ...db);
    expect(kept.code).toBe(0);
    expect(kept.out).toMatch(/^\d{4}-\S+Z {2}success {3}200 +\d+ ms {2}#1 test {2}ok$/);

    // Pages: a hint only when older attempts remain, and the cursor it prints reaches them.
    expect((await rea('endpoints', 'test', quietOne, ...db)).code).toBe(0);
    expect((await rea('endpoints', 'test', quietOne, ...db)).code).toBe(0);
    const first = await rea('endpoints', 'attempts', quietOne, '--limit', '1', ...db);
    const more = /\(more: --cursor (\d+)\)$/.exec(first.out);
    expect(first.out.split('\n')).toHaveLength(2);
    expect(more).not.toBeNull();
    const second = await rea('endpoints', 'attempts', quietOne, '--limit', '1', '--cursor', more![1]!, ...db);
    expect(second.code).toBe(0);
    expect(second.out).toMatch(/^\d{4}-\S+Z {2}success {3}200 +\d+ ms {2}#1 test {2}ok$/); // the last page: no hint
    expect(second.out).not.toBe(first.out.split('\n')[0]);
    expect((await rea('endpoints', 'attempts', quietOne, '--limit', '2', ...db)).out).not.toContain('(more:');
    // --json says the same: a bare array could not tell a full last page from one with more after it.
    expect(JSON.parse((await rea('endpoints', 'attempts', quietOne, '--limit', '1', '--json', ...db)).out).nextCursor).toBe(more![1]);
    expect(JSON.parse((await rea('endpoints', 'attempts', quietOne, '--limit', '2', '--json', ...db)).out).nextCursor).toBeNull();
    expect(await rea('endpoints', 'attempts', quietOne, '--cursor', 'x', ...db)).toMatchObject({ code: 2, err: expect.stringContaining('x is not an attempt id') });

    const unknown = '0190a4b2-0000-7000-8000-000000000000';
    expect(await rea('endpoints', 'attempts', unknown, ...db)).toMatchObject({ code: 2, out: '', err: `rea: endpoint ${unknown} not found` });
    const json = await rea('endpoints', 'attempts', unknown, '--json', ...db);
    expect(json.code).toBe(2);
    expect(json.out).toBe('');
    expect(JSON.parse(json.err)).toEqual({ error: { code: 'ERR_NOT_FOUND', message: `endpoint ${unknown} not found` } });
  });

  it('test exits 1 when the endpoint does not answer 2xx', async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema];
    const r = await receiver((_q, res) => res.writeHead(500).end('broken'));
    const ep = await (await import('../src/index.js')).createBus({ database: { postgres: PG_URL }, schema: bus.schema, events, webhooks: { allowPrivateNetworks: true } });
    onTestFinished(() => ep.stop());
    const { id } = await ep.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const tested = await rea('endpoints', 'test', id, '--json', '--allow-private-networks', ...db);
    expect(tested.code).toBe(1);
    expect(JSON.parse(tested.out)).toMatchObject({ outcome: 'failure', status: 500, error: 'HTTP 500', responseExcerpt: 'broken' });
  });

  it("test and attempts never send a receiver's control characters to the terminal (--json keeps the bytes)", async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema];
    const r = await receiver((_q, res) => res.end('\x1b[2J\x1b]0;owned\x07\x1b[32mall good\x1b[0m'));
    const ep = await (await import('../src/index.js')).createBus({ database: { postgres: PG_URL }, schema: bus.schema, events, webhooks: { allowPrivateNetworks: true } });
    onTestFinished(() => ep.stop());
    const { id } = await ep.endpoints.create({ url: r.url, eventTypes: ['order.created'] });
    const tested = await rea('endpoints', 'test', id, '--allow-private-networks', ...db);
    expect(tested.out).toContain('response: ·[2J·]0;owned··[32mall good·[0m');
    const attempts = await rea('endpoints', 'attempts', id, ...db);
    expect(attempts.out).toContain('·[2J·]0;owned··[32mall good·[0m');
    expect(tested.out + attempts.out).not.toMatch(/[\u0000-\u0008\u000b-\u001f]/);
    const json = await rea('endpoints', 'attempts', id, '--json', ...db);
    expect(JSON.parse(json.out).items[0].responseExcerpt).toBe('\x1b[2J\x1b]0;owned\x07\x1b[32mall good\x1b[0m');
  });

  it('list pages with --limit and --cursor, saying where the next page starts', async () => {
    const bus = await testBus(postgresTarget, events, { ...quiet, webhooks: { allowPrivateNetworks: true } } as never);
    const db = ['--database-url', PG_URL, '--schema', bus.schema];
    const ids: string[] = [];
    for (const n of [1, 2, 3]) ids.push((await bus.endpoints.create({ url: `http://127.0.0.1:9/${n}`, eventTypes: ['order.*'] })).id);
    const first = await rea('endpoints', 'list', '--limit', '2', ...db);
    expect(first.out).toContain('http://127.0.0.1:9/2');
    expect(first.out).not.toContain('http://127.0.0.1:9/3');
    expect(first.out.trim().split('\n').at(-1)).toBe(`(more: --cursor ${ids[1]})`);
    const rest = await rea('endpoints', 'list', '--limit', '2', '--cursor', ids[1]!, '--json', ...db);
    expect(JSON.parse(rest.out)).toEqual({ items: [expect.objectContaining({ id: ids[2] })], nextCursor: null });
    expect(JSON.parse((await rea('endpoints', 'list', '--limit', '2', '--json', ...db)).out).nextCursor).toBe(ids[1]);
    // A full page with nothing after it ends without a hint: before, any full page printed one,
    // and following it gave 'no endpoints'.
    const last = await rea('endpoints', 'list', '--limit', '2', '--cursor', ids[0]!, ...db);
    expect(last.out).toContain('http://127.0.0.1:9/3');
    expect(last.out).not.toContain('(more');
    const all = await rea('endpoints', 'list', '--limit', '3', ...db);
    expect(all.out.match(/http:\/\/127\.0\.0\.1:9\/\d/g)).toHaveLength(3);
    expect(all.out).not.toContain('(more');
    const bad = await rea('endpoints', 'list', '--cursor', 'next', ...db);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--cursor');
  });

  it('list, update and disable never send control characters of a description or a disable reason to the terminal', async () => {
    const bus = await testBus(postgresTarget, events, quiet);
    const db = ['--database-url', PG_URL, '--schema', bus.schema];
    const ep = await (await import('../src/index.js')).createBus({ database: { postgres: PG_URL }, schema: bus.schema, events, webhooks: { allowPrivateNetworks: true } });
    onTestFinished(() => ep.stop());
    // Set through the API (or the panel), which take any storable text; read by an operator's CLI.
    const { id } = await ep.endpoints.create({ url: 'http://127.0.0.1:9/hook', eventTypes: ['order.created'], description: 'shop\x1b[2J\x1b]0;owned\x07' });
    await ep.endpoints.disable(id, { reason: 'moved\x1b[8mhidden\x1b[0m' });
    const listed = await rea('endpoints', 'list', ...db);
    expect(listed.out).toContain('shop·[2J·]0;owned·');
    expect(listed.out).toContain('moved·[8mhidden·[0m');
    const disabled = await rea('endpoints', 'disable', id, ...db);
    const updated = await rea('endpoints', 'update', id, '--events', 'order.created', ...db);
    expect(listed.out + disabled.out + updated.out).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    const json = await rea('endpoints', 'list', '--json', ...db);
    expect(JSON.parse(json.out).items[0]).toMatchObject({ description: 'shop\x1b[2J\x1b]0;owned\x07', disabledReason: 'moved\x1b[8mhidden\x1b[0m' });
    const enabled = await rea('endpoints', 'enable', id, ...db);
    expect(enabled.out).toContain('shop·[2J·]0;owned·');
    expect(enabled.out).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
  });
});

describe('endpoints CLI on a PGlite data directory', () => {
  it('migrate, add and list', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rea-cli-endpoints-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    expect((await rea('migrate', '--pglite', dir)).code).toBe(0);
    const added = await rea('endpoints', 'add', 'https://hooks.example.com/in', '--events', '*', '--json', '--pglite', dir);
    const created = JSON.parse(added.out) as { id: string; secret: string };
    expect(created.secret).toMatch(/^whsec_/);
    const listed = await rea('endpoints', 'list', '--pglite', dir);
    expect(listed.out).toBe(`${created.id}  enabled  https://hooks.example.com/in\n  events * · secret …${created.secret.slice(-5, -1)}\n  last success -`);
  });
});
