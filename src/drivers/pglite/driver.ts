// The embedded driver: PostgreSQL compiled to WASM, in-process. It reuses the PostgreSQL SQL.
// PGlite is one connection, so rea's transactions and the application's queue behind each other.
import type { Driver, DriverCapabilities, MigrationStatus, Queryable, TransactionOptions } from '../../driver/types.js';
import { unwrapPGliteTransaction } from '../../tx/pglite.js';
import { ABORTED_TRANSACTION, TransactionError } from '../../core/errors.js';
import { checkMigrated, explainPostgresError, isTransientPostgresError, migrationStatus, quoteSchema, reaStatementFailed, runMigrations } from '../postgres/common.js';
import { PostgresExecutor } from '../postgres/executor.js';
import { PostgresWebhookExecutor } from '../postgres/executor-webhooks.js';
import { PostgresAdminExecutor } from '../postgres/executor-admin.js';
import { PostgresOperationsExecutor } from '../postgres/executor-operations.js';
import { postgresStatements } from '../postgres/sql.js';
import type { PGliteDatabase } from './database.js';
import { lockDataDir, pgliteDirOnDisk, type DataDirLock } from './lock.js';

/**
 * PGlite's module, imported when a driver opens a database of its own, not with rea: it took
 * ~50 ms and ~6 MB of every process that imported rea, those on PostgreSQL included.
 */
const loadPGlite = async () => (await import('@electric-sql/pglite')).PGlite;

/** What PGlite throws when its COMMIT was answered with ROLLBACK (the transaction had aborted). */
const PGLITE_ROLLED_BACK = 'Transaction was rolled back instead of committed';

export interface PGliteDriverOptions {
  /**
   * A data directory (created if missing; locked while open, see lock.ts), 'memory://' for
   * in-memory, or a PGlite instance the application owns.
   */
  database: string | PGliteDatabase;
  schema: string;
}

export class PGliteDriver implements Driver {
  readonly capabilities: DriverCapabilities = { listenNotify: true, skipLocked: true, concurrentTransactions: false, inlineDelivery: false, autovacuumDaemon: false, deferredRecord: false, dialect: 'pglite' };
  readonly schema: string;
  readonly executor: PostgresExecutor;
  readonly admin: PostgresAdminExecutor;
  readonly webhooks: PostgresWebhookExecutor;
  readonly operations: PostgresOperationsExecutor;
  /** The database once open (at once for one the application owns). */
  private db: PGliteDatabase | undefined;
  /** The database, once PGlite's module is loaded and the instance made; rejects as that failed. */
  private readonly ready: Promise<PGliteDatabase>;
  private readonly ownsDb: boolean;
  /** The data directory's lock, while this driver holds one on disk. */
  private lock: DataDirLock | undefined;
  private readonly sql: ReturnType<typeof postgresStatements>;
  /** The database, for error messages. */
  private readonly where: string;

  constructor(options: PGliteDriverOptions) {
    this.schema = options.schema;
    this.sql = postgresStatements(quoteSchema(options.schema));
    this.where = typeof options.database === 'string' ? `PGlite at ${options.database}` : 'PGlite';
    if (typeof options.database === 'string') {
      // Before PGlite opens the files: a second opener is refused here, having touched nothing.
      const dir = pgliteDirOnDisk(options.database);
      this.lock = dir === null ? undefined : lockDataDir(dir);
      const database = options.database;
      this.ready = loadPGlite().then((PGlite) => (this.db = new PGlite(database)));
      // Opening failed: the directory is free again (the error reaches the first call that needs the database).
      this.ready.catch(() => this.releaseLock());
      this.ownsDb = true;
    } else {
      this.db = options.database;
      this.ready = Promise.resolve(options.database);
      this.ownsDb = false;
    }
    const pool: Queryable = { query: async (text, params) => (this.db ?? (await this.ready)).query(text, params) as never };
    this.executor = new PostgresExecutor(pool, this.sql);
    this.admin = new PostgresAdminExecutor(pool, quoteSchema(options.schema));
    this.webhooks = new PostgresWebhookExecutor(pool, quoteSchema(options.schema));
    this.operations = new PostgresOperationsExecutor(pool, options.schema, quoteSchema(options.schema), (fn) => this.transaction(fn));
  }

  /**
   * Once only: a lock released when opening failed is no longer this driver's, and the next bus
   * of this process to open the directory holds one under the same path.
   */
  private releaseLock(): void {
    const lock = this.lock;
    this.lock = undefined;
    lock?.release();
  }

  /** The database, once open. */
  private open(): Promise<PGliteDatabase> {
    return this.db ? Promise.resolve(this.db) : this.ready;
  }

  async migrate(): Promise<{ applied: number[]; newer: number[] }> {
    return (await this.open()).transaction((tx) => runMigrations(tx as unknown as Queryable, (text) => tx.exec(text), this.schema, this.where));
  }

  async checkMigrated(): Promise<{ newer: number[] }> {
    return checkMigrated((await this.open()) as unknown as Queryable, this.schema, this.where);
  }

  async migrationStatus(): Promise<MigrationStatus> {
    return migrationStatus((await this.open()) as unknown as Queryable, this.schema, this.where);
  }

  async transaction<T>(fn: (q: Queryable, raw: unknown) => Promise<T>, options?: TransactionOptions): Promise<T> {
    // options.aborted needs nothing here: a statement runs on this thread, so none is still
    // running when an abort is seen, and PGlite closes `tx` (a late write through it fails) as
    // it rolls back. A slow statement holds the whole process, its timeout included, until it ends.
    return (await this.open()).transaction(async (tx) => {
      const result = await fn(tx as unknown as Queryable, tx);
      // In-process, a round trip costs nothing: pending events (if any) are simply inserted.
      const pending = options?.pendingEvents?.() ?? [];
      if (pending.length) await this.executor.eventInsertMany(tx as unknown as Queryable, pending);
      return result;
    }).catch((err: unknown) => {
      // A statement that failed and was caught inside the callback aborted the transaction: every
      // later one is refused (25P02), or PGlite finds its COMMIT answered with ROLLBACK.
      if ((err as { code?: string })?.code === '25P02' || (err as Error)?.message === PGLITE_ROLLED_BACK) {
        throw new TransactionError('aborted', ABORTED_TRANSACTION, err);
      }
      throw err;
    });
  }

  async execScript(sql: string): Promise<void> {
    await (await this.open()).transaction((tx) => tx.exec(sql));
  }

  unwrapTransaction(tx: unknown, caller: string): Queryable {
    return unwrapPGliteTransaction(tx, caller);
  }

  async query<R>(text: string, params?: unknown[]) {
    const res = await (await this.open()).query<R>(text, params);
    return { rows: res.rows };
  }

  isTransientError(err: unknown): boolean {
    return isTransientPostgresError(err);
  }

  explainError(err: unknown, options?: { reaStatement?: boolean }): unknown {
    return explainPostgresError(options?.reaStatement ? reaStatementFailed(err) : err, this.schema, this.where);
  }

  async listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>> {
    const db = await this.open();
    const unlisten = await db.listen(channel, onNotify);
    return async () => {
      if (!db.closed) await unlisten();
    };
  }

  async notify(channel: string, payload: string): Promise<void> {
    await (await this.open()).query(this.sql.notify, [channel, payload]);
  }

  async close(): Promise<void> {
    try {
      // One still opening is closed once open (one that failed to open has nothing to close).
      const db = this.ownsDb ? await this.ready.catch(() => undefined) : undefined;
      if (db && !db.closed) await db.close();
    } finally {
      this.releaseLock();
    }
  }
}
