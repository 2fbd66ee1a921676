// The transaction object bus.transaction() hands to its callback: business writes go through
// tx.query, and record(tx, …) recognises it without any adapter.
import type { EventInsert, Queryable } from '../driver/types.js';

const REA_TX = Symbol.for('rea.transaction');

export interface Transaction extends Queryable {
  /** The driver's own handle (a pg PoolClient, a PGlite Transaction), for ORMs and raw access. */
  readonly raw: unknown;
}

export interface TransactionState {
  open: boolean;
  /**
   * Who writes `pending` with COMMIT (the bus's driver): another bus given this transaction
   * writes its events at once, into its own schema.
   */
  owner?: object;
  /**
   * Events recorded but not yet written. The driver writes them together with COMMIT (one round
   * trip less per transaction), or before the next tx.query, so the transaction always sees them.
   */
  pending?: EventInsert[];
  flush?: () => Promise<void>;
  /** Events recorded through this transaction: once it commits, the relay is told. */
  recorded?: number;
}

export function makeTransaction(q: Queryable, raw: unknown, state: TransactionState): Transaction {
  return {
    [REA_TX]: state,
    raw,
    query: async (sql: string, params?: unknown[]) => {
      if (!state.open) throw new Error('this rea transaction has already ended; use the tx only inside its callback');
      if (state.pending?.length) await state.flush!();
      return q.query(sql, params);
    },
  } as Transaction;
}

/** Queue events on a rea transaction of `owner` that defers them; false when they must be written at once. */
export function deferInto(tx: Transaction, rows: EventInsert[], owner: object): boolean {
  const state = (tx as unknown as Record<symbol, TransactionState>)[REA_TX]!;
  if (!state.pending || state.owner !== owner) return false;
  state.pending.push(...rows);
  return true;
}

/** Count events recorded through a rea transaction (see TransactionState.recorded). */
export function noteRecorded(tx: Transaction, events: number): void {
  const state = (tx as unknown as Record<symbol, TransactionState>)[REA_TX]!;
  state.recorded = (state.recorded ?? 0) + events;
}

export function isReaTransaction(tx: unknown): tx is Transaction {
  return typeof tx === 'object' && tx !== null && REA_TX in tx;
}

export function reaTransactionOpen(tx: Transaction): boolean {
  return (tx as unknown as Record<symbol, { open: boolean }>)[REA_TX]!.open;
}
