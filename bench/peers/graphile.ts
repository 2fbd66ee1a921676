// graphile-worker 0.18 under the harness, configured the way its performance page advises for
// throughput: a local queue that locks jobs in batches and batched completion/failure writes.
import { makeWorkerUtils, run, runMigrations, Logger, type Runner } from 'graphile-worker';
import type pg from 'pg';
import { adminPool, DATABASE_URL } from '../lib/env.js';
import type { Producer, RunningWorker, System } from '../lib/system.js';

const TASK = 'noop';

// Worker logs every job at info level; printing 20,000 lines would measure the console, not the queue.
const quiet = new Logger(() => (level: string, message: string) => {
  if (level === 'error') console.error(`[graphile-worker] ${message}`);
});

/**
 * The throughput settings, from https://worker.graphile.org/docs/performance ("Batching"):
 * localQueue.size (their benchmark uses 500), completeJobBatchDelay/failJobBatchDelay 0, and a
 * pool of concurrency + 2 as the maxPoolSize docs recommend. useNodeTime saves a round trip for
 * `now()`; the database is on the same host, so the clocks agree.
 */
export function graphileOptions(schema: string, concurrency: number) {
  return {
    connectionString: DATABASE_URL,
    schema,
    concurrency,
    maxPoolSize: concurrency + 2,
    pollInterval: 2000,
    useNodeTime: true,
    noHandleSignals: true,
    logger: quiet,
    preset: {
      worker: {
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
  };
}

const q = (schema: string) => `"${schema}"`;

export const graphile: System = {
  name: 'graphile-worker',

  async unavailable() {
    return null;
  },

  async install(schema) {
    await runMigrations({ connectionString: DATABASE_URL, schema, logger: quiet });
  },

  async prefill(schema, n) {
    const utils = await makeWorkerUtils({ connectionString: DATABASE_URL, schema, logger: quiet });
    try {
      // addJobs is graphile's bulk API (one add_jobs call per chunk).
      for (let start = 0; start < n; start += 1000) {
        const specs = [];
        for (let seq = start; seq < Math.min(n, start + 1000); seq++) specs.push({ identifier: TASK, payload: { seq } });
        await utils.addJobs(specs);
      }
    } finally {
      await utils.release();
    }
  },

  async startWorker(schema, concurrency, onJob): Promise<RunningWorker> {
    const runner: Runner = await run({
      ...graphileOptions(schema, concurrency),
      taskList: {
        [TASK]: async (payload) => {
          onJob((payload as { seq: number }).seq);
        },
      },
    });
    return {
      async stop() {
        await runner.stop();
      },
    };
  },

  async remaining(schema) {
    // Completed jobs are deleted; anything left is queued, locked or awaiting its batched completion.
    const { rows } = await adminPool().query(`select count(*)::int as n from ${q(schema)}._private_jobs`);
    return rows[0].n;
  },

  async completed() {
    return null;
  },

  async producer(schema): Promise<Producer> {
    // The caller's-transaction form: add_job/add_jobs are graphile's documented SQL API, so the
    // enqueue commits with the business transaction exactly as an outbox would need.
    const one = `select 1 from ${q(schema)}.add_job($1, json_build_object('seq', $2::int))`;
    const many = `select 1 from ${q(schema)}.add_jobs(array(
      select row($1, json_build_object('seq', s), null, null, null, null, null, null)::${q(schema)}.job_spec
      from unnest($2::int[]) s))`;
    return {
      async inTx(c: pg.Client, seq: number) {
        await c.query(one, [TASK, seq]);
      },
      async one(c: pg.Client, seq: number) {
        await c.query('BEGIN');
        await c.query(one, [TASK, seq]);
        await c.query('COMMIT');
      },
      async many(c: pg.Client, seqs: number[]) {
        await c.query('BEGIN');
        await c.query(many, [TASK, seqs]);
        await c.query('COMMIT');
      },
      async close() {},
    };
  },
};

