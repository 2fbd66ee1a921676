// What kind of database handle a caller passed to record(): each adapter accepts its own kind
// and names a foreign one, which would otherwise be written into as if it were its own.
import { UnsupportedTransactionError } from '../core/errors.js';
import { isReaTransaction, rawHandle } from './rea.js';

export type HandleKind = 'pg-pool' | 'pg-client' | 'pglite' | 'pglite-tx' | 'other';

export function handleKind(h: unknown): HandleKind {
  if (typeof h !== 'object' || h === null) return 'other';
  const t = h as Record<string, unknown>;
  if ('totalCount' in t && 'idleCount' in t && typeof t.connect === 'function') return 'pg-pool';
  if (typeof t.getTransactionStatus === 'function' || 'connectionParameters' in t) return 'pg-client';
  if (typeof t.transaction === 'function' && 'waitReady' in t) return 'pglite';
  if (typeof t.rollback === 'function' && typeof t.exec === 'function' && 'closed' in t) return 'pglite-tx';
  return 'other';
}

const DATABASE = { postgres: 'PostgreSQL', pglite: 'PGlite' } as const;
const HANDLE: Record<Exclude<HandleKind, 'other'>, string> = {
  'pg-pool': 'a pg.Pool', 'pg-client': 'a pg client', pglite: 'the PGlite database', 'pglite-tx': 'a PGlite transaction',
};
const FOREIGN: Record<keyof typeof DATABASE, readonly HandleKind[]> = { postgres: ['pglite', 'pglite-tx'], pglite: ['pg-pool', 'pg-client'] };

/**
 * Throw unless `tx` (or the raw handle of a rea transaction) belongs to the bus's own kind of
 * database. `caller` is the function the user gave it to ('record()', 'expectRecorded()').
 */
export function refuseForeignHandle(tx: unknown, own: keyof typeof DATABASE, expected: string, caller: string): void {
  const rea = isReaTransaction(tx);
  const kind = handleKind(rea ? rawHandle(tx) : tx);
  if (!FOREIGN[own].includes(kind)) return;
  const other = own === 'postgres' ? 'pglite' : 'postgres';
  const given = rea ? `a rea transaction of a ${DATABASE[other]} bus` : HANDLE[kind as Exclude<HandleKind, 'other'>];
  throw new UnsupportedTransactionError(`this bus stores its events in ${DATABASE[own]}, and ${caller} was given ${given}; pass ${expected}`);
}
