// pg-boss 12 under the harness. Throughput settings from its worker docs: batchSize 50 per fetch,
// keep fetching while batches come back full (burstWhenBatchFull), LISTEN/NOTIFY wake-ups on the
// queue so an idle worker does not wait out its polling interval, the shortest allowed poll.
import { PgBoss } from 'pg-boss';
import type pg from 'pg';
import { adminPool, DATABASE_URL } from '../lib/env.js';
import type { Producer, RunningWorker, System } from '../lib/system.js';

const QUEUE = 'noop';
export const PGBOSS_BATCH = 50;

function boss(schema: string, max: number): PgBoss {
  const b = new PgBoss({
    connectionString: DATABASE_URL,
    schema,
    max,
    useListenNotify: true,
    // No cron in this benchmark; its timers would only add noise.
    schedule: false,
    application_name: 'rea-bench-pgboss',
  });
  b.on('error', (err: unknown) => console.error('[pg-boss]', err));
  return b;
}

/** pg-boss's adapter shape for running its statements on the caller's transaction client. */
const onClient = (c: pg.Client) => ({ executeSql: (text: string, values?: unknown[]) => c.query(text, values as unknown[]) });

const q = (schema: string) => `"${schema}"`;

export const pgboss: System = {
  name: 'pg-boss',

  async unavailable() {
    return null;
  },

  async install(schema) {
    const b = boss(schema, 2);
    await b.start();
    // v12: a queue must exist before send/insert; notify makes inserts wake listening workers.
    await b.createQueue(QUEUE, { notify: true });
    await b.stop({ graceful: false });
  },

  async prefill(schema, n) {
    const b = boss(schema, 2);
    await b.start();
    try {
      // insert() is pg-boss's bulk API.
      for (let start = 0; start < n; start += 1000) {
        const jobs = [];
        for (let seq = start; seq < Math.min(n, start + 1000); seq++) jobs.push({ data: { seq } });
        await b.insert(QUEUE, jobs);
      }
    } finally {
      await b.stop({ graceful: false });
    }
  },

  async startWorker(schema, concurrency, onJob): Promise<RunningWorker> {
    // "Concurrency 8" maps to 8 local workers, each fetching up to 50 jobs a round trip.
    const b = boss(schema, concurrency + 2);
    await b.start();
    await b.work<{ seq: number }>(
      QUEUE,
      { batchSize: PGBOSS_BATCH, localConcurrency: concurrency, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true },
      async (jobs) => {
        for (const j of jobs) onJob(j.data.seq);
      },
    );
    return {
      async stop() {
        await b.stop({ graceful: true, timeout: 5000 });
      },
    };
  },

  async remaining(schema) {
    const { rows } = await adminPool().query(
      `select count(*)::int as n from ${q(schema)}.job where name = $1 and state <> 'completed'`,
      [QUEUE],
    );
    return rows[0].n;
  },

  async completed(schema) {
    const { rows } = await adminPool().query(
      `select count(*)::int as n from ${q(schema)}.job where name = $1 and state = 'completed'`,
      [QUEUE],
    );
    return rows[0].n;
  },

  async producer(schema): Promise<Producer> {
    // A non-supervising instance only for its send/insert SQL; the statements run on our client.
    const b = new PgBoss({ connectionString: DATABASE_URL, schema, max: 2, schedule: false, supervise: false, migrate: false });
    b.on('error', (err: unknown) => console.error('[pg-boss producer]', err));
    await b.start();
    return {
      async inTx(c: pg.Client, seq: number) {
        await b.send(QUEUE, { seq }, { db: onClient(c) });
      },
      async one(c: pg.Client, seq: number) {
        await c.query('BEGIN');
        await b.send(QUEUE, { seq }, { db: onClient(c) });
        await c.query('COMMIT');
      },
      async many(c: pg.Client, seqs: number[]) {
        await c.query('BEGIN');
        await b.insert(QUEUE, seqs.map((seq) => ({ data: { seq } })), { db: onClient(c) });
        await c.query('COMMIT');
      },
      async close() {
        await b.stop({ graceful: false });
      },
    };
  },
};
