// Fault injection in the real database (for tests that need an event the relay cannot fan out, or a
// lock held) and in front of it (a proxy that stops forwarding, one that loses a COMMIT's reply).
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { expect, onTestFinished } from 'vitest';
import type { Bus, EventSchemas } from '../../src/index.js';
import { PG_URL, type Target } from './db.js';
import { deferred } from './signals.js';

/**
 * Make inserting any job for an event whose payload has orderNo = `orderNo` fail, with SQLSTATE
 * `errcode` (default P0001, a plain raise; '57014' is what a statement_timeout raises); returns the undo.
 */
export async function rejectJobsFor(target: Target, schema: string, orderNo = 'BOOM', errcode = 'P0001'): Promise<() => Promise<void>> {
  const s = `"${schema}"`;
  const literal = `'${orderNo.replace(/'/g, "''")}'`;
  if (!/^[0-9A-Z]{5}$/.test(errcode)) throw new Error(`not a SQLSTATE: ${errcode}`);
  await target.query(`
    create function ${s}.reject_order() returns trigger language plpgsql as $$
    begin
      if exists (select 1 from ${s}.events where id = new.event_id and payload->>'orderNo' = ${literal}) then
        raise exception 'downstream constraint rejects %', ${literal} using errcode = '${errcode}';
      end if;
      return new;
    end $$;
    create trigger reject_order before insert on ${s}.jobs for each row execute function ${s}.reject_order();`);
  return async () => {
    await target.query(`drop trigger reject_order on ${s}.jobs`);
  };
}

/**
 * Hold a SHARE lock on `"schema".jobs` from another connection: start(), then wait until a
 * statement whose text contains `statementLike` and names `"schema".<names>` waits on the lock,
 * keep it `holdMs` longer (the time passing is the point: the waiting statement's now(), the
 * lease's start, is already fixed), and release it. Returns start()'s value.
 */
export async function holdJobsLockWhile<T>(
  target: Target,
  schema: string,
  opts: { statementLike: string; names: 'events' | 'jobs'; holdMs: number },
  start: () => T | Promise<T>,
): Promise<T> {
  const locker = new pg.Client({ connectionString: PG_URL });
  await locker.connect();
  try {
    await locker.query('begin');
    await locker.query(`lock table "${schema}".jobs in share mode`);
    const started = await start();
    await expect.poll(async () => (await target.query(
      `select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and strpos(query, $1) > 0 and strpos(query, $2) > 0`,
      [opts.statementLike, `"${schema}".${opts.names}`],
    ))[0].n, { timeout: 5000 }).toBeGreaterThan(0);
    await locker.query(`select pg_sleep(${opts.holdMs / 1000})`);
    await locker.query('commit');
    return started;
  } finally {
    await locker.query('rollback').catch(() => {});
    await locker.end();
  }
}

export interface StallingProxy {
  /** PG_URL, through the proxy. */
  url: string;
  /** Stop forwarding either way: the server, as its clients see it, stops answering. */
  stall(): void;
  /** Forward again, what was held first: a network stall that ends, a paused server that goes on. */
  resume(): void;
  /**
   * The connections the stall held stay silent for ever (neither data nor a close), new ones go
   * through: a failover, or a NAT entry dropped mid-stall, with TCP not yet given up.
   */
  recoverForNewConnectionsOnly(): void;
  /**
   * Stall, and from now on a side that closes is not told to the other: a host that froze or lost
   * its network, whose server connections stay open (the server hears neither data nor a close).
   */
  partition(): void;
}

/** A TCP proxy in front of PostgreSQL that can stop forwarding; closed when the test ends. */
export async function stallingProxy(): Promise<StallingProxy> {
  const upstream = new URL(PG_URL);
  let stalled = false;
  let partitioned = false;
  /** What the connections caught by the stall send, waiting to go on. */
  const held: { to: Socket; data: Buffer }[] = [];
  const caught = new Set<Socket>();
  const dead = new Set<Socket>();
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const server = connect(Number(upstream.port || 5432), upstream.hostname);
    const pair = [client, server];
    for (const s of pair) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        if (!partitioned) for (const t of pair) t.destroy();
      });
    }
    const forward = (from: Socket, to: Socket) => from.on('data', (data: Buffer) => {
      if (dead.has(from)) return;
      if (stalled) {
        caught.add(from);
        held.push({ to, data });
      } else to.write(data);
    });
    forward(client, server);
    forward(server, client);
    if (stalled) for (const s of pair) caught.add(s);
  });
  const url = await listenUntilTestEnds(server, sockets);
  return {
    url,
    stall: () => {
      stalled = true;
      for (const s of sockets) caught.add(s);
    },
    resume: () => {
      stalled = false;
      for (const { to, data } of held.splice(0)) to.write(data);
      caught.clear();
    },
    partition: () => {
      stalled = true;
      partitioned = true;
      for (const s of sockets) caught.add(s);
    },
    recoverForNewConnectionsOnly: () => {
      stalled = false;
      for (const s of caught) dead.add(s);
      caught.clear();
      held.splice(0);
    },
  };
}

export interface ReplyLosingProxy {
  /** PG_URL, through the proxy. */
  url: string;
  /**
   * The connection that next sends a message containing `marker` (a statement of a transaction,
   * `select 'marker'`) has its next COMMIT go through to the server, and every reply from then
   * on lost: the commit happens, and the client waits for an answer that never comes.
   */
  loseCommitReplyAfter(marker: string): void;
}

/** A TCP proxy in front of PostgreSQL that can lose a COMMIT's reply; closed when the test ends. */
export async function replyLosingProxy(): Promise<ReplyLosingProxy> {
  const upstream = new URL(PG_URL);
  let marker: string | undefined;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const server = connect(Number(upstream.port || 5432), upstream.hostname);
    for (const s of [client, server]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        server.destroy();
        sockets.delete(s);
      });
    }
    let armed = false;
    let silent = false;
    client.on('data', (data: Buffer) => {
      const text = data.toString('latin1');
      if (marker !== undefined && text.includes(marker)) {
        marker = undefined;
        armed = true;
      } else if (armed && /\bcommit\b/i.test(text)) {
        armed = false;
        silent = true;
      }
      server.write(data);
    });
    server.on('data', (data: Buffer) => {
      if (!silent) client.write(data);
    });
  });
  const url = await listenUntilTestEnds(server, sockets);
  return { url, loseCommitReplyAfter: (m) => void (marker = m) };
}

/** Start a proxy on a free local port; PG_URL through it. The test's end closes it and its connections. */
async function listenUntilTestEnds(server: Server, sockets: Set<Socket>): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(PG_URL);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);
  onTestFinished(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return url.toString();
}

/**
 * Hold the worker's next claim on its way to the database (a slow network, a loaded machine),
 * after it counted its room; the statement itself is the real one. hold() arms it; `sent`
 * resolves once a claim is held; letGo() sends it; `claimed` has the ids each held claim took.
 */
export function holdNextClaim<S extends EventSchemas>(bus: Bus<S>) {
  const executor = bus.driver.executor;
  const claim = executor.jobClaim.bind(executor);
  const sent = deferred();
  const letGo = deferred();
  let armed = false;
  const claimed: string[][] = [];
  executor.jobClaim = async (args) => {
    if (!armed) return claim(args);
    armed = false;
    sent.resolve();
    await letGo.promise;
    const jobs = await claim(args);
    claimed.push(jobs.map((j) => j.id));
    return jobs;
  };
  return { hold: () => void (armed = true), sent: sent.promise, letGo: () => letGo.resolve(), claimed };
}
