// What both chaos buses share: the database and schema the runner gives each worker process, and
// the options a fault-injection run wants (inline delivery on, short leases, a quick rescuer).
export const url = process.env.CHAOS_DATABASE_URL!;
export const schema = process.env.CHAOS_SCHEMA!;

export const workerOptions = {
  // A short deadline (database.queryTimeoutMs), so the run's failover costs seconds, not 30 s.
  database: { postgres: url, poolSize: 4, queryTimeoutMs: 3000 },
  schema,
  // Inline delivery on, so the no-loss claim covers it: plain handlers run in relay rounds.
  relay: { inlineMs: 50 },
  worker: { concurrency: 8, leaseMarginMs: 1000 },
  leader: { ttlMs: 3000, renewMs: 1000 },
  rescuer: { intervalMs: 500 },
};
