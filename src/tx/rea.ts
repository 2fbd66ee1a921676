// The transaction object bus.transaction() hands to its callback: business writes go through
// tx.query, and record(tx, …) recognises it without any adapter.
import type { Queryable } from '../driver/types.js';

const REA_TX = Symbol.for('rea.transaction');

export interface Transaction extends Queryable {
  /** The driver's own handle (a pg PoolClient, a PGlite Transaction), for ORMs and raw access. */
  readonly raw: unknown;
}

export function makeTransaction(q: Queryable, raw: unknown, state: { open: boolean }): Transaction {
  return {
    [REA_TX]: state,
    raw,
    query: (sql: string, params?: unknown[]) => {
      if (!state.open) throw new Error('this rea transaction has already ended; use the tx only inside its callback');
      return q.query(sql, params);
    },
  } as Transaction;
}

export function isReaTransaction(tx: unknown): tx is Transaction {
  return typeof tx === 'object' && tx !== null && REA_TX in tx;
}

export function reaTransactionOpen(tx: Transaction): boolean {
  return (tx as unknown as Record<symbol, { open: boolean }>)[REA_TX]!.open;
}
