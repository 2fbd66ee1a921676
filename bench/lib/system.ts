// What the harness needs from each system under test. Peers and rea implement the same shape, so
// run.ts can interleave them without knowing which is which.
import type pg from 'pg';

export type SystemName = 'rea' | 'graphile-worker' | 'pg-boss' | PrototypeName;

/** Figure 1's prototypes (experiments/lean-rounds.ts): minimal workers, not rea; run with --prototypes. */
export const PROTOTYPE_NAMES = ['proto-rowclaim-tx', 'proto-rowclaim', 'proto-cursor', 'proto-lanes'] as const;
export type PrototypeName = (typeof PROTOTYPE_NAMES)[number];

/** A running worker: the handler calls onJob(seq) when it starts a job; stop() shuts it down. */
export interface RunningWorker {
  stop(): Promise<void>;
}

export interface Producer {
  /** Enqueue one job on a transaction the caller has already opened (the outbox form). */
  inTx(client: pg.Client, seq: number): Promise<void>;
  /** One job per transaction on this connection: BEGIN, enqueue, COMMIT. Resolves after COMMIT. */
  one(client: pg.Client, seq: number): Promise<void>;
  /** One batch through the system's bulk API, in one transaction. */
  many(client: pg.Client, seqs: number[]): Promise<void>;
  /**
   * The row one enqueue writes, as one insert statement with literal values, for figure 4's floor:
   * what that row costs PostgreSQL written by hand, with none of the system's code. Optional.
   */
  rowByHand?(seq: number): string;
  close(): Promise<void>;
}

export interface System {
  name: SystemName;
  /** null when usable; otherwise why not (rea before its bus lands). */
  unavailable(): Promise<string | null>;
  /** Create `schema` and everything the system needs in it (migrations, queues). */
  install(schema: string): Promise<void>;
  /** Bulk-enqueue jobs with payload { seq } for every seq in [0, n). Not measured. */
  prefill(schema: string, n: number): Promise<void>;
  /** Start a worker that runs a no-op handler with `concurrency` jobs at once. */
  startWorker(schema: string, concurrency: number, onJob: (seq: number) => void): Promise<RunningWorker>;
  /** Jobs not yet finished according to the database (pending, running or not yet fanned out). */
  remaining(schema: string): Promise<number>;
  /** Completed jobs according to the database, where the system keeps them; null when it deletes them. */
  completed(schema: string): Promise<number | null>;
  producer(schema: string): Promise<Producer>;
}
