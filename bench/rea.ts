// rea under the harness, through its public API (src/index.ts): createBus, on, record, recordMany,
// start, stop. Loaded lazily so the harness still runs the peers and the physical limit while the
// bus is being written; figures for rea are then reported as skipped with the reason.
import type pg from 'pg';
import { compiledReaEntry } from './lib/compile.js';
import { adminPool, DATABASE_URL } from './lib/env.js';
import type { Producer, RunningWorker, System } from './lib/system.js';
import { uuidv7 } from '../src/core/uuid.js';

export const REA_TYPE = 'bench.noop';
const HANDLER = 'noop';
/**
 * relay.inlineMs for rea's workers in every figure: 50, or `--inline-ms=N` (run.ts passes it to
 * the worker children through the environment); RESULTS.md says which.
 */
export const reaInlineMs = (): number => Number(process.env.REA_BENCH_INLINE_MS ?? 50);
/** relay.batchSize for rea's workers in figures 1, 2 and 7: rea's default, or `--batch-size=N`. */
export const reaBatchSize = (): number | undefined =>
  process.env.REA_BENCH_BATCH_SIZE ? Number(process.env.REA_BENCH_BATCH_SIZE) : undefined;
const workerRelay = () => ({ inlineMs: reaInlineMs(), ...(reaBatchSize() === undefined ? {} : { batchSize: reaBatchSize() }) });

type Api = { createBus: (o: any) => any; defineEvents: (d: any) => any; z: typeof import('zod').z };
let api: Api | null | undefined;
let apiError = '';

/** Import rea's public entry point once; null (with the reason in apiError) until it exports a bus. */
export async function reaApi(): Promise<Api | null> {
  if (api !== undefined) return api;
  try {
    // The harness itself runs under tsx; its rea is the tsc build (see lib/compile.ts). The
    // compiled worker child, already plain JavaScript, imports the build next to it.
    const mod: any = import.meta.url.endsWith('.ts') ? await import(compiledReaEntry()) : await import('../src/index.js');
    if (typeof mod.createBus !== 'function' || typeof mod.defineEvents !== 'function') {
      apiError = 'src/index.ts does not export createBus and defineEvents yet';
      api = null;
    } else {
      api = { createBus: mod.createBus, defineEvents: mod.defineEvents, z: (await import('zod')).z };
    }
  } catch (err) {
    apiError = `src/index.ts cannot be loaded: ${(err as Error).message.split('\n')[0]}`;
    api = null;
  }
  return api;
}

export async function makeBus(schema: string, extra: Record<string, unknown> = {}): Promise<any> {
  const a = (await reaApi())!;
  const events = a.defineEvents({ [REA_TYPE]: a.z.object({ seq: a.z.number().int() }) });
  return a.createBus({ database: { postgres: DATABASE_URL }, events, schema, ...extra });
}

const q = (schema: string) => `"${schema}"`;

