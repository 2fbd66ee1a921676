// Adapter for node-postgres handles: a Client or PoolClient inside an open transaction.
// A Pool is refused: each query could run on another connection and commit on its own.
import { UnsupportedTransactionError } from '../core/errors.js';
import type { Queryable } from '../driver/types.js';
import { refuseForeignHandle } from './handles.js';
import { isReaTransaction, reaTransactionOpen } from './rea.js';

interface PgLike {
  query: (...args: any[]) => Promise<any>;
  getTransactionStatus?: () => string | null;
}

export function unwrapPostgresTransaction(tx: unknown, caller: string): Queryable {
  refuseForeignHandle(tx, 'postgres', "a pg Client or PoolClient after BEGIN, or the tx of this bus's bus.transaction()", caller);
  if (isReaTransaction(tx)) {
    if (!reaTransactionOpen(tx)) throw new UnsupportedTransactionError(`${caller} was given a rea transaction that has already ended`);
    return tx;
  }
  const t = tx as PgLike & Record<string, unknown>;
  if (!t || typeof t.query !== 'function') {
    throw new UnsupportedTransactionError(`${caller} needs a transaction: a pg Client or PoolClient after BEGIN, or the tx of bus.transaction()`);
  }
  if ('totalCount' in t && 'idleCount' in t && typeof t.connect === 'function') {
    throw new UnsupportedTransactionError(
      `${caller} was given a pg.Pool; a pool runs each query on any connection and commits it on its own. ` +
        'Pass the client of your transaction (const c = await pool.connect(); await c.query("BEGIN") …) or use bus.transaction()',
    );
  }
  if (typeof t.getTransactionStatus === 'function') {
    const status = t.getTransactionStatus();
    if (status === 'I') {
      throw new UnsupportedTransactionError(`${caller} was given a pg client that is not inside a transaction (run BEGIN first, or use bus.transaction())`);
    }
    if (status === 'E') {
      throw new UnsupportedTransactionError(`${caller} was given a pg client whose transaction has failed; roll it back`);
    }
  }
  return t as unknown as Queryable;
}
