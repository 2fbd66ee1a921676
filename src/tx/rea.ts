// The transaction object bus.transaction() hands to its callback: business writes go through
// tx.query, and record(tx, …) recognises it without any adapter.
import { TransactionError } from '../core/errors.js';
import type { EventInsert, Queryable } from '../driver/types.js';

/**
 * A statement that begins or ends a transaction (ROLLBACK TO a savepoint excepted), after any
 * leading whitespace and comments. Through tx.query it would end rea's transaction half way: a
 * COMMIT stores what came before it and leaves the rest to run outside any transaction.
 */
const TRANSACTION_CONTROL = /^(?:\s+|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)*(begin|start\s+transaction|commit|end|abort|prepare\s+transaction|rollback(?!\s+(?:work\s+|transaction\s+)?to\b))\b/i;

/** Throw TransactionError('control') for a statement tx.query must not send (see TRANSACTION_CONTROL). */
function refuseTransactionControl(sql: string): void {
  const m = TRANSACTION_CONTROL.exec(sql);
  if (!m) return;
  const statement = m[1]!.replace(/\s+/g, ' ').toUpperCase();
  throw new TransactionError('control', `tx.query('${statement} …') refused: rea begins and ends this transaction itself (bus.transaction() and a transactional handler's ctx.tx commit when the callback returns, and roll back when it throws); to undo part of it, use a savepoint (SAVEPOINT s … ROLLBACK TO SAVEPOINT s)`);
}

const REA_TX = Symbol.for('rea.transaction');
const REA_RAW = Symbol('rea.transaction.raw');

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
   * Once the caller reads tx.raw, none wait any more (see makeTransaction).
   */
  pending?: EventInsert[];
  flush?: (rows: EventInsert[]) => Promise<void>;
  /** The write of the events that waited when tx.raw was read; awaited before the next tx.query and before COMMIT. */
  flushing?: Promise<void>;
  /** Events recorded through this transaction: once it commits, the relay is told. */
  recorded?: number;
}

export function makeTransaction(q: Queryable, raw: unknown, state: TransactionState): Transaction {
  return {
    [REA_TX]: state,
    [REA_RAW]: raw,
    // Statements sent on the raw handle (an ORM's SAVEPOINT / ROLLBACK TO, a write) do not pass
    // through tx.query, so an event waiting for COMMIT would be written after them: outside the
    // savepoint it was recorded in, stored although that savepoint was rolled back. From the
    // first read of raw on, events are written as they are recorded; those already waiting are
    // sent now, ahead of anything the caller sends on it (a pg client runs its queries in order).
    get raw() {
      if (state.pending) {
        const rows = state.pending;
        state.pending = undefined;
        if (rows.length > 0 && state.open) {
          state.flushing = state.flush!(rows);
          state.flushing.catch(() => {}); // awaited (and so reported) before the next tx.query and COMMIT
        }
      }
      return raw;
    },
    query: async (sql: string, params?: unknown[]) => {
      if (!state.open) throw new TransactionError('closed', 'tx.query() after its transaction ended: use the tx of bus.transaction() (and a transactional handler\'s ctx.tx) only inside its callback, before the promise it returns settles; this statement was not sent');
      if (typeof sql === 'string') refuseTransactionControl(sql);
      if (state.flushing) await state.flushing;
      if (state.pending?.length) await state.flush!(state.pending.splice(0));
      return q.query(sql, params);
    },
  } as Transaction;
}

/** The driver's handle of a rea transaction, without reading tx.raw (which stops deferring). */
export function rawHandle(tx: Transaction): unknown {
  return (tx as unknown as Record<symbol, unknown>)[REA_RAW];
}

/** Queue events on a rea transaction of `owner` that defers them; false when they must be written at once. */
export function deferInto(tx: Transaction, rows: EventInsert[], owner: object): boolean {
  const state = (tx as unknown as Record<symbol, TransactionState>)[REA_TX]!;
  if (!state.pending || state.owner !== owner) return false;
  // Not push(...rows): spread arguments overflow the stack past ~120,000 (a bulk recordMany).
  for (const row of rows) state.pending.push(row);
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