export const rea: System = {
  name: 'rea',

  async unavailable() {
    if (!(await reaApi())) return apiError;
    return null;
  },

  async install(schema) {
    const bus = await makeBus(schema);
    try {
      await bus.migrate();
    } finally {
      await bus.stop?.();
    }
  },

  async prefill(schema, n) {
    // Pre-recorded events, unfanned: the relay's fan-out is part of what figure 1 measures for rea.
    const bus = await makeBus(schema);
    try {
      for (let start = 0; start < n; start += 500) {
        const batch: { type: string; payload: { seq: number } }[] = [];
        for (let seq = start; seq < Math.min(n, start + 500); seq++) batch.push({ type: REA_TYPE, payload: { seq } });
        await bus.transaction((tx: unknown) => bus.recordMany(tx, batch));
      }
    } finally {
      await bus.stop?.();
    }
  },

  async startWorker(schema, concurrency, onJob): Promise<RunningWorker> {
    // Configured for throughput as the README advises: inline delivery (relay.inlineMs) on.
    const bus = await makeBus(schema, { worker: { concurrency }, relay: workerRelay() });
    bus.on(REA_TYPE, HANDLER, async (event: any) => {
      onJob(event.payload.seq);
    }, { concurrency });
    await bus.start();
    return {
      async stop() {
        await bus.stop();
      },
    };
  },

  async remaining(schema) {
    const { rows } = await adminPool().query(
      `select (select count(*) from ${q(schema)}.events where fanned_out_at is null and poisoned_at is null)
            + (select count(*) from ${q(schema)}.jobs where state in ('available', 'running', 'retryable')) as n`,
    );
    return Number(rows[0].n);
  },

  async completed(schema) {
    // A delivery is recorded either as a completed job row or, when the relay's round ran it
    // inline, as the handler's name in the event's delivered_inline (and then it has no job row).
    const { rows } = await adminPool().query(
      `select (select count(*) from ${q(schema)}.jobs where state = 'completed' and target = $1)
            + (select count(*) from ${q(schema)}.events where $1 = any (delivered_inline)) as n`,
      [HANDLER],
    );
    return Number(rows[0].n);
  },

  async producer(schema): Promise<Producer> {
    const bus = await makeBus(schema);
    return {
      async inTx(c: pg.Client, seq: number) {
        await bus.record(c, REA_TYPE, { seq });
      },
      async one(c: pg.Client, seq: number) {
        await c.query('BEGIN');
        await bus.record(c, REA_TYPE, { seq });
        await c.query('COMMIT');
      },
      async many(c: pg.Client, seqs: number[]) {
        await c.query('BEGIN');
        await bus.recordMany(c, seqs.map((seq) => ({ type: REA_TYPE, payload: { seq } })));
        await c.query('COMMIT');
      },
      rowByHand(seq: number) {
        // The columns and values record() writes for this event (no subject, trace or creator).
        return `insert into ${q(schema)}.events (id, type, subject, payload, trace_id, created_by, version)`
          + ` values ('${uuidv7()}'::uuid, '${REA_TYPE}', null, '{"seq":${seq}}'::jsonb, null, null, 1)`;
      },
      async close() {
        await bus.stop?.();
      },
    };
  },
};

/**
 * Commit→handler latency for rea goes through bus.transaction(), the path the design promises is
 * fast: rea sees its own commit and wakes the local relay at once. Returns a producer whose
 * `one` resolves right after that commit.
 */
export async function reaLatencyBus(schema: string, concurrency: number, onJob: (seq: number) => void) {
  const bus = await makeBus(schema, { worker: { concurrency }, relay: workerRelay() });
  bus.on(REA_TYPE, HANDLER, async (event: any) => {
    onJob(event.payload.seq);
  }, { concurrency });
  await bus.start();
  return {
    async one(seq: number) {
      await bus.transaction((tx: unknown) => bus.record(tx, REA_TYPE, { seq }));
    },
    async stop() {
      await bus.stop();
    },
  };
}

/**
 * Figure 4 through bus.transaction, the path rea recommends: the same order insert alone and
 * with a record(), both in rea's transaction helper, interleaved in chunks on `connections`
 * concurrent callers. Here the event row travels with COMMIT, so recording adds no round trip.
 */
export async function reaTxOverhead(schema: string, total: number, connections: number): Promise<{ alone: number; withRecord: number }> {
  const { createOrders, insertOrder } = await import('./physical.js');
  const { dropSchema } = await import('./lib/env.js');
  await dropSchema(schema); // a fresh schema, as for every other figure
  const bus = await makeBus(schema, { poolSize: connections, relay: { enabled: false }, worker: { enabled: false } });
  try {
    await bus.migrate();
    await createOrders(schema);
    let i = 0;
    const one = (withRecord: boolean) => bus.transaction(async (tx: any) => {
      const n = i++;
      await tx.query(insertOrder(schema), [`o-${n}`, n % 1000]);
      if (withRecord) await bus.record(tx, REA_TYPE, { seq: n });
    });
    const drive = async (count: number, withRecord: boolean) => {
      let left = count;
      const t0 = performance.now();
      await Promise.all(Array.from({ length: connections }, async () => {
        while (left-- > 0) await one(withRecord);
      }));
      return count / ((performance.now() - t0) / 1000);
    };
    await drive(200, true); // warm the pool and the statement cache
    const chunk = Math.max(400, Math.ceil(total / 4));
    const rounds = Math.ceil(total / chunk);
    let alone = 0;
    let withRecord = 0;
    for (let k = 0; k < rounds; k++) {
      alone += await drive(chunk, false);
      withRecord += await drive(chunk, true);
    }
    return { alone: alone / rounds, withRecord: withRecord / rounds };
  } finally {
    await bus.stop();
    await dropSchema(schema);
  }
}
