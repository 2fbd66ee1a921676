// Adapter for PGlite: a Transaction from db.transaction(). The PGlite instance itself is refused,
// since each of its queries commits on its own.
import { UnsupportedTransactionError } from '../core/errors.js';
import type { Queryable } from '../driver/types.js';
import { refuseForeignHandle } from './handles.js';
import { isReaTransaction, reaTransactionOpen } from './rea.js';

const EXPECTED = 'a PGlite Transaction from db.transaction() on the database the bus uses, or the tx of this bus\'s bus.transaction()';

export function unwrapPGliteTransaction(tx: unknown, caller: string): Queryable {
  refuseForeignHandle(tx, 'pglite', EXPECTED, caller);
  if (isReaTransaction(tx)) {
    if (!reaTransactionOpen(tx)) throw new UnsupportedTransactionError(`${caller} was given a rea transaction that has already ended`);
    return tx;
  }
  const t = tx as Record<string, unknown> | null;
  if (!t || typeof t.query !== 'function') {
    throw new UnsupportedTransactionError(`${caller} needs a transaction: a PGlite Transaction from db.transaction(), or the tx of bus.transaction()`);
  }
  if (typeof t.transaction === 'function' && typeof t.waitReady !== 'undefined') {
    throw new UnsupportedTransactionError(
      `${caller} was given the PGlite database itself; each of its queries commits on its own. Pass the tx of db.transaction(async (tx) => …) or use bus.transaction()`,
    );
  }
  if (t.closed === true) throw new UnsupportedTransactionError(`${caller} was given a PGlite transaction that has already ended`);
  return t as unknown as Queryable;
}
