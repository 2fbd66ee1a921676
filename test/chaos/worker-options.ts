// What both chaos buses share: the database and schema the runner gives each worker process, and
// the options a fault-injection run wants (inline delivery on, short leases, a quick rescuer).
export const url = process.env.CHAOS_DATABASE_URL!;
export const schema = process.env.CHAOS_SCHEMA!;
/** PostgreSQL without the runner's proxy: where the lean handler's effects go, as to another system that the failover does not touch. */
export const effectsUrl = process.env.CHAOS_EFFECTS_URL!;

export const workerOptions = {
  // A short deadline (database.queryTimeoutMs), so the run's failover costs seconds, not 30 s.
  // CHAOS_QUERY_TIMEOUT_MS=0 runs without one, to see the failover fail the run.
  database: { postgres: url, poolSize: 4, queryTimeoutMs: Number(process.env.CHAOS_QUERY_TIMEOUT_MS ?? 3000) },
  schema,
  // Inline delivery on, so the no-loss claim covers it: plain handlers run in relay rounds.
  relay: { inlineMs: 50 },
  worker: { concurrency: 8, leaseMarginMs: 1000 },
  leader: { ttlMs: 3000, renewMs: 1000 },
  rescuer: { intervalMs: 500 },
};
